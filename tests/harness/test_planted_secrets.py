"""Secrets planted in a whole ``evalkit run``, then ``ingest`` and ``report``: none survives.

Every shape the redactor knows, and every secret it is handed, is planted
through the real paths: the ``--api-key`` value (a mission flag), a
variable named by ``run --secret`` (no shape at all: only the declaration
gives it away), a credential-named environment variable, secrets used as
JSON object keys of a tool's arguments, a URL password, a JWT, a PEM private
key and the colon forms. The built-in runtime's scripted agents say them in
replies and tool arguments, the stub MCP plane echoes them back, a tool
process prints the declared one from its environment, a gated call carries
them into an approval record, a door refusal quotes one on stderr, and the
objective itself carries two.
Then every file under the test's folder (but the inputs, which hold the
secrets as written), the Parquet tables read back, and every command's
stdout and stderr are searched.
"""

from __future__ import annotations

import json
import os
import secrets
import string
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import _forked as forked
from tests._agent import answer, call
from tests._stream_builders import mission, padded

ALNUM = string.ascii_letters + string.digits
B64URL = ALNUM + "-_"


def _token(n: int, alphabet: str = ALNUM) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def _planted() -> dict[str, str]:
    return {
        "api_key": "ak-" + _token(24),
        "declared": "dsn-" + _token(24),
        "env_credential": "plain-" + _token(24),
        "openai": "sk-" + _token(32),
        "url_password": "pw" + _token(16),
        "jwt": f"eyJ{_token(20, B64URL)}.eyJ{_token(30, B64URL)}.{_token(43, B64URL)}",
        "pem": "\n".join(["MIIEow" + _token(58, ALNUM + "+/"), _token(64, ALNUM + "+/"),
                          _token(20, ALNUM + "+/") + "=="]),
        "password": _token(16), "passwd": _token(16), "api-key": _token(16),
        "x-api-key": _token(16), "token": _token(16), "secret": _token(16),
        "json_password": _token(16),
    }


def _said(p: dict[str, str]) -> str:
    """One text holding every planted secret in its shape."""
    return (f"use key {p['api_key']} and {p['openai']}; dsn {p['declared']}; env "
            f"{p['env_credential']}; db postgres://svc:{p['url_password']}@db.internal:5432/app;"
            f" jwt {p['jwt']};\n-----BEGIN RSA PRIVATE KEY-----\n{p['pem']}\n"
            "-----END RSA PRIVATE KEY-----\n"
            f"password: {p['password']}\npasswd: {p['passwd']}\napi-key: {p['api-key']}\n"
            f"X-Api-Key: {p['x-api-key']}\ntoken: {p['token']}\nSecret: {p['secret']}\n"
            f'{{"password": "{p["json_password"]}", "user": "bob"}}')


def _gone(p: dict[str, str]) -> list[str]:
    """What must appear nowhere: each secret, and each line of the key's body."""
    return [*(v for k, v in p.items() if k != "pem"), *p["pem"].split("\n")]


def _suite(root: Path, p: dict[str, str]) -> Path:
    said = _said(p)
    agents = root / "agents"
    agents.mkdir(parents=True)
    scripts = {
        "leaky": [
            call("mcp.echo", text=said),                                   # arguments + output
            call("mcp.fail", reason=f"upstream said {said}"),             # a tool error
            call("run_shell_command", command="echo dsn=$PLANTED_DSN; printenv PLANTED_API_TOKEN"
                                              "; echo done"),             # the tool's own env
            call("mcp.echo", **{"text": "keys", p["openai"]: "a", p["jwt"]: "b",
                                p["declared"]: {p["api_key"]: said}}),    # secrets as keys
            answer(f"Done. {said}"),
        ],
        "gated": [call("mcp.submit", asset_id="asset.7f3a", value=said), answer("never")],
        "refused": [answer("never")],
    }
    for key, items in scripts.items():
        (agents / f"{key}.yaml").write_text(yaml.safe_dump(list(items)), encoding="utf-8")
    key_flag = ["--api-key", p["api_key"]]
    missions = [
        mission("leaky", split="test", expects_tools=["mcp.echo"], answer_must_match=["Done"],
                flags=[*key_flag, "--profile", "dev"],
                prompt=f"Log in with {p['jwt']}, password: {p['password']}, then sum."),
        mission("gated", split="test", expects_tools=["mcp.submit"], flags=[
            *key_flag, "--grant", "mcp.write", "--gate-tool", "mcp.submit"]),
        mission("refused", split="test", flags=[*key_flag, "--gate-tool", p["jwt"]]),
    ]
    doc = {"name": "planted", "plane": "stub", "agents": "agents", "flags": ["chaining"],
           "tools": ["mcp.echo", "mcp.fail", "mcp.submit", "run_shell_command"],
           "missions": padded(missions)}
    path = root / "missions.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def _evalkit(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return forked.run([sys.executable, "-m", "evalkit.cli", *args], cwd=cwd, env=env,
                      capture_output=True, text=True, timeout=300)


