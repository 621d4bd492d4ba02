"""`evalkit regrade RUNS --policy NEW.yaml`: what a new policy would have allowed, held or denied.

Over the committed corpus (the recorded decisions of the built-in runtime's governance)
and over streams written here for the decisions the corpus never took (a refusal, a hold
refused by a person, a call cut short, a recorded policy hash).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.errors import EvalkitError
from evalkit.gate.policy import Policy
from evalkit.gate.policy_regrade import recorded_calls, regrade_policy, summary_line
from evalkit.store.reader import read_events_file
from tests._runs import call, envelope, finished, result, started, write_run

RECORDINGS = Path(__file__).resolve().parents[2] / "recordings"
STUB_GOOD = RECORDINGS / "stub" / "good"


def _cli(*args: str | Path) -> tuple[int, str]:
    done = CliRunner().invoke(main, [str(a) for a in args])
    return done.exit_code, done.output


def _policy(path: Path, tools: dict[str, dict]) -> Path:
    path.write_text(yaml.safe_dump({"version": 1, "tools": tools}))
    return path


def _stub_tools() -> set[str]:
    """Every tool the stub suite's good recordings called or asked for."""
    names = set()
    for events in STUB_GOOD.glob("*/runs/*/events.jsonl"):
        for record in read_events_file(events).records:
            if record.get("event") in ("tool_call", "gate_requested"):
                names.add(record["tool"])
    return names


def _calls_to(tool: str) -> int:
    """Recorded calls to ``tool`` in stub/good, counted from the streams directly."""
    total = 0
    for events in STUB_GOOD.glob("*/runs/*/events.jsonl"):
        records = read_events_file(events).records
        gated = {(r.get("index"), r.get("tool")) for r in records
                 if r.get("event") == "gate_requested"}
        total += sum(1 for r in records if r.get("tool") == tool and (
            r.get("event") == "gate_requested"
            or (r.get("event") == "tool_call" and (r.get("index"), tool) not in gated)))
    return total


@pytest.fixture
def lenient(tmp_path: Path) -> Path:
    """A policy that allows every tool the stub recordings used and holds mcp.submit."""
    tools = {name: {"risk": 0, "reversible": True} for name in _stub_tools()}
    tools["mcp.submit"] = {"risk": 1, "reversible": True, "requires_approval": True}
    return _policy(tmp_path / "lenient.yaml", tools)


def test_a_policy_matching_the_recordings_changes_only_the_submission(lenient: Path) -> None:
    report = regrade_policy(STUB_GOOD, lenient)
    rows = {(run["run"].split("/")[0], c["tool"]): c for run in report["runs"]
            for c in run["calls"]}
    boundary = rows[("boundary", "mcp.submit")]
    assert (boundary["before"], boundary["resolution"], boundary["after"],
            boundary["changed"]) == ("held", "pending", "held", False)
    submitted = rows[("submission", "mcp.submit")]  # ran with an approval given up front
    assert (submitted["before"], submitted["after"], submitted["changed"]) == (
        "allowed", "held", True)
    assert submitted["kind"] == "requires_approval"
    totals = report["totals"]
    assert totals["transitions"] == {"allowed->held": _calls_to("mcp.submit") - 1}
    assert totals["same"] + totals["changed"] + totals["undetermined"] == totals["calls"]
    assert report["policy_hash"] == Policy.load(lenient).hash


def test_a_stricter_policy_denies_what_it_drops_and_holds_what_it_raises(
        tmp_path: Path) -> None:
    tools = {name: {"risk": 0, "reversible": True} for name in _stub_tools()}
    del tools["mcp.read_asset"]                                    # unknown: denied
    tools["mcp.multiply"] = {"risk": 4, "reversible": True}        # too risky: held
    tools["mcp.submit"] = {"risk": 0, "reversible": True}          # was gated: now allowed
    report = regrade_policy(STUB_GOOD, _policy(tmp_path / "strict.yaml", tools))
    moved = report["totals"]["transitions"]
    assert moved["allowed->denied"] == _calls_to("mcp.read_asset")
    assert moved["allowed->held"] == _calls_to("mcp.multiply")
    assert moved["held->allowed"] == 1  # boundary's gated submit
    for run in report["runs"]:
        for c in run["calls"]:
            if c["tool"] == "mcp.read_asset":
                assert (c["after"], c["kind"], c["changed"]) == ("denied", "unknown_tool", True)


