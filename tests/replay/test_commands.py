"""``evalkit replay`` and ``evalkit mission --replay/--resume`` as a person types them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.cli import main
from tests.replay.conftest import Lab, answer, call, read_jsonl, without_ids


@pytest.mark.slow
def test_evalkit_replay_prints_the_narration_and_the_drift_line(lab: Lab) -> None:
    original = lab.record([call("mcp.add", a=2, b=3), answer("5")])
    run_id = original.launched.outcome.run_id
    events = lab.root / "replay.jsonl"
    result = CliRunner().invoke(main, ["replay", run_id, "--events", str(events),
                                       "--objective", "add 2 and 4"], env=lab.env())
    assert result.exit_code == 0, result.output
    assert "[step 0] -> mcp.add" in result.stdout
    assert f"of {run_id}: answered after 2 step(s)" in result.stdout
    assert "drift: first at model call 1 (mission, message 1)" in result.stdout
    assert read_jsonl(events)[-1]["outcome"] == "answered"


@pytest.mark.slow
def test_evalkit_replay_forks_with_a_script(lab: Lab) -> None:
    original = lab.record([call("mcp.add", a=2, b=3), answer("5")])
    script = lab.script([answer("forked")], "fork.json")
    result = CliRunner().invoke(main, ["replay", original.launched.outcome.run_id, "--quiet",
                                       "--live-from", "1", "--script", script], env=lab.env())
    assert result.exit_code == 0, result.output
    assert "fork: the live model answered from model call 2" in result.stdout


def test_live_model_flags_without_a_fork_are_refused(lab: Lab) -> None:
    original = lab.record([answer("5")], mcp=False)
    result = CliRunner().invoke(main, ["replay", original.launched.outcome.run_id,
                                       "--provider", "openai"], env=lab.env())
    assert result.exit_code == 2
    assert "give --live-from STEP too" in result.output
    result = CliRunner().invoke(main, ["replay", "run_missing"], env=lab.env())
    assert result.exit_code == 2 and "no such run: run_missing" in result.output


@pytest.mark.slow
def test_mission_replay_and_tools_flags(lab: Lab) -> None:
    original = lab.record([call("mcp.echo", text="hi"), answer("hi")])
    run_id = original.launched.outcome.run_id
    events = lab.root / "e.jsonl"
    result = CliRunner().invoke(main, ["mission", "--replay", run_id, "--tools", "live",
                                       "--events", str(events), "--unsandboxed"], env=lab.env())
    assert result.exit_code == 0, result.output
    assert without_ids(read_jsonl(events)) == without_ids(original.records)
    result = CliRunner().invoke(main, ["mission", "x", "--tools", "live", "--script", "s.json"],
                                env=lab.env())
    assert result.exit_code == 2 and "give --replay RUN too" in result.output
    result = CliRunner().invoke(main, ["mission", "--replay", run_id, "--resume", run_id],
                                env=lab.env())
    assert result.exit_code == 2 and "do not go together" in result.output
    result = CliRunner().invoke(main, ["mission", "--replay", run_id, "--tools", "maybe"],
                                env=lab.env())
    assert result.exit_code == 2 and "--tools takes recorded or live" in result.output


def test_mission_resume_refusal_names_the_outcome(lab: Lab) -> None:
    original = lab.record([answer("done")], mcp=False)
    run_id = original.launched.outcome.run_id
    result = CliRunner().invoke(main, ["mission", "--resume", run_id, "--script", "s.json"],
                                env=lab.env())
    assert result.exit_code == 2
    assert f"Error: run {run_id} ended answered: that is a conclusion" in result.output
    meta = json.loads((original.run_dir / "meta.json").read_text())
    assert meta["meta"]["outcome"] == "answered"  # a refused resume changes nothing


def _recorded_copy(lab: Lab, name: str):
    import shutil

    original = lab.record([call("mcp.add", a=2, b=3), answer("5")])
    return Path(shutil.copytree(original.run_dir, lab.root / name))


@pytest.mark.slow
def test_a_recording_file_that_is_a_folder_or_a_fifo_is_one_sentence(lab: Lab) -> None:
    """A FIFO waited for a writer for ever; a folder was an IsADirectoryError, exit 3."""
    folder, fifo = _recorded_copy(lab, "folder"), _recorded_copy(lab, "fifo")
    (folder / "meta.json").unlink()
    (folder / "meta.json").mkdir()
    (fifo / "model.jsonl").unlink()
    os.mkfifo(fifo / "model.jsonl")
    for run, name in ((folder, "meta.json"), (fifo, "model.jsonl")):
        result = CliRunner().invoke(main, ["replay", str(run), "--quiet"], env=lab.env())
        assert result.exit_code == 2, result.output
        assert result.stderr == f"Error: {run / name} is not a regular file\n"


@pytest.mark.slow
def test_a_damaged_recorded_reply_ends_the_replay_saying_so(lab: Lab) -> None:
    """A reply whose content is an object (a hand edit) was a traceback from deep in the
    loop; it now fails as a recorded failure does, and the summary says why."""
    run = _recorded_copy(lab, "damaged")
    lines = (run / "model.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["reply"]["content"] = {"a": 1}
    (run / "model.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    result = CliRunner().invoke(main, ["replay", str(run), "--quiet"], env=lab.env())
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert ("incomplete after 1 step(s): the recording of model call 1 is damaged: "
            "its content is dict, not text") in result.stdout
