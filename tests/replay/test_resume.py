"""Resume: an unfinished run continued against a live (here scripted) model, in place."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalkit.contract import conforms
from evalkit.errors import EvalkitError
from evalkit.eval.summary import summarize
from evalkit.runtime.mission import MissionSettings
from evalkit.runtime.resume import rebuild
from evalkit.store.runstore import RunWriter
from evalkit.store.seal import seal_run
from evalkit.store.signing import local_signer
from tests import _forked as forked
from tests.replay.conftest import STUB, Done, Lab, answer, call, read_jsonl

SLOW_CODE = "import time\nprint('started', flush=True)\ntime.sleep(60)\n"


def _resume(lab: Lab, run: str, items: list, name: str = "more.json", **options) -> Done:
    return lab.launch(MissionSettings(objective=options.pop("objective", ""), resume=run,
                                      provider="scripted", script=lab.script(items, name),
                                      **options))


def _unfinished(lab: Lab) -> Done:
    """Two tool calls, then the script runs dry: the run ends incomplete."""
    done = lab.record([call("mcp.add", a=2, b=3), call("mcp.echo", text="five")])
    assert done.meta["outcome"] == "incomplete"
    return done


@pytest.mark.slow
def test_an_incomplete_run_is_continued_in_place(lab: Lab) -> None:
    first = _unfinished(lab)
    run_id = first.launched.outcome.run_id
    last_seq = json.loads((first.run_dir / "meta.json").read_text())["last_seq"]
    resumed = _resume(lab, run_id, [call("mcp.add", a=5, b=5), answer("5, then 10")])
    assert resumed.run_dir == first.run_dir and resumed.launched.outcome.run_id == run_id
    records = resumed.records
    assert [r["event"] for r in records].count("mission_started") == 1
    steps = [r for r in records if r["event"] == "step_started"]
    assert [s["index"] for s in steps] == [0, 1, 2, 3, 4]
    # the first stretch asked a third time and was refused by its script: step 2 is on record
    assert steps[3]["resumed"] == {"from_seq": last_seq, "steps_replayed": 3}
    assert all("resumed" not in s for s in steps[:3] + steps[4:])
    assert records[-1]["event"] == "mission_finished" and records[-1]["outcome"] == "answered"
    assert records[-1]["steps"] == 5
    handles = [r["handle"] for r in records if r["event"] == "tool_result"]
    assert handles == ["r1", "r2", "r3"]  # the result store was refilled: handles continue
    # the first new model call saw the conversation rebuilt from the recorded pairs
    calls = read_jsonl(first.run_dir / "model.jsonl")
    assert [c["call"] for c in calls] == list(range(1, len(calls) + 1))
    messages = calls[3]["request"]["messages"]
    assert messages[1] == {"role": "user", "content": "add 2 and 3"}
    assert json.loads(messages[2]["content"]) == {"tool": "mcp.add", "arguments": {"a": 2, "b": 3}}
    assert messages[3]["content"].startswith("Result of mcp.add (handle r1, ok")
    assert json.loads(messages[4]["content"])["tool"] == "mcp.echo"
    assert len(messages) == 6
    # usage totals count the whole run (both stretches)
    assert records[-1]["usage"]["calls"] == 4
    meta = resumed.meta
    assert meta["outcome"] == "answered" and meta["resumes"][0]["steps_replayed"] == 3
    # in order as the scorer reads it: no second mission_started, the resumed step goes on
    assert summarize(records).problems == ()


@pytest.mark.slow
def test_the_step_ceiling_counts_the_whole_run(lab: Lab) -> None:
    first = _unfinished(lab)
    resumed = _resume(lab, first.launched.outcome.run_id,
                      [call("mcp.add", a=1, b=1), call("mcp.add", a=1, b=2)], steps=4)
    finished = resumed.records[-1]
    assert finished["outcome"] == "budget_exhausted"
    assert finished["budget"] == {"which": "steps", "limit": 4, "spent": 4}


@pytest.mark.slow
def test_a_resume_that_ends_before_its_first_step_is_still_in_order(lab: Lab) -> None:
    """Its only record is its own mission_finished, right after the first stretch's."""
    first = _unfinished(lab)
    resumed = _resume(lab, first.launched.outcome.run_id, [answer("never asked")], steps=3)
    events = [r["event"] for r in resumed.records]
    assert events[-2:] == ["mission_finished", "mission_finished"]
    assert resumed.records[-1]["outcome"] == "budget_exhausted"
    assert summarize(resumed.records).problems == ()


@pytest.mark.slow
@pytest.mark.parametrize("word", ["answered", "budget_exhausted"])
def test_a_concluded_run_is_refused_naming_its_outcome(lab: Lab, word: str) -> None:
    if word == "answered":
        done = lab.record([answer("done")])
    else:
        done = lab.record([call("mcp.add", a=1, b=1)], steps=1)
    assert done.meta["outcome"] == word
    recorded = _files(done.run_dir)
    assert "certificates.jsonl" in recorded and "manifest.json" in recorded
    with pytest.raises(EvalkitError, match=f"ended {word}: that is a conclusion"):
        _resume(lab, done.launched.outcome.run_id, [answer("again")])
    assert _files(done.run_dir) == recorded  # refused: nothing recorded is dropped or re-sealed