def test_the_command_prints_rows_and_the_summary_and_json_parses(lenient: Path) -> None:
    code, out = _cli("regrade", STUB_GOOD, "--policy", lenient)
    assert code == 0
    lines = out.strip().splitlines()
    report = regrade_policy(STUB_GOOD, lenient)
    assert lines[-1] == summary_line(report)
    n = report["totals"]
    assert lines[-1].startswith(f"{n['calls']} call(s) in {n['runs']} run(s) under sha256:")
    assert f"{n['same']} same, {n['changed']} allowed->held" in lines[-1]
    assert any("mcp.submit" in line and "CHANGED" in line for line in lines)
    code, out = _cli("regrade", STUB_GOOD, "--policy", lenient, "--json")
    assert code == 0 and json.loads(out)["totals"] == n
    code, out = _cli("regrade", STUB_GOOD, "--policy", lenient, "--changed-only")
    assert code == 0 and len(out.strip().splitlines()) == 1 + 2 * n["changed"]


def test_fail_on_change_exits_1_only_when_a_decision_moves(tmp_path: Path,
                                                          lenient: Path) -> None:
    code, _ = _cli("regrade", STUB_GOOD, "--policy", lenient, "--fail-on-change")
    assert code == 1
    same = {name: {"risk": 0, "reversible": True} for name in _stub_tools()}
    same["mcp.submit"] = {"risk": 1, "reversible": True, "requires_approval": True}
    one = STUB_GOOD / "boundary"  # its read is allowed, its submit held: as recorded
    code, out = _cli("regrade", one, "--policy", _policy(tmp_path / "same.yaml", same),
                     "--fail-on-change")
    assert code == 0 and "2 same" in out


def test_usage_mistakes_are_one_sentence_and_exit_2(tmp_path: Path, lenient: Path) -> None:
    code, out = _cli("regrade", STUB_GOOD, "--policy", lenient, "--out", tmp_path / "o")
    assert code == 2 and "replays nothing" in out and not (tmp_path / "o").exists()
    code, out = _cli("regrade", STUB_GOOD)
    assert code == 2 and "needs --out" in out
    code, out = _cli("regrade", STUB_GOOD, "--out", tmp_path / "o2", "--fail-on-change")
    assert code == 2 and "go with --policy" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\ntools:\n  x: {risk: 9, reversible: true}\n")
    code, out = _cli("regrade", STUB_GOOD, "--policy", bad)
    assert code == 2 and "risk must be an integer from 0 to 5" in out
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out = _cli("regrade", empty, "--policy", lenient)
    assert code == 2 and "no run directories" in out
    assert "Traceback" not in out


# -- decisions the corpus never took ----------------------------------------------------------


def _gate(index: int, tool: str, **extra: object) -> dict:
    return {"event": "gate_requested", "index": index, "tool": tool, "arguments": {"q": 1},
            "reason": f"{tool} is gated", **extra}


def _refused(index: int, tool: str) -> dict:
    why = f"denied: {tool} is outside the closed tool set of skill s"
    return result(index, tool, ok=False, exit_code=None, output=why, error=why, handle=None)


def test_each_recorded_decision_is_read_back(tmp_path: Path) -> None:
    run = write_run(tmp_path / "runs" / "run_made-1", [
        envelope(1, started(policy_hash="sha256:" + "a" * 64)),
        envelope(2, call(0, "read")), envelope(3, result(0, "read")),                # allowed
        envelope(4, call(1, "shell")), envelope(5, _refused(1, "shell")),            # denied
        envelope(6, _gate(2, "send", policy_hash="sha256:" + "b" * 64)),             # held ...
        envelope(7, call(2, "send")), envelope(8, result(2, "send")),                # approved
        envelope(9, _gate(3, "send")), envelope(10, call(3, "send")),                # held ...
        envelope(11, _refused(3, "send")),                                           # refused
        envelope(12, call(4, "read")), envelope(13, result(4, "read", ok=False)),    # ran, failed
        envelope(14, call(5, "read")),                                               # cut short
    ])
    calls = recorded_calls(read_events_file(run / "events.jsonl"))
    assert [(c.tool, c.before, c.resolution) for c in calls] == [
        ("read", "allowed", None), ("shell", "denied", None), ("send", "held", "approved"),
        ("send", "held", "refused"), ("read", "allowed", None), ("read", "unknown", None)]
    tools = {"read": {"risk": 0, "reversible": True},
             "shell": {"risk": 1, "reversible": True},
             "send": {"risk": 4, "reversible": False}}
    report = regrade_policy(tmp_path / "runs", _policy(tmp_path / "p.yaml", tools))
    (row,) = report["runs"]
    assert row["policy_hash_before"] == "sha256:" + "a" * 64
    assert [c["before_policy"][-1] for c in row["calls"]] == ["a", "a", "b", "a", "a", "a"]
    assert [(c["before"], c["after"], c["changed"]) for c in row["calls"]] == [
        ("allowed", "allowed", False), ("denied", "allowed", True), ("held", "held", False),
        ("held", "held", False), ("allowed", "allowed", False), ("unknown", "allowed", False)]
    assert report["totals"] == {"runs": 1, "calls": 6, "same": 4, "changed": 1,
                                "undetermined": 1, "transitions": {"denied->allowed": 1}}
    assert summary_line(report) == (
        f"6 call(s) in 1 run(s) under {report['policy_hash']}: 4 same, 1 denied->allowed, "
        "1 undetermined (no recorded result)")


