"""A disk that fills while a mission records: the surroundings' fault, said as such.

The run store's writes fail on a real errno (ENOSPC through the store's own
``os.write``, or the kernel's file size limit in a real process). Before, the
refusal escaped the loop as a crash: exit 3, "internal error", a traceback —
evalkit's bug, when it was the disk. Now the mission ends there, incomplete,
with the reason ``recording failed: …`` on the stream (and in the recording
when the disk still takes that line), and ``evalkit mission`` exits 5.
"""

from __future__ import annotations

import json
import resource
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalkit.runtime.command import EXIT_UNRECORDED, mission_command
from evalkit.store.reader import read_stream
from tests._agent import answer, call, read_jsonl, write_script
from tests._disk import appends_fill, fills_on
from tests.runtime.conftest import RunMission
from tests.runtime.test_mission_cli import clean_env, evalkit

LIST = call("fs", action="list", path=".")


def test_a_full_disk_under_the_stream_ends_the_mission_with_its_reason(
        mission: RunMission, monkeypatch: pytest.MonkeyPatch) -> None:
    refused = appends_fill(monkeypatch, "events.jsonl", lines=3)  # started, step, tool_call
    done = mission([LIST, answer("never")], mcp=False, whole=False)
    reason = done.records[-1]["reason"]
    assert done.outcome.outcome == "incomplete" and done.outcome.error is None
    assert reason.startswith("recording failed: cannot record to ")
    assert reason.endswith("events.jsonl: No space left on device.")
    assert done.outcome.unrecorded == reason.removeprefix("recording failed: ")
    # The sink has the whole story up to the refusal, and the end; nothing after it ran.
    assert done.names == ["mission_started", "step_started", "tool_call", "mission_finished"]
    assert refused  # the tool_result's line, then mission_finished's
    # The recording keeps whole lines only: the part the disk took was cut back.
    assert done.run_dir is not None
    assert (done.run_dir / "events.jsonl").read_bytes().endswith(b"}}\n")
    assert [r["event"] for r in read_stream(done.run_dir).records] == [
        "mission_started", "step_started", "tool_call"]


def test_room_again_for_the_last_line_records_the_reason_too(
        mission: RunMission, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long model reply the disk could not take; the short last word still fits."""
    appends_fill(monkeypatch, "model.jsonl", lines=0)
    done = mission([answer("x" * 5000)], mcp=False, whole=False)
    assert done.outcome.outcome == "incomplete"
    assert done.records[-1]["reason"].startswith("recording failed: cannot record to ")
    assert done.run_dir is not None
    recorded = read_stream(done.run_dir).records
    assert recorded[-1] == done.records[-1]  # the reason is in the recording as well
    meta = json.loads((done.run_dir / "meta.json").read_text())["meta"]
    assert meta["reason"] == done.records[-1]["reason"]


def test_a_meta_json_the_disk_refuses_at_the_start_is_a_refusal_to_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fills_on(monkeypatch, "meta.json")
    script = write_script(tmp_path / "s.json", [answer("x")])
    result = CliRunner().invoke(
        mission_command, ["x", "--script", str(script), "--events", str(tmp_path / "e.jsonl")],
        env={"EVALKIT_RUNS": str(tmp_path / "runs"), "EVALKIT_AUDIT": "off",
             "EVALKIT_APPROVALS": "off", "EVALKIT_SANDBOX": "none"})
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("Error: cannot write ")
    assert result.stderr.strip().endswith("meta.json: No space left on device.")
    assert "Traceback" not in result.output and "internal error" not in result.output


def _small_files() -> None:
    """In the child: no file grows past 4 KiB (EFBIG, the signal ignored), as a disk
    nearly full refuses the first long write. The child writes no bytecode: CPython does
    not check that a module's cache was written whole, and one cut at 4 KiB broke every
    later import of that module."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


@pytest.mark.slow
def test_evalkit_mission_on_a_full_disk_exits_5_with_one_error_line(tmp_path: Path) -> None:
    big = "print('" + "y" * 6000 + "')"
    script = write_script(tmp_path / "s.json", [call("run_python_code", code=big),
                                                answer("done")])
    events = tmp_path / "events.jsonl"
    done = subprocess.run(
        evalkit("x", "--script", str(script), "--events", str(events), "--profile", "dev",
                "--unsandboxed"),
        cwd=tmp_path, capture_output=True, text=True, timeout=60, preexec_fn=_small_files,
        env=clean_env(EVALKIT_RUNS=str(tmp_path / "runs"), EVALKIT_AUDIT="off",
                      EVALKIT_APPROVALS="off", PYTHONDONTWRITEBYTECODE="1"))
    assert done.returncode == EXIT_UNRECORDED == 5, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert errors == [line for line in done.stderr.splitlines() if line], done.stderr
    assert len(errors) == 1 and errors[0].startswith(
        "Error: the run could not be recorded whole: cannot record to ")
    assert errors[0].endswith(": File too large.")
    last: dict[str, Any] = read_jsonl(events)[-1]
    assert last["event"] == "mission_finished" and last["outcome"] == "incomplete"
    assert last["reason"].startswith("recording failed: ")


def test_the_taxonomy_files_a_run_the_disk_ended_as_infrastructure(
        mission: RunMission, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from evalkit.eval.taxonomy import INFRA, categorize

    appends_fill(monkeypatch, "model.jsonl", lines=0)
    done = mission([answer("x" * 5000)], mcp=False, whole=False)
    graded = tmp_path / "graded.jsonl"
    graded.write_text("".join(json.dumps(r) + "\n" for r in done.records), encoding="utf-8")
    category, infra = categorize({"passed": False, "kpis": {"records": len(done.records)}},
                                 events=graded)
    assert category == INFRA and infra == f"recording_failure: {done.records[-1]['reason']}"