def _files(run_dir: Path) -> dict[str, bytes]:
    """A run directory's files and their bytes (its lock aside: it names the last holder)."""
    return {f.name: f.read_bytes() for f in run_dir.iterdir() if f.name != "lock"}


def test_a_caveated_answer_is_a_conclusion_too(lab: Lab) -> None:
    done = lab.record([answer("done")])
    events = done.run_dir / "events.jsonl"
    lines = events.read_text().splitlines()
    last = json.loads(lines[-1])
    last["record"]["outcome"] = "answered_with_caveat"
    events.write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")
    seal_run(done.run_dir, local_signer())  # as if the run had closed so: resume checks seals
    with pytest.raises(EvalkitError, match="ended answered_with_caveat"):
        _resume(lab, done.launched.outcome.run_id, [answer("again")])


@pytest.mark.slow
def test_a_live_run_and_a_different_objective_are_refused(lab: Lab) -> None:
    first = _unfinished(lab)
    run_id = first.launched.outcome.run_id
    with RunWriter(first.run_dir), pytest.raises(EvalkitError, match="another live process"):
        _resume(lab, run_id, [answer("x")])
    recorded = _files(first.run_dir)
    with pytest.raises(EvalkitError, match="takes the objective from the record"):
        _resume(lab, run_id, [answer("x")], objective="something else")
    assert _files(first.run_dir) == recorded
    # the same objective is fine
    assert _resume(lab, run_id, [answer("x")], objective="add 2 and 3").meta["outcome"] == \
        "answered"


def test_the_native_protocol_conversation_is_rebuilt_with_wire_names() -> None:
    catalogue = [{"name": "mcp.add", "description": "", "parameters": {}},
                 {"name": "mcp.echo", "description": "", "parameters": {}}]
    records = [
        {"event": "step_started", "index": 0},
        {"event": "tool_call", "index": 0, "tool": "mcp.add", "arguments": {"a": 1}},
        {"event": "tool_result", "index": 0, "tool": "mcp.add", "arguments": {"a": 1},
         "ok": True, "exit_code": 0, "output": "2", "error": None, "handle": "r1",
         "truncated": False},
        {"event": "tool_call", "index": 0, "tool": "mcp.echo", "arguments": {}, "call": 1},
        {"event": "tool_result", "index": 0, "tool": "mcp.echo", "arguments": {}, "call": 1,
         "ok": False, "exit_code": 1, "output": "boom", "error": "boom", "handle": "r2",
         "truncated": False},
        {"event": "tool_call", "index": 1, "tool": "mcp.add", "arguments": {"a": 2}},
    ]
    messages = rebuild(records, "native", catalogue)
    assert [m["role"] for m in messages] == ["assistant", "tool", "tool"]
    calls = messages[0]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["mcp_add", "mcp_echo"]
    assert [m["tool_call_id"] for m in messages[1:]] == [c["id"] for c in calls]
    assert messages[2]["content"].startswith("Result of mcp.echo (handle r2, failed, exit code 1)")


def _start_slow_mission(lab: Lab) -> tuple[subprocess.Popen[str], Path]:
    script = lab.script([call("run_python_code", code=SLOW_CODE), answer("never")])
    events = lab.root / "events.jsonl"
    env = {k: v for k, v in lab.env().items() if k != "EVALKIT_SANDBOX"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "evalkit.cli", "mission", "wait a while", "--script", script,
         "--events", str(events), "--profile", "dev", "--unsandboxed", "--mcp-stdio", STUB],
        cwd=lab.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if events.exists() and '"tool_call"' in events.read_text():
            time.sleep(0.3)
            return proc, events
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"the mission never reached its tool call: {proc.communicate()}")


@pytest.mark.slow
def test_a_run_killed_with_9_is_resumed_to_an_answer(lab: Lab) -> None:
    proc, _ = _start_slow_mission(lab)
    proc.kill()
    proc.wait(timeout=20)
    [run_dir] = lab.runs.iterdir()
    script = lab.script([call("mcp.add", a=20, b=22), answer("42")], "resume.json")
    done = forked.run(
        [sys.executable, "-m", "evalkit.cli", "mission", "--resume", run_dir.name,
         "--script", script, "--profile", "dev", "--unsandboxed"],
        cwd=lab.root, env=lab.env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "mission answered after 3 step(s)" in done.stdout
    records = [json.loads(line)["record"]
               for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert all(conforms(r) == [] for r in records)
    events = [r["event"] for r in records]
    assert events.count("mission_started") == 1 and events.count("mission_finished") == 1
    steps = [r for r in records if r["event"] == "step_started"]
    assert [s["index"] for s in steps] == [0, 1, 2]
    assert steps[1]["resumed"]["steps_replayed"] == 1
    assert records[-1]["outcome"] == "answered" and records[-1]["steps"] == 3
    # the killed call had no result: it is not part of the rebuilt conversation
    resumed_call = read_jsonl(run_dir / "model.jsonl")[1]
    assert [m["role"] for m in resumed_call["request"]["messages"]] == ["system", "user"]
    assert os.path.exists(run_dir / "lock")


def test_resume_is_refused_when_recording_is_off(lab: Lab) -> None:
    with pytest.raises(EvalkitError, match="recording is off"):
        lab.launch(MissionSettings(objective="", resume="run_x"), EVALKIT_RUNS="off")
