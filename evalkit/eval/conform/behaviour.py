"""The rules about how an agent behaves, not only what its records hold.

The exit contract's promises (``EXIT_RULES``, one check per id), and what the contract
says in prose: a stream of JSON objects with known events, indexes that name their
step, tool calls and results in pairs, a standing gate answered over ``--control``
and acted on, a failing tool reported and survived.
"""

from __future__ import annotations

import json
from typing import Any

from evalkit import contract as c
from evalkit.eval.conform.battery import (
    DECISION,
    SIGTERM,
    SIGTERM_BOUND_S,
    Decide,
    Ran,
    Terminate,
)
from evalkit.eval.conform.rules import (
    Battery,
    Check,
    Finding,
    Rule,
    fail,
    needs_records,
    ok,
    records,
    skip,
)


def _word(table: tuple[str, ...], word: str) -> str:
    """A word the kit tests for, taken from the contract's table (a typo fails at import)."""
    if word not in table:
        raise LookupError(f"{word!r} is not in the contract's table {table}")
    return word


INCOMPLETE = _word(c.OUTCOMES, "incomplete")
AWAITING = _word(c.OUTCOMES, "awaiting_approval")
CANCELLED = _word(c.REASONS, "cancelled")
#: Events whose records name the step they belong to (``index`` is required of them).
_STEPPED = tuple(e for e in c.EVENTS if "index" in c.FIELDS[e] and e != "step_started")


def _mission(battery: Battery, key: str) -> Ran | None:
    return next((r for r in battery if r.key == key), None)


def _started(battery: Battery) -> list[Ran]:
    return [r for r in battery if not r.capture.get("spawn_error")]


def _finished(ran: Ran) -> tuple[int, dict[str, Any]] | None:
    """The last mission_finished of a stream, with its line."""
    found = None
    for line, record in ran.records:
        if isinstance(record, dict) and record.get("event") == "mission_finished":
            found = (line, record)
    return found


# -- the exit contract -----------------------------------------------------------------------


def _stdout_prose(battery: Battery) -> Finding:
    for ran in _started(battery):
        if not ran.records:
            on_stdout = any(_is_record(line) for line in ran.stdout.splitlines())
            return fail(ran, None, "no record arrived on --events fd:N"
                        + ("; the stream went to stdout, which is never read" if on_stdout else ""))
    return ok()


def _is_record(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict) and "event" in json.loads(line)
    except ValueError:
        return False


def _zero_events(battery: Battery) -> Finding:
    silent = [r for r in _started(battery) if not r.records]
    if not silent:
        return skip("every mission wrote records")
    for ran in silent:
        if ran.capture.get("exit_code") == 0 or not ran.stderr.strip():
            return fail(ran, None, f"no record written, yet exit {ran.capture.get('exit_code')}"
                        f"{' and nothing on stderr' if not ran.stderr.strip() else ''}")
    return ok()


def _finished_arrives(battery: Battery) -> Finding:
    for ran in _started(battery):
        if ran.records and _finished(ran) is None:
            last = ran.records[-1][0]
            return fail(ran, last, "the stream ends without a mission_finished")
    return ok()


def _sigterm(battery: Battery) -> Finding:
    ran = _mission(battery, SIGTERM)
    if ran is None or not isinstance(ran.watch, Terminate):
        return skip(f"the suite has no mission {SIGTERM!r}")
    watch = ran.watch
    if watch.sent_at is None:
        if watch.at_first_step:
            return fail(ran, None, "no step_started, so no point mid-mission to send SIGTERM "
                        "at (--no-gates)")
        return fail(ran, None, "no gate_requested, so no point where the agent waits for the "
                    f"signal (the mission gives it {' '.join(ran.flags)})")
    if watch.killed:
        return fail(ran, watch.sent_line, f"still running {SIGTERM_BOUND_S:g} s after "
                    "SIGTERM; its process group was killed")
    finished = _finished(ran)
    if finished is None or watch.finished_after is None:
        return fail(ran, watch.sent_line, "no mission_finished after SIGTERM")
    line, record = finished
    if watch.finished_after > SIGTERM_BOUND_S:
        return fail(ran, line, f"mission_finished {watch.finished_after:.2f} s after SIGTERM; "
                    f"the bound is {SIGTERM_BOUND_S:g} s")
    cancelled = record.get("outcome") == INCOMPLETE and record.get("reason") == CANCELLED
    if not cancelled and watch.at_first_step and any(
            isinstance(r, dict) and r.get("event") == "answer" for _, r in ran.records):
        # No gate held the agent: it may have answered before the signal landed.
        return skip("not checked: the agent answered before SIGTERM (sent at its first "
                    "step_started, with no gate to hold it) could wind it up; a mission "
                    "whose first step takes longer (a model call in flight) is checked")
    if not cancelled:
        return fail(ran, line, f"outcome {record.get('outcome')!r} with reason "
                    f"{record.get('reason')!r} after SIGTERM; the contract says {INCOMPLETE!r} "
                    f"with reason {CANCELLED!r}")
    return Finding("pass", None, f"finished {watch.finished_after:.2f} s after SIGTERM "
                   f"(bound {SIGTERM_BOUND_S:g} s)")


def _exit_codes(battery: Battery) -> Finding:
    for ran in _started(battery):
        code = ran.capture.get("exit_code")
        if isinstance(ran.watch, Terminate) and ran.watch.killed:
            continue  # the kill's code, not the agent's (exit.sigterm says so)
        if _finished(ran) is not None and code != 0:
            return fail(ran, _finished(ran)[0], f"the mission ran, yet exit {code}; "  # type: ignore[index]
                        "the contract says 0 whatever the outcome")
    return ok()


