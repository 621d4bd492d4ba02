"""``--mission-seconds`` ends a mission even while a tool or a model call is in flight.

Real parts: the loop in-process over a real plane (the stub MCP server, a
real shell), the model over a real socket that never answers, and
``evalkit mission`` as a subprocess. Each mission here would run for a minute
or forever without the watchdog; each test finishes in seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from evalkit.runtime import Bounds
from evalkit.runtime.backends import Reply
from evalkit.runtime.backends.openai_compat import OpenAIBackend
from evalkit.runtime.inflight import OutOfTime, undo_on_abandon, within
from evalkit.store.reader import read_stream
from evalkit.store.runstore import lock_held
from tests import _forked as forked
from tests.runtime.chat_server import ChatServer
from tests.runtime.conftest import STUB, RunMission, read_jsonl
from tests.runtime.test_mission_cli import call, clean_env, evalkit, write_script

#: The clock every mission here is given.
SECONDS = 1.0
#: How long after its ``mission_finished`` is written a run may take to be over (its plane
#: closed, its process gone): generous, as the test machine may be busy.
GRACE = 3.0


def _ended_on_the_clock(records: list[dict[str, Any]], seconds: float = SECONDS) -> None:
    finished = records[-1]
    assert [r["event"] for r in records].count("mission_finished") == 1
    assert finished["event"] == "mission_finished"
    assert finished["outcome"] == "budget_exhausted"
    assert finished["budget"]["which"] == "seconds" and finished["budget"]["limit"] == seconds
    assert seconds <= finished["budget"]["spent"] <= finished["elapsed_s"] < seconds + 1


def _closed_within_grace(run_dir: Path) -> None:
    """Whatever was in flight, the run was over soon after its last record was written."""
    last = json.loads((run_dir / "events.jsonl").read_text().splitlines()[-1])
    assert last["record"]["event"] == "mission_finished"
    written = datetime.fromisoformat(last["at"].replace("Z", "+00:00")).timestamp()
    assert time.time() - written < GRACE


def _abandoned_result(records: list[dict[str, Any]], tool: str) -> dict[str, Any]:
    [result] = [r for r in records if r["event"] == "tool_result"]
    assert result["tool"] == tool and not result["ok"] and result["exit_code"] is None
    assert result["error"] == (f"abandoned: the mission's seconds ran out while {tool} "
                               "was running")
    return result


# -- in-process: the loop over real parts ----------------------------------------------------


@pytest.mark.slow
def test_an_mcp_call_that_outlasts_the_clock_is_abandoned(mission: RunMission) -> None:
    done = mission([call("mcp.sleep", seconds=10), '{"answer": "never"}'],
                   bounds=Bounds(seconds=SECONDS))
    _closed_within_grace(done.run_dir)  # the plane (and the server in its call) closed too
    _ended_on_the_clock(done.records)
    _abandoned_result(done.records, "mcp.sleep")
    assert done.outcome.outcome == "budget_exhausted"
    assert not lock_held(done.run_dir)  # the run store was closed, not skipped
    meta = json.loads((done.run_dir / "meta.json").read_text())
    assert meta["meta"]["outcome"] == "budget_exhausted"


class _Sleepy:
    """A model whose call returns long after the clock ran out: the loop must not hear it."""

    provider, model = "sleepy", "sleepy-1"

    def __init__(self, pause: float) -> None:
        self.pause, self.returned = pause, threading.Event()

    def describe(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model}

    def complete(self, messages: list[dict[str, Any]], tools: Any, *, kind: str) -> Reply:
        time.sleep(self.pause)
        self.returned.set()
        return Reply(content='{"answer": "too late"}')


@pytest.mark.slow
def test_a_call_that_returns_after_the_end_records_nothing(mission: RunMission) -> None:
    model = _Sleepy(SECONDS + 1)
    done = mission(model, bounds=Bounds(seconds=SECONDS), mcp=False)
    _ended_on_the_clock(done.records)
    assert "error" in done.model_calls[-1]["reply"]
    before = _files(done.run_dir)
    assert model.returned.wait(5)
    time.sleep(0.2)
    assert _files(done.run_dir) == before  # the late reply wrote nothing anywhere
    assert all(r["event"] != "answer" for r in read_stream(done.run_dir).records)


@pytest.mark.slow
def test_a_model_call_in_flight_is_cut_off_at_the_deadline(mission: RunMission) -> None:
    with ChatServer() as server:
        server.stall()
        model = OpenAIBackend(model="stalled", base_url=server.base_url)
        done = mission(model, bounds=Bounds(seconds=SECONDS), mcp=False)
        _closed_within_grace(done.run_dir)
        assert server.hung_up.wait(2), "the HTTP request was left open"
    _ended_on_the_clock(done.records)
    [model_call] = done.model_calls
    assert model_call["reply"] == {
        "error": "abandoned: the mission's seconds ran out while the model call was running"}


# -- evalkit mission, as an operator runs it ---------------------------------------------------


def _mission(tmp_path: Path, *flags: str, script: list[Any] | None = None,
             seconds: float = SECONDS) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    events = tmp_path / "events.jsonl"
    scripted = ("--script", str(write_script(tmp_path / "s.json", script))) if script else ()
    done = forked.run(
        evalkit("wait", *scripted, "--events", str(events), "--mission-seconds", str(seconds),
                *flags),
        cwd=tmp_path, env=clean_env(EVALKIT_RUNS=str(tmp_path / "runs"), EVALKIT_AUDIT="off"),
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    records = read_jsonl(events)
    run_dir = tmp_path / "runs" / records[0]["run_id"]
    assert read_stream(run_dir).records == records
    _closed_within_grace(run_dir)  # the process exited soon after the deadline
    return done, records


@pytest.mark.slow
def test_the_command_ends_on_the_clock_while_a_shell_command_runs(tmp_path: Path) -> None:
    _, records = _mission(tmp_path, "--profile", "dev", "--unsandboxed", script=[
        call("run_shell_command", command="echo $$ > pid; exec sleep 60")])
    _ended_on_the_clock(records)
    _abandoned_result(records, "run_shell_command")
    assert _gone(int((tmp_path / "pid").read_text())), "the command was left running"


@pytest.mark.slow
def test_the_command_ends_on_the_clock_while_an_mcp_call_never_answers(tmp_path: Path) -> None:
    _, records = _mission(tmp_path, "--mcp-stdio", STUB,
                          script=[call("mcp.sleep", seconds=10)])
    _ended_on_the_clock(records)
    _abandoned_result(records, "mcp.sleep")


@pytest.mark.slow
def test_the_command_ends_on_the_clock_while_the_model_stalls(tmp_path: Path) -> None:
    with ChatServer() as server:
        server.stall()
        _, records = _mission(tmp_path, "--provider", "openai", "--model", "stalled",
                              "--api-base", server.base_url)
        assert server.hung_up.wait(2)
    _ended_on_the_clock(records)


@pytest.mark.slow
def test_sigterm_still_winds_up_a_clocked_mission_mid_call(tmp_path: Path) -> None:
    """The loop waits on a clocked call where a signal can still reach it."""
    events = tmp_path / "events.jsonl"
    script = write_script(tmp_path / "s.json", [call("run_shell_command",
                                                     command="echo $$ > pid; exec sleep 60")])
    proc = subprocess.Popen(
        evalkit("wait", "--script", str(script), "--events", str(events), "--profile", "dev",
                "--unsandboxed", "--mission-seconds", "60"),
        cwd=tmp_path, env=clean_env(EVALKIT_RUNS="off", EVALKIT_AUDIT="off"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text().strip():
        assert time.monotonic() < deadline, proc.kill() or proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=10)
    finished = read_jsonl(events)[-1]
    assert finished["outcome"] == "incomplete" and finished["reason"] == "cancelled"
    assert _gone(int((tmp_path / "pid").read_text()))


# -- the helper itself -----------------------------------------------------------------------


def test_without_a_deadline_the_call_runs_on_the_callers_thread() -> None:
    assert within(None, threading.current_thread, what="x") is threading.current_thread()


def test_a_call_that_ends_in_time_gives_its_value_or_its_error() -> None:
    assert within(time.monotonic() + 5, lambda: 42, what="x") == 42
    with pytest.raises(KeyError):
        within(time.monotonic() + 5, lambda: {}["missing"], what="x")


@pytest.mark.slow
def test_an_abandoned_call_is_undone_and_a_late_start_is_undone_at_once() -> None:
    undone: list[str] = []
    release = threading.Event()

    def work() -> None:
        with undo_on_abandon(lambda: undone.append("first")):
            release.wait(5)
        with undo_on_abandon(lambda: undone.append("late")):
            pass

    with pytest.raises(OutOfTime):
        within(time.monotonic() + 0.1, work, what="x")
    assert undone == ["first"]
    release.set()
    time.sleep(0.1)
    assert undone == ["first", "late"]


def test_a_signal_landing_while_the_helper_is_being_started_still_abandons_the_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM can arrive after the helper thread began its call (a process spawned)
    but before ``Thread.start`` returned to the loop; that call is abandoned too, or
    its process outlives the mission (the once-in-five full-suite failure of the
    SIGTERM test above)."""
    started = threading.Event()
    undone = threading.Event()

    def work() -> None:
        with undo_on_abandon(undone.set):
            started.set()
            undone.wait(5)

    real_start = threading.Thread.start

    def start_then_signal(self: threading.Thread) -> None:
        real_start(self)
        started.wait(5)
        raise KeyboardInterrupt("a signal raised into start()")

    monkeypatch.setattr(threading.Thread, "start", start_then_signal)
    with pytest.raises(KeyboardInterrupt):
        within(time.monotonic() + 30, work, what="x")
    assert undone.wait(5)


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 10  # generous: a loaded CI box reaps slowly
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def _files(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run_dir.iterdir()) if p.is_file()}
