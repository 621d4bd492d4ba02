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