def _parquet_text(path: Path) -> str:
    """Every value of a Parquet file (or folder of them), as JSON text."""
    import pyarrow.parquet as pq

    return json.dumps(pq.read_table(path).to_pylist(), default=str, ensure_ascii=False)


def _everything(root: Path, skip: Path) -> dict[str, str]:
    texts: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        if skip in path.parents or not path.is_file():
            continue
        if path.suffix == ".parquet":
            texts[f"{path} (read back)"] = _parquet_text(path)
        texts[str(path)] = path.read_bytes().decode("utf-8", "replace")
    return texts


@pytest.mark.slow
def test_no_planted_secret_survives_run_ingest_and_report(tmp_path: Path) -> None:
    p = _planted()
    inputs = tmp_path / "inputs"  # the suite and scripts hold the secrets as written
    suite = _suite(inputs, p)
    work = tmp_path / "work"
    work.mkdir()
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALKIT_")}
    env.update(PLANTED_DSN=p["declared"], PLANTED_API_TOKEN=p["env_credential"],
               EVALKIT_SANDBOX="none", EVALKIT_HOME=str(tmp_path / "state"),
               XDG_STATE_HOME=str(tmp_path / "xdg"))
    ran = _evalkit(work, env, "run", "--suite", str(suite), "--out", str(out), "--quiet",
                   "--secret", "PLANTED_DSN", "--allow-failures")
    assert ran.returncode == 0, ran.stderr
    ingested = _evalkit(work, env, "ingest", str(out))
    assert ingested.returncode == 0, ingested.stderr
    reported = _evalkit(work, env, "report", str(out))
    assert reported.returncode == 0, reported.stderr

    texts = _everything(tmp_path, skip=inputs)
    for name, done in (("run", ran), ("ingest", ingested), ("report", reported)):
        texts[f"{name} stdout"], texts[f"{name} stderr"] = done.stdout, done.stderr
    leaks = [(where, secret) for where, text in texts.items() for secret in _gone(p)
             if secret in text]
    assert leaks == [], "\n".join(f"{w}: {s}" for w, s in leaks)

    # Every file the harness writes was searched, and holds what it should.
    names = {Path(w).name for w in texts}
    assert {"events.jsonl", "meta.json", "model.jsonl", "tools.jsonl", "stdout.txt",
            "stderr.txt", "command.json", "report.json", "report.md", "report.html",
            "run.json"} <= names
    assert any(".parquet" in w for w in texts)
    assert any(n.startswith("ap_") for n in names), "the gated call left no approval record"
    assert any("audit" in Path(w).parts for w in texts), "no audit log was written"
    leaky = out / "leaky"
    runs = next((leaky / "runs").iterdir())
    _check_what_is_kept(p, _jsonl(leaky / "events.jsonl"), _jsonl(runs / "events.jsonl"))
    capture = json.loads((leaky / "command.json").read_text())
    assert capture["argv"][capture["argv"].index("--api-key") + 1] == "[REDACTED]"
    assert capture["argv"][capture["argv"].index("--secret") + 1] == "PLANTED_DSN"
    refused = (out / "refused" / "stderr.txt").read_text()
    assert "[REDACTED]" in refused and "--gate-tool" in refused


def _jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a stream, or of the run store's envelopes."""
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [line.get("record", line) for line in lines]


def _check_what_is_kept(p: dict[str, str], *streams: list[dict[str, Any]]) -> None:
    """The redaction is what hid the secrets: the rest is there, verbatim."""
    for records in streams:
        text = json.dumps(records)
        for kept in ("postgres://svc:[REDACTED]@db.internal", "password: [REDACTED]",
                     "X-Api-Key: [REDACTED]", "-----BEGIN RSA PRIVATE KEY-----\\n[REDACTED]",
                     '\\"password\\": \\"[REDACTED]\\", \\"user\\": \\"bob\\"', "dsn=[REDACTED]"):
            assert kept in text, kept
        calls = [r for r in records if r["event"] == "tool_call"]
        keyed = next(r["arguments"] for r in calls if r["arguments"].get("text") == "keys")
        # the two shaped keys both became [REDACTED] and neither value was lost
        assert sorted(keyed) == ["[REDACTED]", "[REDACTED]#2", "[REDACTED]#3", "text"]
        assert sorted(v for v in keyed.values() if isinstance(v, str)) == ["a", "b", "keys"]
