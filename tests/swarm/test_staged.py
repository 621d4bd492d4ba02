"""A staged run: the plan on the first step, steps as branches, a synthesis answer grounded last."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.eval.summary import summarize
from evalkit.runtime.command import mission_command
from tests.swarm.conftest import (
    REVENUE_PLAN,
    S1,
    S2,
    S3,
    SYNTHESIS,
    Lab,
    answer,
    call,
    plan,
    route,
)

STAGED = [route("plan"), REVENUE_PLAN, *S1, *S2, *S3, SYNTHESIS]


@pytest.mark.slow
def test_a_staged_run_with_two_rungs(lab: Lab) -> None:
    done = lab.mission(STAGED)
    assert done.exit_code == 0, done.output
    first = done.steps[0]
    assert first == {"event": "step_started", "index": 0, "plan": [
        {"id": "s1", "goal": "read the final shipments table asset.7f3a", "rung": 1},
        {"id": "s2", "goal": "read the unit pricing asset.19c2", "rung": 1},
        {"id": "s3", "goal": "multiply the units by the average price", "rung": 2,
         "needs": ["s1", "s2"]}]}
    assert [(s["index"], s.get("branch")) for s in done.steps] == [
        (0, None), (1, "s1"), (2, "s1"), (3, "s2"), (4, "s2"), (5, "s3"), (6, "s3"), (7, None)]
    assert [(r["tool"], r["branch"]) for r in done.events("tool_result")] == [
        ("mcp.read_asset", "s1"), ("mcp.read_asset", "s2"), ("mcp.multiply", "s3")]
    # Turn-level records carry no branch; the synthesis answer is the last answer, and the only one.
    for record in (done.records[0], done.records[-1], *done.events("answer"),
                   *done.events("grounding")):
        assert "branch" not in record, record
    assert [r["event"] for r in done.records[-3:]] == ["grounding", "answer", "mission_finished"]
    assert len(done.events("answer")) == 1
    assert done.events("answer")[0]["text"].startswith("Q3 2024 revenue was EUR 4,218,578.0")
    grounding = done.events("grounding")[0]
    assert grounding["grounded"] is True and grounding["verified"] is True
    assert done.records[-1]["outcome"] == "answered" and done.records[-1]["steps"] == 8
    # Every model call of every stage is recorded: triage and plan plain, the rest mission.
    assert done.branch_of_calls() == [
        ("plain", None), ("plain", None), ("mission", "s1"), ("mission", "s1"),
        ("mission", "s2"), ("mission", "s2"), ("mission", "s3"), ("mission", "s3"),
        ("mission", None)]
    assert done.records[-1]["usage"]["calls"] == 9
    assert summarize(done.records).staged is True
    account = done.meta["swarm"]
    assert account["route"] == "staged" and account["plan"] == first["plan"]
    assert account["steps"] == [
        {"id": "s1", "outcome": "answered", "summary": "12,481 units (asset.7f3a)"},
        {"id": "s2", "outcome": "answered", "summary": "average unit price EUR 338.0 (asset.19c2)"},
        {"id": "s3", "outcome": "answered", "summary": "12,481 x 338.0 = 4218578.0"}]


@pytest.mark.slow
def test_steps_are_briefed_and_the_synthesis_sees_every_step(lab: Lab) -> None:
    done = lab.mission(STAGED)
    calls = done.model_calls
    system = calls[2]["request"]["messages"][0]  # each lane has the ordinary system turn
    assert system["role"] == "system" and "- mcp.read_asset:" in system["content"]
    assert all(c["request"]["messages"][0] == system for c in calls[2:])
    s3_brief = calls[6]["request"]["messages"][1]["content"]
    assert "Your step: s3: multiply the units by the average price" in s3_brief
    assert "12,481 units (asset.7f3a)" in s3_brief  # what s1 found, because s3 needs it
    s1_brief = calls[2]["request"]["messages"][1]["content"]
    assert "What the steps before yours found" not in s1_brief
    synthesis = calls[8]["request"]["messages"]
    assert [m["role"] for m in synthesis] == ["system", "user"]
    said = synthesis[1]["content"]
    for text in ("## s1: read the final shipments table asset.7f3a",
                 "Summary: average unit price EUR 338.0 (asset.19c2)",
                 'Called mcp.multiply with {"a": 12481, "b": 338.0}',
                 '"result": 4218578.0', "Result of mcp.read_asset (handle r1, ok"):
        assert text in said, text


@pytest.mark.slow
def test_the_synthesis_answer_is_repaired_against_the_whole_runs_results(lab: Lab) -> None:
    wrong = answer("Q3 2024 revenue was EUR 4,300,000 (asset.7f3a).")
    done = lab.mission([route("plan"), REVENUE_PLAN, *S1, *S2, *S3, wrong, SYNTHESIS])
    interim, verdict = done.events("grounding")
    assert interim["repairing"] is True and interim["unsupported"] == ["4,300,000"]
    assert verdict["repairing"] is False and verdict["grounded"] is True
    assert [(s["index"], s.get("branch")) for s in done.steps][-2:] == [(7, None), (8, None)]
    assert done.records[-1]["outcome"] == "answered"
    assert len(done.events("answer")) == 1


@pytest.mark.slow
def test_an_ungrounded_synthesis_keeps_its_caveat(lab: Lab) -> None:
    wrong = answer("Q3 2024 revenue was EUR 4,300,000.")
    done = lab.mission([route("plan"), REVENUE_PLAN, *S1, *S2, *S3, wrong, wrong])
    assert done.records[-1]["outcome"] == "answered_with_caveat"
    assert done.events("answer")[0]["outcome"] == "answered_with_caveat"
    assert "branch" not in done.events("answer")[0]


@pytest.mark.slow
def test_the_synthesis_may_read_again_with_a_tool(lab: Lab) -> None:
    done = lab.mission([route("plan"), REVENUE_PLAN, *S1, *S2, *S3,
                        call("mission_result", handle="r3"), SYNTHESIS])
    last = done.events("tool_result")[-1]
    assert last["tool"] == "mission_result" and "branch" not in last and last["index"] == 7
    assert done.records[-1]["outcome"] == "answered"


@pytest.mark.slow
def test_a_step_budget_running_out_mid_plan_ends_the_run(lab: Lab) -> None:
    done = lab.mission(STAGED, "--mission-steps", "4")
    finished = done.records[-1]
    assert finished["outcome"] == "budget_exhausted" and "branch" not in finished
    assert finished["budget"] == {"which": "steps", "limit": 4, "spent": 4}
    assert finished["steps"] == 4
    assert [(s["index"], s.get("branch")) for s in done.steps] == [
        (0, None), (1, "s1"), (2, "s1"), (3, "s2")]
    assert not done.events("answer")  # no step summary passes for the mission's answer
    assert summarize(done.records).answered is False
    assert done.meta["swarm"]["steps"] == [
        {"id": "s1", "outcome": "answered", "summary": "12,481 units (asset.7f3a)"},
        {"id": "s2", "outcome": "budget_exhausted"}]
    assert done.meta["outcome"] == "budget_exhausted"


@pytest.mark.slow
def test_a_budget_that_covers_only_the_plan_step(lab: Lab) -> None:
    done = lab.mission(STAGED, "--mission-steps", "1")
    assert [s["index"] for s in done.steps] == [0]
    assert done.records[-1]["budget"] == {"which": "steps", "limit": 1, "spent": 1}
    assert summarize(done.records).staged is True


@pytest.mark.slow
def test_a_step_whose_model_call_fails_ends_the_run_naming_the_step(lab: Lab) -> None:
    done = lab.mission([route("plan"), REVENUE_PLAN, *S1, S2[0]])
    finished = done.records[-1]
    assert finished["outcome"] == "incomplete"
    assert finished["reason"] == "step s2: script exhausted after 5 replies"
    assert not done.events("answer")


@pytest.mark.slow
def test_a_gated_tool_in_a_step_ends_the_run_awaiting_approval(lab: Lab) -> None:
    submit = plan(("s1", "read the final shipments table", 1), ("s2", "file the total", 2))
    done = lab.mission([route("plan"), submit, *S1,
                        call("mcp.submit", asset_id="asset.7f3a", value=12481)],
                       "--gate-tool", "mcp.submit", "--grant", "mcp.write")
    gate = done.events("gate_requested")[0]
    assert gate["branch"] == "s2" and gate["tool"] == "mcp.submit"
    assert done.records[-1]["outcome"] == "awaiting_approval"
    assert not any(r["tool"] == "mcp.submit" for r in done.events("tool_result"))


@pytest.mark.slow
def test_a_step_that_calls_no_tool_settles_with_its_reply(lab: Lab) -> None:
    one = plan(("s1", "say what the mission needs", 1))
    done = lab.mission([route("plan"), one, answer("it needs the revenue"),
                        answer("I cannot say without reading.")], skill=False)
    assert [(s["index"], s.get("branch")) for s in done.steps] == [(0, None), (1, "s1"),
                                                                  (2, None)]
    assert "(this step called no tool)" in done.model_calls[-1]["request"]["messages"][1][
        "content"]
    assert done.records[-1]["outcome"] == "answered" and not done.events("grounding")


@pytest.mark.slow
def test_a_staged_run_is_not_resumed_but_a_direct_one_is(lab: Lab) -> None:
    staged = lab.mission([route("plan"), REVENUE_PLAN, *S1])  # ends incomplete in s2
    assert staged.records[-1]["outcome"] == "incomplete"
    script = lab.script([SYNTHESIS], "more.json")
    result = lab.invoke(["--resume", staged.records[0]["run_id"], "--script", str(script)])
    assert result.exit_code == 2
    assert "was staged by --swarm" in result.output and "not resumed" in result.output
    direct = lab.mission([route("direct"), *DIRECT_PREFIX])  # the script runs out mid-loop
    assert direct.records[-1]["outcome"] == "incomplete"
    events = lab.root / "resumed.jsonl"
    result = lab.invoke(["--resume", direct.records[0]["run_id"],
                         "--script", str(lab.script(DIRECT_REST, "r.json")),
                         "--events", str(events)])
    assert result.exit_code == 0, result.output
    resumed = [json.loads(line) for line in events.read_text().splitlines()]
    assert {r.get("branch") for r in resumed} == {"direct"}
    assert resumed[0]["resumed"]["steps_replayed"] == 3 and resumed[0]["index"] == 3
    assert resumed[-1]["outcome"] == "answered"
    meta = json.loads((lab.runs / direct.records[0]["run_id"] / "meta.json").read_text())["meta"]
    assert meta["swarm"]["why"] == "a resumed run continues its direct loop"


DIRECT_PREFIX = [call("mcp.read_asset", asset_id="asset.7f3a"),
                 call("mcp.read_asset", asset_id="asset.19c2")]
DIRECT_REST = [call("mcp.multiply", a=12481, b=338.0), SYNTHESIS]


def test_swarm_flags_are_checked_in_one_sentence(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text('["{\\"answer\\": \\"x\\"}"]')
    for args, said in ((["--swarm", "--swarm-parallel", "0"], "--swarm-parallel must be 1 or more"),
                       (["--swarm-parallel", "2"], "give --swarm too"),
                       (["--swarm", "--swarm-parallel", "2", "--provider", "openai", "--model",
                         "m", "--cassette", "c.yaml"], "--swarm-parallel 1")):
        given = [] if "--provider" in args else ["--script", str(script)]
        result = CliRunner().invoke(mission_command, ["x", *given, *args],
                                    env={"EVALKIT_RUNS": "off"})
        assert result.exit_code == 2 and said in result.output, result.output
