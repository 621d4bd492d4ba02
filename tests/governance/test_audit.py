"""The audit log: one fsync'd, redacted line per dispatch decision; moved or silenced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.governance.conftest import RunGoverned, answer, call, clean_env, cli, write_script

FIELDS = ["time", "tool", "scopes", "profile", "verdict", "reason", "exit_code", "duration_s",
          "bytes_out", "run_id"]


def test_one_line_per_decision_allowed_denied_error(governed: RunGoverned) -> None:
    done = governed([
        call("fs", action="write", path="a.txt", content="hello"),   # allowed
        call("run_shell_command", command="echo out; exit 3"),        # allowed, exit 3
        call("run_python_code", code="print(1)"),                      # denied (no python.exec)
        call("fs", action="delete", path="a.txt"),                     # error: invalid arguments
        answer("done"),
    ], profile="safe", grants=["fs.write", "shell.exec"], servers=0)
    audit = done.audit
    assert done.started["audit_ref"] == str(done.audit_dir.absolute() /
                                             f"{done.outcome.run_id}.jsonl")
    assert [(a["tool"], a["verdict"]) for a in audit] == [
        ("fs", "allowed"), ("run_shell_command", "allowed"), ("run_python_code", "denied"),
        ("fs", "error")]
    for line in audit:
        assert list(line)[:len(FIELDS)] == FIELDS
        assert line["run_id"] == done.outcome.run_id and line["profile"] == "safe"
        assert line["duration_s"] >= 0 and line["time"].endswith("Z")
    wrote, shell, python, bad = audit
    assert wrote["scopes"] == ["fs.read", "fs.write"] and wrote["exit_code"] == 0
    assert wrote["bytes_out"] == len(done.results()[0]["output"].encode())
    assert shell["exit_code"] == 3 and shell["bytes_out"] == len("out\n")
    assert python["reason"] == "denied under profile 'safe': python.exec needs --profile dev"
    assert python["exit_code"] is None and python["bytes_out"] == 0
    assert bad["exit_code"] is None and "invalid arguments" in bad["reason"]
    assert wrote["granted"] == ["fs.write", "shell.exec"]


def test_no_audit_means_audit_ref_null(governed: RunGoverned) -> None:
    done = governed([call("fs", action="list"), answer("x")], audit=False, servers=0)
    assert done.started["audit_ref"] is None and done.audit_dir is None


@pytest.mark.slow
def test_evalkit_audit_moves_and_silences_the_log(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.json", [call("fs", action="list"), answer("x")])

    def first(events: str, **env: str) -> dict:
        done = cli(tmp_path, "mission", "x", "--script", str(script), "--events", events,
                   env=clean_env(tmp_path, **env))
        assert done.returncode == 0, done.stderr
        return json.loads((tmp_path / events).read_text().splitlines()[0])

    moved = first("a.jsonl", EVALKIT_AUDIT=str(tmp_path / "elsewhere"))
    assert moved["audit_ref"] == str(tmp_path / "elsewhere" / f"{moved['run_id']}.jsonl")
    assert [json.loads(x)["tool"] for x in Path(moved["audit_ref"]).read_text().splitlines()] \
        == ["fs"]
    silenced = first("b.jsonl", EVALKIT_AUDIT="off")
    assert silenced["audit_ref"] is None
    unrecorded = first("c.jsonl", EVALKIT_RUNS="off")
    assert "run_id" not in unrecorded and Path(unrecorded["audit_ref"]).is_file()
    assert json.loads(Path(unrecorded["audit_ref"]).read_text())["run_id"] is None
    beside = clean_env(tmp_path, EVALKIT_RUNS=str(tmp_path / "m1" / "runs"))
    del beside["EVALKIT_AUDIT"]
    done = cli(tmp_path, "mission", "x", "--script", str(script), "--events", "d.jsonl",
               env=beside)
    assert done.returncode == 0, done.stderr
    started = json.loads((tmp_path / "d.jsonl").read_text().splitlines()[0])
    assert started["audit_ref"] == str(tmp_path / "m1" / "audit" / f"{started['run_id']}.jsonl")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    refused = cli(tmp_path, "mission", "x", "--script", str(script),
                  env=clean_env(tmp_path, EVALKIT_AUDIT=str(blocker / "audit")))
    assert refused.returncode == 2 and "cannot create the audit folder" in refused.stderr


def test_a_lone_surrogate_in_a_decision_is_escaped_not_a_crash(tmp_path: Path) -> None:
    from evalkit.runtime.governance.audit import AuditLog

    log = AuditLog(tmp_path)
    path = log.open("run_x")
    log.write({"tool": "fs", "reason": "cut \udcff", "run_id": "run_x"})
    assert json.loads(path.read_bytes())["reason"] == "cut \udcff"


def test_a_file_name_that_is_not_utf8_is_listed_read_and_audited(governed: RunGoverned,
                                                                  tmp_path: Path) -> None:
    """os reads such a name as lone surrogates; the run lists it, reads it back by that
    name and records every step, where writing it used to crash the mission."""
    import os

    root = tmp_path / "odd"
    root.mkdir()
    with open(os.path.join(os.fsencode(root), b"bad\xffname.txt"), "wb") as handle:
        handle.write(b"hello")
    done = governed([call("fs", action="list"), call("fs", action="read", path="bad\udcffname.txt"),
                     answer("done")], profile="safe", servers=0, root=root)
    assert done.outcome.outcome == "answered"
    listed, read = done.results()
    assert "bad\udcffname.txt" in listed["output"] and read["output"] == "hello"
    assert [a["bytes_out"] for a in done.audit] == [
        len(listed["output"].encode("utf-8", "surrogatepass")), 5]
