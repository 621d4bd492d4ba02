"""``--control``: inject, cancel, cancel_step and gate_decision, against the real loop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalkit.commands.approvals import approve
from evalkit.errors import EvalkitError
from evalkit.runtime.control import LATE_CANCEL_STEP, ControlChannel
from tests.governance.conftest import RunGoverned, answer, call, clean_env, write_script

WRITE = {"action": "write", "path": "out.txt", "content": "gated text"}


class Pipe:
    """A control channel on an inherited-style pipe; ``send`` writes one command."""

    def __init__(self) -> None:
        read_end, self.write_end = os.pipe()
        self.warnings: list[str] = []
        self.channel = ControlChannel.open(f"fd:{read_end}", warn=self.warnings.append)

    def send(self, command: dict[str, Any] | str) -> None:
        line = command if isinstance(command, str) else json.dumps(command)
        os.write(self.write_end, (line + "\n").encode("utf-8"))

    def close(self) -> None:
        if self.write_end >= 0:
            os.close(self.write_end)
            self.write_end = -1


@pytest.fixture
def pipe() -> Pipe:
    made = Pipe()
    yield made
    made.close()


def on(event: str, then: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """An observer that acts when ``event`` is emitted (as a platform reading the stream would)."""
    def observe(record: dict[str, Any]) -> None:
        if record["event"] == event:
            then(record)
    return observe


def test_inject_rides_the_next_step_and_reaches_the_model(governed: RunGoverned,
                                                          pipe: Pipe) -> None:
    pipe.send({"control": "inject", "text": "prefer the shorter answer"})
    pipe.send({"control": "inject", "text": "and cite r1"})
    pipe.close()
    done = governed([answer("short")], control=pipe.channel, settle=True, servers=0)
    step = done.events("step_started")[0]
    assert step["injected"] == ["prefer the shorter answer", "and cite r1"]
    messages = done.model_calls[0]["request"]["messages"]
    assert [m["content"] for m in messages[2:]] == ["prefer the shorter answer", "and cite r1"]
    assert all(m["role"] == "user" for m in messages[1:])
    assert pipe.warnings == []


def test_cancel_winds_the_run_up(governed: RunGoverned, pipe: Pipe) -> None:
    pipe.send({"control": "cancel"})
    pipe.close()
    done = governed([answer("never")], control=pipe.channel, settle=True, servers=0)
    assert done.records[-1]["outcome"] == "incomplete"
    assert done.records[-1]["reason"] == "cancelled"


@pytest.mark.slow
def test_cancel_arriving_mid_run_stops_at_the_next_check(governed: RunGoverned,
                                                         pipe: Pipe) -> None:
    def cancel(_record: dict[str, Any]) -> None:
        pipe.send({"control": "cancel"})
        time.sleep(0.5)  # the tool below is still running: the cancel lands at the next check

    done = governed([call("run_shell_command", command="echo one"),
                     call("run_shell_command", command="echo two"), answer("never")],
                    profile="dev", servers=0, control=pipe.channel, observer=on("tool_call",
                                                                               cancel))
    assert [r["output"] for r in done.results()] == ["one\n"]
    assert (done.records[-1]["outcome"], done.records[-1]["reason"]) == ("incomplete",
                                                                         "cancelled")


def test_malformed_lines_are_dropped_with_one_sentence_each(governed: RunGoverned,
                                                            pipe: Pipe) -> None:
    for line in ("not json at all", "[1, 2]", '{"control": "dance"}', '{"control": "inject"}',
                 json.dumps({"control": "gate_decision", "approval_id": "ap_0123456789abcdef",
                             "approve": True}),
                 json.dumps({"control": "gate_decision", "approval_id": "ap_0123456789abcdef",
                             "approve": True, "decided_by": "  "}),
                 json.dumps({"control": "gate_decision", "approval_id": "nope",
                             "approve": True, "decided_by": "dana"}),
                 json.dumps({"control": "gate_decision", "approval_id": "ap_0123456789abcdef",
                             "approve": "yes", "decided_by": "dana"}),
                 '{"control": "inject", "text": "Bearer abcdefghijklmnop is my token"} trailing',
                 ""):
        pipe.send(line)
    pipe.close()
    done = governed([answer("carried on")], control=pipe.channel, settle=True, servers=0)
    assert done.outcome.outcome == "answered"
    assert len(pipe.warnings) == 9
    assert all(w.startswith("control: dropped ") and w.endswith("the run carries on.")
               and w.count("\n") == 0 for w in pipe.warnings)
    assert "unknown control word 'dance'" in pipe.warnings[2]
    assert "signed by nobody" in pipe.warnings[4] and "signed by nobody" in pipe.warnings[5]
    assert "abcdefghijklmnop" not in pipe.warnings[8]
    assert "injected" not in done.events("step_started")[0]


def test_a_yes_over_control_dispatches_in_the_same_step(governed: RunGoverned,
                                                        pipe: Pipe) -> None:
    def decide(gate: dict[str, Any]) -> None:
        pipe.send({"control": "gate_decision", "approval_id": gate["approval_id"],
                   "approve": True, "decided_by": "dana", "note": "looks right"})

    done = governed([call("fs", **WRITE), answer("written")], profile="dev", servers=0,
                    gate_tools=["fs"], gate_wait=20, control=pipe.channel,
                    observer=on("gate_requested", decide))
    assert done.names == ["mission_started", "step_started", "gate_requested", "tool_call",
                          "tool_result", "step_started", "answer", "mission_finished"]
    assert done.results()[0]["ok"] and (done.root / "out.txt").read_text() == "gated text"
    gate = done.events("gate_requested")[0]
    record = done.approvals.get(gate["approval_id"])
    assert (record["state"], record["decided_by"], record["note"], record["decided_via"]) == (
        "spent", "dana", "looks right", "control")
    assert record["spent_by"] == done.outcome.run_id
    assert [a["verdict"] for a in done.audit] == ["denied", "allowed"]
    assert "approved by dana over --control" in done.audit[1]["reason"]


def test_a_no_over_control_is_recorded_and_the_model_told(governed: RunGoverned,
                                                          pipe: Pipe) -> None:
    def decide(gate: dict[str, Any]) -> None:
        pipe.send({"control": "gate_decision", "approval_id": gate["approval_id"],
                   "approve": False, "decided_by": "bob", "note": "not today"})

    done = governed([call("fs", **WRITE), answer("ok, not written")], profile="dev",
                    servers=0, gate_tools=["fs"], gate_wait=20, control=pipe.channel,
                    observer=on("gate_requested", decide))
    result = done.results()[0]
    assert not result["ok"] and not (done.root / "out.txt").exists()
    assert result["error"].startswith("denied: bob refused this call to fs")
    assert "not today" in result["error"]
    record = done.approvals.get(done.events("gate_requested")[0]["approval_id"])
    assert (record["state"], record["decided_by"]) == ("refused", "bob")
    assert done.outcome.outcome == "answered"
    assert "bob refused" in done.model_calls[1]["request"]["messages"][-1]["content"]


@pytest.mark.slow
def test_an_approval_written_by_the_approvals_command_while_the_gate_waits(
        governed: RunGoverned, tmp_path: Path) -> None:
    from evalkit.runtime.governance import ApprovalStore

    store = ApprovalStore(tmp_path / "approvals")  # the folder the governed fixture uses

    def decide(gate: dict[str, Any]) -> None:
        threading.Timer(0.3, approve, args=(store, gate["approval_id"]),
                        kwargs={"decided_by": "carol"}).start()

    done = governed([call("fs", **WRITE), answer("written")], profile="dev", servers=0,
                    gate_tools=["fs"], gate_wait=20, observer=on("gate_requested", decide))
    assert done.results()[0]["ok"]
    record = store.get(done.events("gate_requested")[0]["approval_id"])
    assert (record["state"], record["decided_by"]) == ("spent", "carol")


@pytest.mark.slow
def test_nothing_times_out_into_a_yes(governed: RunGoverned, pipe: Pipe) -> None:
    started = time.monotonic()
    done = governed([call("fs", **WRITE), answer("never")], profile="dev", servers=0,
                    gate_tools=["fs"], gate_wait=0.4, control=pipe.channel)
    assert time.monotonic() - started >= 0.4
    assert done.records[-1]["outcome"] == "awaiting_approval"
    assert not (done.root / "out.txt").exists()
    assert done.approvals.get(done.events("gate_requested")[0]["approval_id"])["state"] == \
        "pending"


@pytest.mark.slow
def test_cancel_step_skips_the_rest_of_a_turn_but_not_the_running_tool(
        governed: RunGoverned, pipe: Pipe) -> None:
    def cancel_step(record: dict[str, Any]) -> None:
        if record.get("tool") == "run_shell_command":
            pipe.send({"control": "cancel_step"})

    done = governed([
        {"tool_calls": [{"name": "run_shell_command", "arguments": {"command": "sleep 0.6; "
                                                                     "echo slept"},
                         "id": "c1"},
                        {"name": "fs", "arguments": WRITE, "id": "c2"}]},
        {"tool_calls": [{"name": "mission_answer", "arguments": {"text": "stopped"}}]},
    ], protocol="native", profile="dev", servers=0, control=pipe.channel,
        observer=on("tool_call", cancel_step))
    assert done.results()[0]["output"] == "slept\n" and len(done.results()) == 1
    skipped = done.events("reply_rejected")[0]
    assert skipped["tool"] == "fs" and "cancel_step" in skipped["problem"]
    assert not (done.root / "out.txt").exists()
    tool_messages = [m for m in done.model_calls[1]["request"]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["c1", "c2"]
    assert "cancel_step" in tool_messages[1]["content"]
    assert done.outcome.outcome == "answered"


@pytest.mark.slow
def test_a_cancel_step_that_arrives_too_late_is_a_no_op_the_model_hears_of(
        governed: RunGoverned, pipe: Pipe) -> None:
    def late(_record: dict[str, Any]) -> None:
        pipe.send({"control": "cancel_step"})
        time.sleep(0.5)  # the step is over; the ask is read before the next one starts

    done = governed([call("run_shell_command", command="echo one"),
                     call("run_shell_command", command="echo two"), answer("both")],
                    profile="dev", servers=0, control=pipe.channel,
                    observer=on("tool_result", late))
    assert [r["output"] for r in done.results()] == ["one\n", "two\n"]
    second = done.model_calls[1]["request"]["messages"]
    assert LATE_CANCEL_STEP in [m["content"] for m in second]


def test_a_control_source_that_cannot_be_opened_is_refused(tmp_path: Path) -> None:
    for spec in (str(tmp_path / "missing"), "fd:999", "fd:x", str(tmp_path)):
        with pytest.raises(EvalkitError):
            ControlChannel.open(spec)


@pytest.mark.slow
def test_a_fifo_and_a_growing_file_are_followed(governed: RunGoverned, tmp_path: Path) -> None:
    fifo = tmp_path / "control.fifo"
    os.mkfifo(fifo)
    channel = ControlChannel.open(str(fifo))
    writer = os.open(fifo, os.O_WRONLY)
    try:
        def decide(gate: dict[str, Any]) -> None:
            os.write(writer, (json.dumps({"control": "gate_decision",
                                          "approval_id": gate["approval_id"], "approve": True,
                                          "decided_by": "dana"}) + "\n").encode())

        done = governed([call("fs", **WRITE), answer("x")], profile="dev", servers=0,
                        gate_tools=["fs"], gate_wait=20, control=channel,
                        observer=on("gate_requested", decide))
    finally:
        os.close(writer)
    assert done.results()[0]["ok"]
    log = tmp_path / "control.ndjson"
    log.write_text("")
    channel = ControlChannel.open(str(log))

    def append(gate: dict[str, Any]) -> None:
        with log.open("a") as handle:
            handle.write(json.dumps({"control": "gate_decision",
                                     "approval_id": gate["approval_id"], "approve": False,
                                     "decided_by": "bob"}) + "\n")

    done = governed([call("fs", **WRITE), answer("x")], profile="dev", servers=0,
                    gate_tools=["fs"], gate_wait=20, control=channel,
                    observer=on("gate_requested", append))
    assert done.results()[0]["error"].startswith("denied: bob refused")


@pytest.mark.slow
def test_control_over_an_inherited_fd_from_the_command_line(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.json", [call("fs", **WRITE), answer("written")])
    events_read, events_write = os.pipe()
    control_read, control_write = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "evalkit.cli", "mission", "write it", "--script", str(script),
         "--profile", "dev", "--gate-tool", "fs", "--gate-wait", "30",
         "--events", f"fd:{events_write}", "--control", f"fd:{control_read}"],
        cwd=tmp_path, env=clean_env(tmp_path), pass_fds=(events_write, control_read),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.close(events_write)
    os.close(control_read)
    records = []
    with os.fdopen(events_read, encoding="utf-8") as stream, \
            os.fdopen(control_write, "w", encoding="utf-8") as control:
        control.write("this is not json\n")
        control.flush()
        for line in stream:
            record = json.loads(line)
            records.append(record)
            if record["event"] == "gate_requested":
                control.write(json.dumps({"control": "gate_decision",
                                          "approval_id": record["approval_id"],
                                          "approve": True, "decided_by": "dana"}) + "\n")
                control.flush()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert [r["event"] for r in records][2:5] == ["gate_requested", "tool_call", "tool_result"]
    assert records[-1]["outcome"] == "answered"
    assert (tmp_path / "out.txt").read_text() == "gated text"
    dropped = [line for line in err.splitlines() if line.startswith("control: dropped")]
    assert len(dropped) == 1 and "not JSON" in dropped[0]
