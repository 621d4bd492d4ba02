from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalkit.redact import REDACTED, Redactor, redact, redact_obj

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


def test_redact_obj_scrubs_every_string_and_keeps_keys_and_types() -> None:
    secret = SECRETS[0]
    obj = {secret: [secret, 1, 2.5, None, True, {"deep": (secret, "ok")}], "n": 3}
    out = redact_obj(obj)
    assert out == {secret: [REDACTED, 1, 2.5, None, True, {"deep": (REDACTED, "ok")}], "n": 3}
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
                     "\n", "x", "[REDACTED]", "_", "-"]) | st.text(max_size=5),
    max_size=12,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(json_like)
def test_redact_obj_never_raises_and_is_idempotent(obj: object) -> None:
    once = redact_obj(obj)
    assert repr(redact_obj(once)) == repr(once)  # repr: NaN is never equal to itself


@settings(max_examples=500, deadline=None)
@given(secretish_text)
def test_redact_is_idempotent(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(SECRETS), st.sampled_from(" \n,;()\"':")), max_size=6))
def test_every_separated_secret_is_removed(parts: list[tuple[str, str]]) -> None:
    text = "".join(secret + sep for secret, sep in parts)
    once = redact(text)
    assert not any(secret in once for secret in SECRETS)


@pytest.mark.parametrize("text", ['DB_PASSWORD="unclosed secret', "Authorization: 'unclosed secret"])
def test_an_unclosed_quote_does_not_shield_the_value(text: str) -> None:
    assert "unclosed" not in redact(text)
