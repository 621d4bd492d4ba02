from __future__ import annotations

import json
import time
import urllib.parse
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalkit import redact as redact_module
from evalkit.errors import EvalkitError
from evalkit.redact import (
    REDACTED,
    Redactor,
    declared_secrets,
    is_credential_name,
    redact,
    redact_obj,
)

SECRETS = [
    "sk-abcdefghijklmnopqrstuvwxyz012345",
    "sk-proj-AbC123_def-456GHIjklMNOpqr",
    "sk-ant-api03-abcdefghijklmnop_QRS-tuvwx",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "gho_abcdefghijklmnopqrstuvwxyz0123456789",
    "ghu_abcdefghijklmnopqrstuvwxyz0123456789",
    "ghs_abcdefghijklmnopqrstuvwxyz0123456789",
    "ghr_abcdefghijklmnopqrstuvwxyz0123456789",
    "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "AKIAIOSFODNN7EXAMPLE",
    "xoxb-1234567890-abcdefghij",
    "xoxp-1234567890-1234567890-abcdef",
]


@pytest.mark.parametrize("secret", SECRETS)
def test_known_shapes_are_replaced_and_the_rest_kept(secret: str) -> None:
    text = f"before {secret} after, ünïcode ✓"
    assert redact(text) == f"before {REDACTED} after, ünïcode ✓"


@pytest.mark.parametrize("text", [
    "task-abcdefghijklmnopqrstuvwxyz",       # "sk-" inside a word
    "sk-learn is a library",                 # too short to be a key
    "xghp_abcdefghijklmnopqrstuvwxyz0123",   # glued to a word
    "AKIAIOSFODNN7EXAMPLEX",                 # 17 characters after AKIA
    "max_tokens=100 prompt_tokens=5 monkey=3 key=value",
    "if API_KEY == expected: pass",
    "Bearer of bad news",
    "plain prose, nothing secret; a=b",
])
def test_look_alikes_are_left_verbatim(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize(("text", "expected"), [
    ("curl -H 'Authorization: Bearer abc.def.ghi' https://x",
     "curl -H 'Authorization: [REDACTED]' https://x"),
    ("Authorization: Basic dXNlcjpwYXNz\nnext line", "Authorization: [REDACTED]\nnext line"),
    ('{"Authorization": "Basic dXNlcjpwYXNz", "a": 1}', '{"Authorization": "[REDACTED]", "a": 1}'),
    ("auth with Bearer eyJhbGciOi.eyJzdWIi.SflKx here", "auth with Bearer [REDACTED] here"),
    ("export OPENAI_API_KEY=abc123 && echo", "export OPENAI_API_KEY=[REDACTED] && echo"),
    ("DB_PASSWORD='hunter 2' x", "DB_PASSWORD='[REDACTED]' x"),
    ('GH_TOKEN="abc def"', 'GH_TOKEN="[REDACTED]"'),
    ("AWS_SECRET = wJalrXUtnFEMI", "AWS_SECRET = [REDACTED]"),
    ("https://x/?api_key=abc123&q=1", "https://x/?api_key=[REDACTED]&q=1"),
])
def test_prefixes_and_names_are_kept_values_replaced(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_credential_env_values_are_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "the key is plain-looking-value-42 ok"
    assert redact(text) == text
    monkeypatch.setenv("EVALKIT_TEST_API_KEY", "plain-looking-value-42")
    assert redact(text) == f"the key is {REDACTED} ok"
    monkeypatch.delenv("EVALKIT_TEST_API_KEY")
    assert redact(text) == text


def test_short_or_unrelated_env_values_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALKIT_TEST_TOKEN", "abc12")
    monkeypatch.setenv("EVALKIT_TEST_COLOUR", "magenta-ish")
    assert redact("abc12 magenta-ish") == "abc12 magenta-ish"


def test_redactor_extra_values_and_own_environ() -> None:
    r = Redactor(extra_values=["known-secret-xyz", "short"],
                 environ={"MY_PASSWORD": "from-fake-env", "HOME": "/home/someone"})
    assert r.redact("known-secret-xyz from-fake-env short /home/someone") == (
        f"{REDACTED} {REDACTED} short /home/someone")


def test_redact_obj_scrubs_every_string_keys_included_and_keeps_types() -> None:
    secret = SECRETS[0]
    obj = {secret: [secret, 1, 2.5, None, True, {"deep": (secret, "ok")}], "n": 3}
    out = redact_obj(obj)
    assert out == {REDACTED: [REDACTED, 1, 2.5, None, True, {"deep": (REDACTED, "ok")}], "n": 3}
    assert obj["n"] == 3 and obj[secret][0] == secret  # the input is untouched


def test_large_text_keeps_everything_but_the_secret() -> None:
    """Speed is measured by benchmarks/bench_redact.py; this holds the behaviour."""
    line = "def f(x):\n    y = x + 1  # high through right, bearer of news\n"
    text = line * 20000 + SECRETS[3]
    out = redact(text)
    assert out == line * 20000 + REDACTED
    plain = "nothing to see here " * 50000
    assert redact(plain) is plain


json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)

secretish_text = st.lists(
    st.sampled_from([*SECRETS, "Bearer ", "Authorization: ", "API_KEY=", "'", '"', "=", " ",
                     "\n", "x", "[REDACTED]", "_", "-", "password: ", "Token: ", '"secret": ',
                     "\\", '\\"', "https://", "u:", "@", "str", " = ", "eyJhbGciOiJIUzI1",
                     "eyJzdWIiOiIxMjM0", ".", "-----BEGIN RSA PRIVATE KEY-----", "MIIEowIBAAKC",
                     "\\n", "-----END RSA PRIVATE KEY-----", "#2"]) | st.text(max_size=5),
    max_size=16,
).map("".join)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(json_like)
def test_redact_obj_never_raises_and_is_idempotent(obj: object) -> None:
    once = redact_obj(obj)
    assert repr(redact_obj(once)) == repr(once)  # repr: NaN is never equal to itself


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(secretish_text)
def test_redact_is_idempotent(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(SECRETS), st.sampled_from(" \n,;()\"':")), max_size=6))
def test_every_separated_secret_is_removed(parts: list[tuple[str, str]]) -> None:
    text = "".join(secret + sep for secret, sep in parts)
    once = redact(text)
    assert not any(secret in once for secret in SECRETS)