def test_granted_scopes_are_checked_only_when_given(tmp_path: Path) -> None:
    write_run(tmp_path / "run_s-1", [envelope(1, call(0, "read")),
                                     envelope(2, result(0, "read"))])
    policy = _policy(tmp_path / "p.yaml", {"read": {"risk": 0, "reversible": True,
                                                    "scopes": ["fs.read"]}})
    assert regrade_policy(tmp_path, policy)["runs"][0]["calls"][0]["after"] == "allowed"
    row = regrade_policy(tmp_path, policy, granted_scopes=["net"])["runs"][0]["calls"][0]
    assert (row["after"], row["kind"]) == ("denied", "scope_missing")
    code, out = _cli("regrade", tmp_path, "--policy", policy, "--grant", "fs.read", "--json")
    assert code == 0 and json.loads(out)["runs"][0]["calls"][0]["after"] == "allowed"


def test_arguments_are_read_to_decide_and_never_shown(tmp_path: Path) -> None:
    payload = "payload-" + "q7" * 20
    write_run(tmp_path / "run_p-1", [
        envelope(1, call(0, "write", arguments={"text": payload})),
        envelope(2, result(0, "write", arguments={"text": payload}, output=payload)),
        envelope(3, _gate(1, "write", arguments={payload: payload})),
        envelope(4, finished("awaiting_approval"))])
    policy = _policy(tmp_path / "p.yaml", {"write": {"risk": 3, "reversible": True}})
    for extra in ((), ("--json",)):
        code, out = _cli("regrade", tmp_path, "--policy", policy, *extra)
        assert code == 0 and payload not in out and "write" in out


def test_a_run_of_no_calls_and_a_torn_run_are_read_not_refused(tmp_path: Path) -> None:
    write_run(tmp_path / "run_none-1", [envelope(1, started()), envelope(2, finished())])
    write_run(tmp_path / "run_torn-1", (envelope(1, call(0, "read")) + "\n"
                                        + '{"seq":2,"record":{"event":"tool_res').encode())
    policy = _policy(tmp_path / "p.yaml", {"read": {"risk": 0, "reversible": True}})
    report = regrade_policy(tmp_path, policy)
    assert [len(r["calls"]) for r in report["runs"]] == [0, 1]
    assert report["totals"]["undetermined"] == 1
    with pytest.raises(EvalkitError, match="does not exist"):
        regrade_policy(tmp_path / "nope", policy)


# -- a run of the gate sidecar: its decisions are recorded as governance records ---------------

H = "sha256:" + "c" * 64


def _gov(what: str, key: str, tool: str, index: int, **extra: object) -> dict:
    return {"event": "governance", "index": index, "key": key, "what": what, "tool": tool,
            **extra}


def _decided(key: str, tool: str, index: int, kind: str, phase: str) -> list[dict]:
    return [_gov("received", key, tool, index, request_id="r-" + key),
            _gov("decided", key, tool, index, phase=phase, kind=kind, reason="policy said",
                 digest="sha256:" + "d" * 64, policy_hash=H)]


