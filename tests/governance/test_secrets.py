"""Planted secrets never land in any file a run leaves behind, nor on stderr.

Secrets are planted everywhere a hostile or careless run could carry them: a
credential-named environment variable of the mission process, the
``--api-key`` value, a variable named by ``--secret``, the model's tool
arguments (values and object keys), tool output, tool errors and
tracebacks, a gated call's arguments (the approval record), the objective,
control lines and a door refusal. Then every file under the run store, the
audit folder, the approvals folder and the event sink, plus stdout and
stderr, is searched. (``tests/harness/test_planted_secrets.py`` does the same
for a whole ``evalkit run``, ``ingest`` and ``report``.)
"""

from __future__ import annotations

import json
import os
import secrets
import string
import sys
from pathlib import Path

import pytest

from tests import _forked as forked
from tests.governance.conftest import STUB, answer, call, clean_env, cli, write_script


def _token(alphabet: str, n: int) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


ALNUM = string.ascii_letters + string.digits


@pytest.mark.slow
def test_planted_secrets_appear_in_no_file_and_not_on_stderr(tmp_path: Path) -> None:
    env_secret = "plain-" + _token(ALNUM, 24)  # no shape at all: only its name gives it away
    shaped = {
        "openai": "sk-" + _token(ALNUM, 32),
        "anthropic": "sk-ant-api03-" + _token(ALNUM, 24),
        "github": "ghp_" + _token(ALNUM, 36),
        "aws": "AKIA" + _token(string.ascii_uppercase + string.digits, 16),
        "slack": "xoxb-" + _token(string.digits, 10) + "-" + _token(ALNUM, 12),
        "bearer": _token(ALNUM, 28),
        "assignment": _token(ALNUM, 18),
        "authorization": _token(ALNUM, 22),
        "url_password": _token(ALNUM, 18),
        "jwt": f"eyJ{_token(ALNUM, 18)}.eyJ{_token(ALNUM, 26)}.{_token(ALNUM, 40)}",
        "pem": "MIIEow" + _token(ALNUM + "+/", 58),
        "password": _token(ALNUM, 16),
        "x_api_key": _token(ALNUM, 16),
        "json_token": _token(ALNUM, 16),
    }
    api_key = "ak-" + _token(ALNUM, 24)    # no shape: only --api-key gives it away
    declared = "dsn-" + _token(ALNUM, 24)  # no shape, no credential name: only --secret does
    said = (f"key {shaped['openai']} and {shaped['anthropic']}, gh {shaped['github']}, "
            f"aws {shaped['aws']}, slack {shaped['slack']}, Bearer {shaped['bearer']}, "
            f"DB_PASSWORD={shaped['assignment']}, Authorization: Basic {shaped['authorization']}"
            f"\n env {env_secret} api {api_key} dsn {declared} "
            f"db redis://:{shaped['url_password']}@cache:6379/0 jwt {shaped['jwt']}\n"
            f"-----BEGIN PRIVATE KEY-----\n{shaped['pem']}\n-----END PRIVATE KEY-----\n"
            f"password: {shaped['password']}\nX-Api-Key: {shaped['x_api_key']}\n"
            f'{{"token": "{shaped["json_token"]}"}}')
    planted = [env_secret, api_key, declared, *shaped.values()]
    work = tmp_path / "work"
    work.mkdir()
    inputs = tmp_path / "inputs"  # the script holds the secrets as written: not searched
    inputs.mkdir()
    script = write_script(inputs / "s.json", [
        call("mcp.echo", text=said),                                        # arguments + output
        call("mcp.fail", reason=f"upstream said {said}"),                   # a tool error
        call("run_python_code", code=f"raise RuntimeError({said!r})"),       # a traceback
        call("run_shell_command", command=f"echo {shaped['openai']} {env_secret}"),
        call("fs", action="write", path="notes.txt", content=said),
        call("mcp.echo", **{"text": "k", api_key: 1, shaped["jwt"]: {declared: said}}),  # keys
        call("mcp.submit", asset_id="asset.7f3a", value=said),              # gated: approval
        answer("never"),
    ])
    env = clean_env(tmp_path, PLANTED_API_TOKEN=env_secret, PLANTED_DSN=declared)
    events = tmp_path / "events.jsonl"
    control_read, control_write = os.pipe()
    os.write(control_write, f"{said}\n".encode())                       # a malformed control line
    os.write(control_write, json.dumps({"control": "gate_decision", "approval_id":
                                        "ap_0123456789abcdef", "approve": True,
                                        "decided_by": ""}).encode() + b"\n")
    os.close(control_write)
    ran = forked.run(
        [sys.executable, "-m", "evalkit.cli", "mission", f"use {said}", "--script", str(script),
         "--mcp-stdio", STUB, "--profile", "dev", "--unsandboxed", "--gate-tool", "mcp.submit",
         "--events", str(events), "--control", f"fd:{control_read}", "--api-key", api_key,
         "--secret", "PLANTED_DSN"],
        cwd=work, env=env, pass_fds=(control_read,), capture_output=True, text=True, timeout=120)
    os.close(control_read)
    assert ran.returncode == 0, ran.stderr
    records = [json.loads(line) for line in events.read_text().splitlines()]
    assert records[-1]["outcome"] == "awaiting_approval"
    assert "control: dropped" in ran.stderr
    # a door refusal quoting a secret, and a decision command quoting one
    refused = cli(work, "mission", "x", "--script", str(script), "--mcp-stdio", STUB,
                  "--gate-tool", shaped["github"], env=env)
    assert refused.returncode == 2 and "does not offer" in refused.stderr
    approval_id = records[-2]["approval_id"]
    decided = cli(work, "approvals", "approve", approval_id, "--decided-by", "dana",
                  "--note", f"fine, {shaped['slack']}", env=env)
    assert decided.returncode == 0, decided.stderr
    shown = cli(work, "approvals", "show", approval_id, env=env)

    # what the run left behind
    files = [p for folder in ("runs", "audit", "approvals") for p in (tmp_path / folder).rglob("*")
             if p.is_file()] + [events]
    names = {p.name for p in files}
    assert {"events.jsonl", "model.jsonl", "tools.jsonl", "meta.json"} <= names
    assert any(n.startswith("ap_") for n in names) and any(p.parent.name == "audit"
                                                           for p in files)
    texts = {str(p): p.read_text(encoding="utf-8", errors="replace") for p in files}
    texts.update({"stdout": ran.stdout, "stderr": ran.stderr, "refused.stderr": refused.stderr,
                  "decided.stdout": decided.stdout, "shown.stdout": shown.stdout})
    leaks = [(where, secret) for where, text in texts.items() for secret in planted
             if secret in text]
    assert leaks == []
    # and the redaction is what hid them: the rest of the text is there, verbatim
    assert "[REDACTED]" in texts[str(events)] and "DB_PASSWORD=[REDACTED]" in texts[str(events)]
    assert "upstream said" in texts[str(events)]
    for kept in ("redis://:[REDACTED]@cache", "password: [REDACTED]", "X-Api-Key: [REDACTED]",
                 "-----BEGIN PRIVATE KEY-----\\n[REDACTED]\\n-----END PRIVATE KEY-----"):
        assert kept in texts[str(events)], kept
    keyed = next(r["arguments"] for r in records if r["event"] == "tool_call"
                 and r["arguments"].get("text") == "k")
    # both secret keys withheld, neither value lost ("ak-…" sorts before "eyJ…")
    assert list(keyed) == ["text", "[REDACTED]", "[REDACTED]#2"] and keyed["[REDACTED]"] == 1
    assert list(keyed["[REDACTED]#2"]) == ["[REDACTED]"]
    record = json.loads(shown.stdout)
    assert record["arguments"]["asset_id"] == "asset.7f3a" and "[REDACTED]" in record["note"]
    # the file the model wrote is the agent's own work product, outside every record
    assert (work / "notes.txt").read_text() == said