@pytest.mark.parametrize("text", ['DB_PASSWORD="unclosed secret', "Authorization: 'unclosed secret"])
def test_an_unclosed_quote_does_not_shield_the_value(text: str) -> None:
    assert "unclosed" not in redact(text)


# -- shapes added for issue 29: URL passwords, JWTs, PEM private keys, colon forms -----------

JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
       ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
PEM_BODY = "MIIEowIBAAKCAQEA7bq9v0xLk1q\nZz0fYk+/abcDEF0123456789==\n"
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}-----END RSA PRIVATE KEY-----"


@pytest.mark.parametrize(("text", "expected"), [
    ("postgres://svc:hunter22@db.internal:5432/app", "postgres://svc:[REDACTED]@db.internal:5432/app"),
    ("redis://:s3cret-pw@cache:6379/0", "redis://:[REDACTED]@cache:6379/0"),
    ("url='https://bob:p@ss@host/x'", "url='https://bob:[REDACTED]@host/x'"),   # the last @
    ("https://user:p%40ss@host/", "https://user:[REDACTED]@host/"),
])
def test_a_url_password_is_withheld_and_the_user_and_host_kept(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize("text", [
    "http://host:8080/a@b", "ssh://git@github.com/org/repo", "git@github.com:org/repo.git",
    "mail user@example.com", "see https://example.com/x?a=b@c", "ftp://host:21",
])
def test_urls_without_a_password_are_left_alone(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize("around", ["{}", "Bearer-less {} here", '{{"id_token": "{}"}}',
                                    "cookie={};", "{}\n"])
def test_a_jwt_is_replaced_whole(around: str) -> None:
    out = redact(around.format(JWT))
    assert JWT.split(".")[1] not in out and JWT.split(".")[2] not in out
    assert REDACTED in out
    unsigned = JWT.rsplit(".", 1)[0] + "."
    assert redact(f"t {unsigned} x") == f"t {REDACTED} x"


@pytest.mark.parametrize("text", ["eyJhbGciOi", "keyJar.eyJfoo.bar", "theyJust.said.it"])
def test_jwt_look_alikes_are_left_alone(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize(("text", "expected"), [
    (PEM, "-----BEGIN RSA PRIVATE KEY-----\n[REDACTED]\n-----END RSA PRIVATE KEY-----"),
    (PEM.replace("RSA ", "").replace("\n", "\r\n"),
     "-----BEGIN PRIVATE KEY-----\r\n[REDACTED]\r\n-----END PRIVATE KEY-----"),
    (PEM.replace("RSA", "OPENSSH"),
     "-----BEGIN OPENSSH PRIVATE KEY-----\n[REDACTED]\n-----END OPENSSH PRIVATE KEY-----"),
    # JSON-escaped line breaks, inside a JSON string
    ('{"key": "' + PEM.replace("\n", "\\n") + '\\n", "n": 1}',
     '{"key": "-----BEGIN RSA PRIVATE KEY-----\\n[REDACTED]\\n-----END RSA PRIVATE KEY-----\\n",'
     ' "n": 1}'),
    # an encrypted key: its header lines and the blank line go too
    ("-----BEGIN ENCRYPTED PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,3F2A"
     "\n\nMIIEowIBAAKCAQEA\n-----END ENCRYPTED PRIVATE KEY-----\nafter",
     "-----BEGIN ENCRYPTED PRIVATE KEY-----\n[REDACTED]\n-----END ENCRYPTED PRIVATE KEY-----"
     "\nafter"),
    # cut short (a truncated tool output): everything of the body that is there goes
    ("head -3 id_rsa:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nZz0fYk+/abc",
     "head -3 id_rsa:\n-----BEGIN RSA PRIVATE KEY-----\n[REDACTED]"),
    ("-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF0\n=Xy1\n-----END PGP PRIVATE KEY BLOCK-----",
     "-----BEGIN PGP PRIVATE KEY BLOCK-----\n[REDACTED]\n-----END PGP PRIVATE KEY BLOCK-----"),
])
def test_a_pem_private_key_loses_its_body_and_keeps_its_armour(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize("text", [
    'if line.startswith("-----BEGIN RSA PRIVATE KEY-----"):',
    "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIE\n-----END CERTIFICATE-----",
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0B\n-----END PUBLIC KEY-----",
])
def test_what_is_not_a_private_key_block_is_left_alone(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize(("text", "expected"), [
    ("password: hunter2", "password: [REDACTED]"),
    ("Password: hunter2 and more", "Password: [REDACTED] and more"),
    ("PASSWD: 'hunter 2'", "PASSWD: '[REDACTED]'"),
    ("passwd: x", "passwd: [REDACTED]"),
    ("token: abc123, next", "token: [REDACTED], next"),
    ("secret: s3cr3t;", "secret: [REDACTED];"),
    ("api-key: abc123", "api-key: [REDACTED]"),
    ("X-Api-Key: abc123\r\nHost: x", "X-Api-Key: [REDACTED]\r\nHost: x"),
    ("x-api-key: abc123", "x-api-key: [REDACTED]"),
    ("API_KEY: abc123", "API_KEY: [REDACTED]"),
    ("client_secret: abc123", "client_secret: [REDACTED]"),
    ("X-Auth-Token: abc123", "X-Auth-Token: [REDACTED]"),
    ('{"password": "hunter 2", "user": "bob"}', '{"password": "[REDACTED]", "user": "bob"}'),
    ('{"token":"abc123","n":1}', '{"token":"[REDACTED]","n":1}'),
    ("{'secret': 'abc123'}", "{'secret': '[REDACTED]'}"),
    ('{\\"api_key\\": \\"abc123\\"}', '{\\"api_key\\": \\"[REDACTED]\\"}'),   # JSON in a string
    ('"password": "a\\"b" x', '"password": "[REDACTED]" x'),
    ("token: 12345", "token: [REDACTED]"),
    ("password: str = 'hunter2'", "password: str = '[REDACTED]'"),
    ("  password: hunter2\n  user: bob", "  password: [REDACTED]\n  user: bob"),     # YAML
])
def test_colon_forms_keep_the_name_and_lose_the_value(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize("text", [
    "the token count was 5",
    "max_tokens: 100, prompt_tokens: 5",
    "token_count: 5 tokenizer: gpt2 secret_name: db",
    "def connect(host: str, password: str, token: Optional[str] = None) -> bytes:",
    "password: str | None = None",
    "let token: String = read();",
    'password: ""  token: null  secret: None  api_key: ${API_KEY}',
    "token::Kind::Ident and s[token:end]",
    "SyntaxError: Unexpected token: '<'",
    "a password is a secret, never to be shared",
])
def test_prose_and_code_about_secrets_are_left_alone(text: str) -> None:
    assert redact(text) == text


def test_json_escaped_line_breaks_are_boundaries_and_ends() -> None:
    """A model's reply in the json protocol is JSON text, recorded inside a string."""
    lines = ["intro", "password: hunter2", SECRETS[0], f"Bearer {'t' * 12}",
             "Authorization: Basic dXNlcjpwYXNz", "API_TOKEN=abc123", JWT, "ok"]
    escaped = json.dumps({"answer": "\n".join(lines)})
    assert json.loads(redact(escaped))["answer"].split("\n") == [
        "intro", f"password: {REDACTED}", REDACTED, f"Bearer {REDACTED}",
        f"Authorization: {REDACTED}", f"API_TOKEN={REDACTED}", REDACTED, "ok"]


def test_secrets_escaped_twice_are_found_too() -> None:
    """A Python repr inside a JSON reply: line breaks and quotes escaped twice."""
    code = f"raise RuntimeError({PEM + chr(10) + 'password: hunter2' + chr(10)!r})"
    escaped = json.dumps(json.dumps({"tool": "run_python_code", "arguments": {"code": code}}))
    out = redact(escaped)
    assert "MIIEowIBAAKCAQEA" not in out and "hunter2" not in out
    assert "-----BEGIN RSA PRIVATE KEY-----" in out and "password: " in out
    quoted = json.dumps(json.dumps({"token": "abc12345"}))
    assert "abc12345" not in redact(quoted)


@pytest.mark.parametrize("text", [
    "password: str" + " " * 200_000 + "x",
    "password: " + "a" * 200_000,
    "https://u" + "a" * 200_000,
    "token: '" + "a" * 200_000,
    "-----BEGIN PRIVATE KEY-----\n" + "ab " * 100_000,
    "x://" * 50_000 + "@",
    ("eyJ" + "a" * 10 + ".") * 30_000,
    "API_KEY=" * 50_000,
    '"password": ' * 30_000,
    "password: str = " * 30_000,
])
def test_hostile_texts_cost_time_in_proportion_to_their_length(text: str) -> None:
    started = time.perf_counter()
    redact(text)
    assert time.perf_counter() - started < 2.0


# -- the secrets it was handed -------------------------------------------------------------


def test_values_it_is_handed_are_scrubbed_in_every_spelling() -> None:
    value = 'p4ss "w/rd"\\n'
    r = Redactor(extra_values=[value], environ={})
    assert r.redact(f"raw {value} end") == f"raw {REDACTED} end"
    escaped = json.dumps(value)[1:-1]
    assert r.redact(f'{{"v": "{escaped}"}}') == f'{{"v": "{REDACTED}"}}'
    quoted = urllib.parse.quote(value, safe="")
    assert r.redact(f"https://h/?q={quoted}&x=1") == f"https://h/?q={REDACTED}&x=1"


def test_added_values_are_scrubbed_from_then_on() -> None:
    r = Redactor(environ={})
    text = "the key is plain-looking-value-42 ok"
    assert r.redact(text) == text
    r.add(["plain-looking-value-42", "short", None])  # type: ignore[list-item]
    assert r.redact(text) == f"the key is {REDACTED} ok"
    assert r.redact("short") == "short"


def test_a_known_value_wins_over_a_shape_that_overlaps_it() -> None:
    r = Redactor(extra_values=["alice:hunter22"], environ={})
    assert r.redact("https://alice:hunter22@h/x") == f"https://{REDACTED}@h/x"


def test_remember_teaches_the_process_redactor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redact_module, "_DEFAULT", Redactor())
    redact_module.remember(["an-api-key-without-shape", None, "x"])
    assert redact("key an-api-key-without-shape, x") == f"key {REDACTED}, x"
    assert redact_obj({"an-api-key-without-shape": 1}) == {REDACTED: 1}


def test_withheld_names_are_the_redactors_credential_names() -> None:
    from evalkit.runtime.tools.codetools import tool_environment

    env = {"DB_PASSWD": "a", "GH_TOKEN": "b", "AWS_SECRET_ACCESS_KEY": "c", "MY_CREDENTIALS": "d",
           "HOME": "/h", "KEYBOARD": "x"}
    kept = tool_environment(env)
    assert set(kept) == {"HOME", "PYTHONIOENCODING"}  # KEYBOARD holds KEY: withheld too
    assert [k for k in env if is_credential_name(k)] == [k for k in env if k not in kept]


def test_declared_secrets_are_read_from_the_environment() -> None:
    env = {"DSN": "postgres://u:pw-123456@h/db", "EMPTY": "", "PIN": "1234"}
    assert declared_secrets(["DSN", "EMPTY"], env) == ["postgres://u:pw-123456@h/db"]
    with pytest.raises(EvalkitError, match=r"^--secret DSNN: no environment variable DSNN is "
                                           r"set; --secret takes the name"):
        declared_secrets(["DSNN"], env)
    with pytest.raises(EvalkitError, match="^--secret PIN: its value is too short"):
        declared_secrets(["PIN"], env)


# -- keys ------------------------------------------------------------------------------------


def test_secret_keys_are_scrubbed_and_colliding_keys_all_kept() -> None:
    a, b = SECRETS[3], SECRETS[0]  # "ghp_…" sorts before "sk-…": it is numbered first
    obj = {"n": 1, b: "from b", a: "from a", REDACTED: "was already there", f"x {a}": 2}
    out = redact_obj(obj)
    assert out == {"n": 1, f"{REDACTED}#3": "from b", f"{REDACTED}#2": "from a",
                   REDACTED: "was already there", f"x {REDACTED}": 2}
    assert list(out) == ["n", f"{REDACTED}#3", f"{REDACTED}#2", REDACTED, f"x {REDACTED}"]
    # the same object in any key order gives the same pairs: an approval still matches
    again = redact_obj(dict(reversed(list(obj.items()))))
    assert sorted(again.items()) == sorted(out.items())
    assert redact_obj(out) == out


def test_keys_that_are_not_strings_are_kept() -> None:
    assert redact_obj({1: SECRETS[0], None: "x", (1, 2): "y"}) == {1: REDACTED, None: "x",
                                                                   (1, 2): "y"}


# -- no known secret survives anywhere in a nested object ------------------------------------

#: Planted text (left) and what must not survive of it (right).
PLANTED = [
    ("Q7LITERALSECRETXYZ", "Q7LITERALSECRETXYZ"),         # a value it was handed, no shape
    (SECRETS[0], SECRETS[0]),
    (SECRETS[9], SECRETS[9]),
    (JWT, JWT.split(".")[1]),
    (PEM, PEM_BODY.split("\n")[0]),
    ("password: Hunter2Hunter", "Hunter2Hunter"),
    ("https://svc:Pw9Pw9Pw9@db.host/x", "Pw9Pw9Pw9"),
    ("Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
]
# Plain text cannot spell any shape: no capitals, digits, "=", ":", "-" or "b", "k", "y".
plain = st.text(alphabet="acdefhijlmnopqrstuvwxz ,.", min_size=1, max_size=12)
leaf = st.one_of(plain.map(lambda t: ("plain", t)),
                 st.tuples(plain, st.sampled_from(PLANTED), plain).map(
                     lambda p: ("secret", f"{p[0]} {p[1][0]} {p[2]}")),
                 st.integers().map(lambda n: ("plain", n)))
key = st.one_of(plain, st.sampled_from([t for t, _ in PLANTED]))
nested = st.recursive(leaf, lambda children: st.one_of(
    st.lists(children, max_size=4), st.dictionaries(key, children, max_size=4)), max_leaves=25)


def _bare(tree: Any) -> Any:
    """The object a tree of tagged leaves stands for."""
    if isinstance(tree, tuple):
        return tree[1]
    if isinstance(tree, list):
        return [_bare(t) for t in tree]
    return {k: _bare(v) for k, v in tree.items()}


def _kept(tree: Any, out: Any, redactor: Redactor) -> None:
    """Every plain leaf and plain key is where it was; nothing was dropped."""
    if isinstance(tree, tuple):
        if tree[0] == "plain":
            assert out == tree[1]
        return
    if isinstance(tree, list):
        assert isinstance(out, list) and len(out) == len(tree)
        for t, o in zip(tree, out, strict=True):
            _kept(t, o, redactor)
        return
    assert isinstance(out, dict) and len(out) == len(tree)
    for (k, t), (o_key, o) in zip(tree.items(), out.items(), strict=True):
        clean = redactor.redact(k)
        assert o_key == k if clean == k else o_key.startswith(clean)
        _kept(t, o, redactor)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(nested)
def test_no_known_secret_survives_at_any_depth_and_the_rest_is_kept(tree: Any) -> None:
    redactor = Redactor(extra_values=["Q7LITERALSECRETXYZ"], environ={})
    out = redactor.redact_obj(_bare(tree))
    dumped = json.dumps(out, ensure_ascii=False) + json.dumps(out)
    for _, gone in PLANTED:
        assert gone not in dumped
    _kept(tree, out, redactor)
    assert redactor.redact_obj(out) == out