def _end(key: str, tool: str, index: int, kind: str, phase: str, args: dict,
         ok: bool) -> list[dict]:
    error = None if ok else f"{kind}: the gate said no"
    return [_gov("result", key, tool, index, phase=phase, kind=kind, reason="r",
                 policy_hash=H),
            {"event": "tool_call", "index": index, "tool": tool, "arguments": args},
            {"event": "tool_result", "index": index, "tool": tool, "arguments": args, "ok": ok,
             "exit_code": None, "output": "done" if ok else "", "error": error,
             "handle": f"g{index}.0", "truncated": False}]


def _held(key: str, tool: str, index: int, args: dict) -> list[dict]:
    return [{"event": "gate_requested", "index": index, "tool": tool, "arguments": args,
             "reason": "held", "approval_id": "ap_" + key, "digest": "sha256:" + "e" * 64},
            _gov("held", key, tool, index, kind="requires_approval", approval_id="ap_" + key),
            _gov("result", key, tool, index, phase="pending_approval",
                 kind="requires_approval", reason="r", policy_hash=H)]


def _sidecar_stream() -> list[dict]:
    records = [started(gated=["send"], catalogue=[], sandbox="none")]
    records += [{"event": "step_started", "index": 0}, *_decided("k1", "read", 0, "allowed",
                                                                  "completed"),
                _gov("run_tool", "k1", "read", 0, correlation_id="c1"),
                *_end("k1", "read", 0, "allowed", "completed", {"path": "a"}, True),
                _gov("received", "k1", "read", 0, request_id="again"),       # a retry ...
                _gov("replayed", "k1", "read", 0, phase="completed", kind="allowed")]
    records += [{"event": "step_started", "index": 1},
                *_decided("k2", "shell", 1, "unknown_tool", "rejected"),
                *_end("k2", "shell", 1, "unknown_tool", "rejected", {"cmd": "ls"}, False)]
    records += [{"event": "step_started", "index": 2},
                *_decided("k3", "send", 2, "requires_approval", "pending_approval"),
                *_held("k3", "send", 2, {"to": "dana"}),
                _gov("approval_checked", "k3", "send", 2, detail="signed"),
                *_end("k3", "send", 2, "approved", "completed", {"to": "dana"}, True)]
    records += [{"event": "step_started", "index": 3},
                *_decided("k4", "send", 3, "requires_approval", "pending_approval"),
                *_held("k4", "send", 3, {"to": "eve"}),
                *_end("k4", "send", 3, "expired", "rejected", {"to": "eve"}, False)]
    records += [{"event": "step_started", "index": 4},                  # the same key, other
                _gov("received", "k1", "read", 4, request_id="x"),   # arguments: a conflict
                *_end("k1", "read", 4, "conflict", "rejected", {"path": "b"}, False)]
    records += [{"event": "step_started", "index": 5},
                *_decided("k5", "send", 5, "requires_approval", "pending_approval"),
                *_held("k5", "send", 5, {"to": "fay"}),
                finished("awaiting_approval", steps=6, max_steps=0)]
    return records


def test_a_sidecar_run_is_read_by_its_recorded_decisions_one_call_per_key(
        tmp_path: Path) -> None:
    from evalkit.store.runviews import terminal_summary

    run = write_run(tmp_path / "run_sidecar-1",
                    [envelope(i, r) for i, r in enumerate(_sidecar_stream(), 1)],
                    meta={"run_id": "run_sidecar-1", "meta": {"policy_hash": H}})
    calls = recorded_calls(read_events_file(run / "events.jsonl"))
    assert [(c.tool, c.before, c.resolution, c.arguments, c.policy_hash) for c in calls] == [
        ("read", "allowed", None, {"path": "a"}, H),
        ("shell", "denied", None, {"cmd": "ls"}, H),
        ("send", "held", "approved", {"to": "dana"}, H),
        ("send", "held", "expired", {"to": "eve"}, H),
        ("send", "held", "pending", {"to": "fay"}, H)]
    looser = _policy(tmp_path / "loose.yaml", {"read": {"risk": 0, "reversible": True},
                                               "shell": {"risk": 0, "reversible": True},
                                               "send": {"risk": 1, "reversible": True}})
    report = regrade_policy(run, looser)
    (row,) = report["runs"]
    assert row["policy_hash_before"] == H
    assert report["totals"]["transitions"] == {"denied->allowed": 1, "held->allowed": 3}
    assert report["totals"]["same"] == 1
    summary = terminal_summary(run)  # the gate's refusals: unknown tool, expired, conflict
    assert (summary.tool_calls, summary.denied_calls, summary.failed_calls) == (5, 3, 0)