EXIT_CHECKS: dict[str, Check] = {
    "stdout_prose": _stdout_prose,
    "zero_events": _zero_events,
    "finished_arrives": needs_records(_finished_arrives),
    "sigterm": _sigterm,
    "scrubbed": lambda battery: skip("not checked: the kit cannot know which values an "
                                     "agent holds secret"),
    "sink_errors": lambda battery: skip("not checked: run's sink never fails, so there is "
                                        "no write error to survive"),
    "exit_codes": needs_records(_exit_codes),
}


def exit_rules() -> list[Rule]:
    return [Rule(f"exit.{rule_id}", sentence,
                 EXIT_CHECKS.get(rule_id, lambda battery: skip("the kit has no check for it "
                                                               "yet")))
            for rule_id, sentence in c.EXIT_RULES.items()]


# -- what the contract says in prose ---------------------------------------------------------


def _framing(battery: Battery) -> Finding:
    for ran in battery:
        if ran.undecoded:
            line, text = ran.undecoded[0]
            return fail(ran, line, f"not a line of UTF-8 JSON (NaN and Infinity are not JSON "
                        f"either): {text[:60]!r}")
        for line, record in ran.records:
            if not isinstance(record, dict):
                return fail(ran, line, f"a JSON {c.json_type(record)}, not an object")
    return ok()


def _known(battery: Battery) -> Finding:
    for ran, line, record in records(battery):
        if record.get("event") not in c.EVENTS:
            return fail(ran, line, f"event {record.get('event')!r} is not one of the contract's")
    return ok()


def _version(battery: Battery) -> Finding:
    for ran, line, record in records(battery):
        if "schema_version" in record and (
                c.json_type(record["schema_version"]) != "integer"
                or record["schema_version"] != c.SCHEMA_VERSION):
            return fail(ran, line, f"schema_version {record['schema_version']!r}, not "
                        f"{c.SCHEMA_VERSION}")
    return ok()


def _index_step(battery: Battery) -> Finding:
    for ran in battery:
        step = None
        for line, record in ran.records:
            if not isinstance(record, dict):
                continue
            event = record.get("event")
            if event == "step_started":
                step = record.get("index")
            elif event in _STEPPED and "index" in record and record["index"] != step:
                return fail(ran, line, f"{event} index {record['index']!r} inside step {step!r}")
    return ok()


def _pairs(battery: Battery) -> Finding:
    seen = False
    for ran in battery:
        open_calls: list[tuple[Any, Any, Any]] = []
        handles: set[Any] = set()
        for line, record in ran.records:
            if not isinstance(record, dict):
                continue
            key = (record.get("index"), record.get("tool"), record.get("call"))
            if record.get("event") == "tool_call":
                open_calls.append(key)
            elif record.get("event") == "tool_result":
                seen = True
                if key not in open_calls:
                    return fail(ran, line, f"tool_result of {key[1]!r} (index {key[0]!r}) with "
                                "no tool_call before it")
                open_calls.remove(key)
                handle = record.get("handle")
                if handle in handles:
                    return fail(ran, line, f"handle {handle!r} used twice in one mission")
                handles.add(handle)
    return ok() if seen else skip("no tool_result in the battery")


def _decision(battery: Battery) -> Finding:
    ran = _mission(battery, DECISION)
    if ran is None or not isinstance(ran.watch, Decide):
        return skip(f"the suite has no mission {DECISION!r}")
    watch = ran.watch
    if watch.gate is None:
        return fail(ran, None, "no gate_requested, so no decision to take (the mission gives "
                    f"it {' '.join(ran.flags)})")
    if watch.sent is None:
        return fail(ran, watch.gate_line, "gate_requested without an approval_id: the "
                    "decision could not name it")
    tool, index = watch.gate.get("tool"), watch.gate.get("index")
    acted = any(isinstance(r, dict) and r.get("event") == "tool_call" and r.get("tool") == tool
                and r.get("index") == index
                for line, r in ran.records if line > (watch.gate_line or 0))
    finished = _finished(ran)
    if finished is not None and finished[1].get("outcome") == AWAITING:
        return fail(ran, finished[0], f"ended {AWAITING!r} though the gate was approved over "
                    "--control")
    if not acted:
        return fail(ran, watch.gate_line, f"the approved call of {tool!r} was never made "
                    "(no tool_call after the decision)")
    return ok()


def _tool_error(battery: Battery) -> Finding:
    seen = False
    for ran, line, record in records(battery, "tool_result"):
        if record.get("ok") is not False:
            continue
        seen = True
        error = record.get("error")
        if not isinstance(error, str) or not error.strip():
            return fail(ran, line, f"a failing tool_result whose error is {error!r}, not the "
                        "reason in words")
        if _finished(ran) is None:
            return fail(ran, line, "the mission did not survive its failing tool")
    return ok() if seen else skip("no tool failed in the battery")


def prose_rules() -> list[Rule]:
    return [
        Rule("framing.json", "every line of the sink is one JSON object in UTF-8",
             needs_records(_framing)),
        Rule("event.known", "every record's event is one of the contract's",
             needs_records(_known)),
        Rule("schema.version", f"schema_version, where written, is {c.SCHEMA_VERSION}",
             needs_records(_version)),
        Rule("index.step", "a record with an index carries the index of its step",
             needs_records(_index_step)),
        Rule("index.pairs", "every tool_result answers an earlier tool_call (index, tool, "
             "call); handles are unique", _pairs),
        Rule("control.gate_decision", "a gate approved over --control is acted on: the "
             "call is made, the mission does not end awaiting approval", _decision),
        Rule("tool.error", "a failing tool_result says why in error, and the mission goes "
             "on to its mission_finished", _tool_error),
    ]
