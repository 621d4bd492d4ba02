"""`evalkit conform`: the kit's rules come from the contract, a good agent passes, a broken
one fails by the rules' names, and bad input is one sentence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit import contract as c
from evalkit.eval.conform import NO_GATES, all_rules, battery, behaviour, conform, gate_rule, rules
from evalkit.eval.conform.battery import Ran, Watch, _without_gates

ROOT = Path(__file__).resolve().parent.parent
BROKEN = ROOT / "tests" / "data" / "broken_agent.py"
EXAMPLE = ROOT / "examples" / "conform_agent.py"
MINIMAL = ROOT / "examples" / "min_agent.py"
RECORDED = ROOT / "examples" / "openai_agent.py"

pytestmark = pytest.mark.xdist_group("conform")


# -- one owner: every rule the contract states has a conformance rule ------------------------


def _ids() -> set[str]:
    return {rule.id for rule in all_rules()}


def test_rule_ids_are_unique() -> None:
    ids = [rule.id for rule in all_rules()]
    assert len(ids) == len(set(ids))


def test_every_contract_rule_has_a_conformance_rule() -> None:
    wanted = {f"field.{e}.{f}" for e in c.EVENTS for f in c.FIELDS[e]}
    wanted |= {f"type.{e}.{f}" for e in c.EVENTS for f in c.TYPES[e]}
    wanted |= {f"outcome.{e}" for e in c.EVENTS if "outcome" in c.FIELDS[e]}
    wanted |= {f"reason.{word}" for word in c.REASONS}
    wanted |= {f"order.{rule_id}" for rule_id in c.ORDER_RULES}
    wanted |= {f"exit.{rule_id}" for rule_id in c.EXIT_RULES}
    wanted |= {f"usage.{key}" for key in c.USAGE}
    wanted |= {f"value.{path}" for path in c.VALUE_SETS}
    assert wanted - _ids() == set()


def test_every_order_and_exit_rule_has_a_check_of_its_own() -> None:
    # A rule the kit only names (the "no check yet" fallback) does not count.
    assert set(c.ORDER_RULES) <= set(rules.ORDER_CHECKS)
    assert set(c.EXIT_RULES) <= set(behaviour.EXIT_CHECKS)


# -- the rules over hand-made streams ------------------------------------------------------


def _ran(*records: dict, key: str = "answer") -> Ran:
    return Ran(key=key, folder=Path(key), records=list(enumerate(records, start=1)),
               undecoded=[], capture={"exit_code": 0}, watch=Watch())


def _check(rule_id: str, *records: dict) -> rules.Finding:
    rule = next(r for r in all_rules() if r.id == rule_id)
    return rule.check([_ran(*records)])


STARTED = {"event": "mission_started", "schema_version": 1, "objective": "o", "catalogue": [],
           "gated": [], "max_steps": 0, "history": 0}
FINISHED = {"event": "mission_finished", "outcome": "answered", "steps": 1, "max_steps": 0}


def test_an_order_problem_is_told_apart_by_its_contract_rule() -> None:
    late = _check("order.after_finished", STARTED, FINISHED, {"event": "answer", "text": "t",
                                                               "outcome": "answered"})
    assert (late.status, late.where) == ("fail", "answer/events.jsonl:3")
    back = [STARTED, {"event": "step_started", "index": 1}, {"event": "step_started", "index": 0}]
    assert _check("order.steps_increase", *back).where == "answer/events.jsonl:3"
    assert _check("order.after_finished", *back).status == "pass"
    assert _check("order.new_mission", STARTED, FINISHED, STARTED).status == "fail"


def test_a_type_a_usage_and_an_index_out_of_the_contract_fail() -> None:
    wrong = dict(FINISHED, steps="1")
    found = _check("type.mission_finished.steps", STARTED, wrong)
    assert found.status == "fail" and "string" in (found.detail or "")
    assert _check("usage.calls", STARTED, dict(FINISHED, usage={"calls": None})).status == "fail"
    stray = {"event": "tool_call", "index": 2, "tool": "fs", "arguments": {}}
    assert _check("index.step", STARTED, {"event": "step_started", "index": 0},
                  stray).status == "fail"


def test_a_word_outside_a_value_set_fails_even_inside_a_list() -> None:
    grounding = {"event": "grounding", "checks": [{"verdict": "supported"}, {"verdict": "meh"}]}
    found = _check("value.grounding.checks[].verdict", STARTED, grounding)
    assert found.status == "fail" and "'meh'" in (found.detail or "")
    assert _check("value.mission_started.sandbox", dict(STARTED, sandbox="none")).status == "pass"


def test_nan_and_bytes_that_are_not_utf8_break_the_framing(tmp_path: Path) -> None:
    from evalkit.eval.conform.battery import _read
    from evalkit.eval.runner import Job

    folder = tmp_path / "answer"
    folder.mkdir()
    (folder / "events.jsonl").write_bytes(json.dumps(STARTED).encode() + b"\n"
                                          + b'{"event": "answer", "text": NaN}\n')
    job = Job(key="answer", objective="o", spawn=(), flags=(), out=str(folder), timeout_s=1,
              cwd=str(tmp_path))
    ran = _read(job, {"exit_code": 0}, Watch())
    found = next(r for r in all_rules() if r.id == "framing.json").check([ran])
    assert (found.status, found.where) == ("fail", "answer/events.jsonl:2")
    (folder / "events.jsonl").write_bytes(b'{"event": "answer", "text": "\xff"}\n')
    assert next(r for r in all_rules() if r.id == "framing.json").check(
        [_read(job, {}, Watch())]).status == "fail"


def test_an_event_never_written_is_skipped_not_passed() -> None:
    assert _check("field.grounding.ran", STARTED, FINISHED).status == "skip"


def test_with_no_record_at_all_no_rule_about_records_passes() -> None:
    silent = [_ran()]
    passed = [rule.id for rule in all_rules() if rule.check(silent).status == "pass"]
    assert passed == []


# -- real agents, spawned as run spawns them -------------------------------------------------


def _failed(spawn: tuple[str, ...], tmp_path: Path) -> list[str]:
    return conform(spawn, out=tmp_path / "conform").failed()


@pytest.mark.slow
def test_the_builtin_runtime_passes(tmp_path: Path) -> None:
    result = conform((), out=tmp_path / "conform")
    assert result.failed() == []
    passed = {rule.id for rule, f in result.findings if f.status == "pass"}
    assert {"exit.sigterm", "control.gate_decision", "tool.error", "order.first",
            "field.reply_rejected.problem"} <= passed


@pytest.mark.slow
def test_the_example_agent_passes(tmp_path: Path) -> None:
    assert _failed((sys.executable, str(EXAMPLE)), tmp_path) == []


@pytest.mark.slow
def test_a_broken_agent_fails_by_the_rules_it_breaks(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # It ignores SIGTERM, so its group is killed at the bound whatever the bound is: a
    # shorter one (the kit's is 3 s) only ends the wait for it sooner.
    for module in (battery, behaviour):
        monkeypatch.setattr(module, "SIGTERM_BOUND_S", 0.5)
    assert sorted(_failed((sys.executable, str(BROKEN)), tmp_path)) == sorted([
        "order.first",                      # step_started before mission_started
        "field.mission_started.history",    # a required field missing
        "outcome.answer", "outcome.mission_finished",  # "done" is not an outcome word
        "exit.sigterm",                     # SIGTERM ignored: killed after the bound
        "exit.finished_arrives",            # ... so its last mission never finished
        "control.gate_decision",            # an approved gate never acted on
    ])


# -- the command -------------------------------------------------------------------------------


def _evalkit(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}  # this checkout's evalkit
    return subprocess.run([sys.executable, "-m", "evalkit.cli", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=300, check=False)


@pytest.mark.slow
def test_the_command_prints_a_line_per_rule_and_exits_1_on_a_failure(tmp_path: Path) -> None:
    done = _evalkit("conform", "--out", str(tmp_path / "c"), "--", sys.executable, str(BROKEN))
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert len(lines) == len(all_rules()) + 1
    first = next(line for line in lines if line.startswith("FAIL order.first"))
    assert first.startswith(f"FAIL order.first {tmp_path / 'c' / 'answer' / 'events.jsonl'}:1 — ")


@pytest.mark.slow
def test_json_for_ci(tmp_path: Path) -> None:
    done = _evalkit("conform", "--json", "--out", str(tmp_path / "c"), "--", sys.executable,
                    str(EXAMPLE))
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["passed"] is True and data["format"] == "evalkit-conform"
    assert {r["id"] for r in data["rules"]} == _ids()


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ("conform", "--", "no-such-agent-program"),
    ("conform", "--suite", "no/such/suite.yaml", "--", sys.executable, str(EXAMPLE)),
])
def test_bad_input_is_one_sentence(args: tuple[str, ...], tmp_path: Path) -> None:
    done = _evalkit(*args, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("Error: ") and len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr


# -- an agent without gates: --no-gates ------------------------------------------------------


def test_no_gates_strips_the_gate_flags_and_their_values() -> None:
    assert _without_gates(("--gate-tool", "fs", "--model", "m", "--gate-wait=30",
                           "--gate-wait", "30")) == ("--model", "m")
    assert gate_rule("control.gate_decision") and gate_rule("type.gate_requested.reason")
    assert not gate_rule("field.mission_started.gated")


def test_with_no_gates_an_agent_that_answered_first_is_not_judged_on_sigterm() -> None:
    from evalkit.eval.conform.battery import Terminate

    watch = Terminate(at_first_step=True)
    watch.sent_at, watch.sent_line, watch.finished_after = 0.0, 2, 0.01
    answered = Ran(key="sigterm", folder=Path("sigterm"), capture={"exit_code": 0},
                   records=list(enumerate([STARTED, {"event": "step_started", "index": 0},
                                           {"event": "answer", "text": "t",
                                            "outcome": "answered"}, FINISHED], start=1)),
                   undecoded=[], watch=watch)
    rule = next(r for r in all_rules() if r.id == "exit.sigterm")
    found = rule.check([answered])
    assert found.status == "skip" and "answered before SIGTERM" in (found.detail or "")
    answered.records = answered.records[:2] + [(3, FINISHED)]  # no answer, yet not cancelled
    assert rule.check([answered]).status == "fail"


def _no_gates_checked(findings: list[tuple[rules.Rule, rules.Finding]]) -> None:
    """No rule failed, every gate rule is skipped for --no-gates, SIGTERM was checked."""
    status = {rule.id: f for rule, f in findings}
    assert [i for i, f in status.items() if f.status == "fail"] == []
    gates = {i for i in status if gate_rule(i)}
    assert "control.gate_decision" in gates and len(gates) > 1
    assert {(status[i].status, status[i].detail) for i in gates} == {("skip", NO_GATES)}
    assert status["exit.sigterm"].status == "pass", status["exit.sigterm"]


@pytest.mark.slow
def test_the_minimal_example_passes_with_no_gates(tmp_path: Path) -> None:
    result = conform((sys.executable, str(MINIMAL)), out=tmp_path / "c", gates=False)
    _no_gates_checked(result.findings)
    assert not (tmp_path / "c" / "decision").exists()  # the gate mission is left out
    assert result.to_dict()["gates"] is False


def test_the_minimal_example_is_about_thirty_lines() -> None:
    assert len(MINIMAL.read_text("utf-8").splitlines()) <= 35


@pytest.mark.slow
def test_without_no_gates_an_agent_without_gates_fails_the_gate_rules(tmp_path: Path) -> None:
    # --no-gates is what makes the gate rules skip: left off, they are judged, and fail.
    assert {"control.gate_decision", "exit.sigterm"} <= set(
        _failed((sys.executable, str(MINIMAL)), tmp_path))


@pytest.mark.slow  # evalkit conform spawns a recorded openai agent three times
def test_a_recorder_wrapped_agent_passes_with_no_gates(tmp_path: Path) -> None:
    pytest.importorskip("openai")
    from tests.runtime.chat_server import ChatServer

    with ChatServer() as server:
        server.reply("ready")                                  # answer
        server.reply("missing.txt could not be read.")         # tool_error
        server.stall()  # sigterm: a model call in flight when the first step starts
        done = _evalkit("conform", "--no-gates", "--json", "--out", str(tmp_path / "c"), "--",
                        sys.executable, str(RECORDED),
                        env={"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-local",
                             "OPENAI_MODEL": "m-local"})
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert data["passed"] is True and data["gates"] is False
    by_id = {rule.id: rule for rule in all_rules()}
    _no_gates_checked([(by_id[r["id"]], rules.Finding(r["status"], r["where"], r["detail"]))
                       for r in data["rules"]])
    # The signal lands as the sigterm mission's first step opens: before or during its call.
    assert len(server.requests) in (2, 3)


@pytest.mark.slow
def test_the_command_says_no_gates_in_its_lines(tmp_path: Path) -> None:
    done = _evalkit("conform", "--no-gates", "--out", str(tmp_path / "c"), "--",
                    sys.executable, str(MINIMAL))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert not [line for line in lines if line.startswith("FAIL")]
    assert f"SKIP control.gate_decision — {NO_GATES}" in lines
    assert any(line.startswith("PASS exit.sigterm") for line in lines)
