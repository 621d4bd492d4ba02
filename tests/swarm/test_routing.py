"""Triage and plan: biased to direct; a run that goes direct is the ordinary loop on branch direct."""

from __future__ import annotations

import json

import pytest

from evalkit.eval.summary import summarize
from evalkit.runtime.swarm import MAX_STEPS, read_plan, read_route
from tests.swarm.conftest import DIRECT, REVENUE_PLAN, Lab, plan, route

# -- reading the triage reply ----------------------------------------------------------------


@pytest.mark.parametrize("reply", [
    '{"route": "plan"}',
    '```json\n{"route": "plan"}\n```',
    'Several separate reads are needed. {"route": "Plan", "why": "two tables"}',
])
def test_only_a_clear_plan_request_stages(reply: str) -> None:
    assert read_route(reply) == (True, "triage asked for a plan")


@pytest.mark.parametrize(("reply", "why"), [
    ('{"route": "direct"}', "triage chose direct"),
    ("plan", "held no route object"),
    ("I would plan this one.", "held no route object"),
    ('{"route": "plan"', "held no route object"),  # broken JSON
    ('{"route": "plan"} {"route": "direct"}', "held 2 route object"),
    ('{"route": "maybe"}', "'maybe' is not plan"),
    ('{"route": ["plan"]}', "is not plan"),
    ('{"steps": []}', "held no route object"),
    ("", "held no route object"),
    (None, "held no route object"),
])
def test_anything_else_routes_direct(reply: str | None, why: str) -> None:
    staged, said = read_route(reply)
    assert staged is False and why in said


# -- reading the plan ----------------------------------------------------------------------------


def test_a_good_plan_is_read_with_rungs_and_needs() -> None:
    found, problem = read_plan(f"Here it is:\n```json\n{REVENUE_PLAN}\n```")
    assert problem == "" and found is not None
    assert [s.id for s in found.steps] == ["s1", "s2", "s3"]
    assert [[s.id for s in rung] for rung in found.rungs()] == [["s1", "s2"], ["s3"]]
    assert found.record()[2] == {"id": "s3", "goal": "multiply the units by the average price",
                                 "rung": 2, "needs": ["s1", "s2"]}
    assert found.record()[0] == {"id": "s1", "goal": "read the final shipments table asset.7f3a",
                                 "rung": 1}
    s3 = found.steps[2]
    assert [s.id for s in found.needs_of(s3)] == ["s1", "s2"]
    # Without needs a step is shown every lower rung; rungs need not be contiguous.
    loose, _ = read_plan(plan(("s1", "a", 1), ("s2", "b", 5), ("s3", "c", 9)))
    assert loose is not None and [s.id for s in loose.needs_of(loose.steps[2])] == ["s1", "s2"]
    assert [[s.id for s in r] for r in loose.rungs()] == [["s1"], ["s2"], ["s3"]]


def _steps(*items: dict) -> str:
    return json.dumps({"steps": list(items)})


@pytest.mark.parametrize(("reply", "problem"), [
    ("no plan here", "no JSON object with steps"),
    (_steps(), "non-empty list"),
    ('{"steps": "s1, s2"}', "non-empty list"),
    (_steps({"id": "s1", "goal": "a", "rung": 1}) * 2, "held 2 steps objects"),
    (_steps({"id": "step1", "goal": "a", "rung": 1}), "must have id 's1'"),
    (_steps({"id": "s2", "goal": "a", "rung": 1}), "must have id 's1'"),
    (_steps({"id": "s1", "goal": "a", "rung": 1}, {"id": "s1", "goal": "b", "rung": 1}),
     "must have id 's2'"),
    (_steps({"id": "s1", "goal": "  ", "rung": 1}), "s1 has no goal"),
    (_steps({"id": "s1", "rung": 1}), "s1 has no goal"),
    (_steps({"id": "s1", "goal": "a", "rung": "1"}), "rung must be an integer"),
    (_steps({"id": "s1", "goal": "a", "rung": 1.0}), "rung must be an integer"),
    (_steps({"id": "s1", "goal": "a", "rung": True}), "rung must be an integer"),
    (_steps({"id": "s1", "goal": "a", "rung": 0}), "rung must be an integer"),
    (_steps({"id": "s1", "goal": "a"}), "rung must be an integer"),
    (_steps({"id": "s1", "goal": "a", "rung": 1}, {"id": "s2", "goal": "b", "rung": 1,
                                                   "needs": ["s1"]}), "not on a lower rung"),
    (_steps({"id": "s1", "goal": "a", "rung": 2, "needs": ["s2"]},
            {"id": "s2", "goal": "b", "rung": 1}), "not an earlier step"),
    (_steps({"id": "s1", "goal": "a", "rung": 1}, {"id": "s2", "goal": "b", "rung": 2,
                                                   "needs": "s1"}), "must be a list"),
    (_steps(*({"id": f"s{n}", "goal": "g", "rung": 1} for n in range(1, MAX_STEPS + 2))),
     f"at most {MAX_STEPS}"),
    (_steps("s1"), "step 1 is not an object"),
])
def test_a_plan_that_does_not_check_out_is_refused_with_the_reason(reply: str,
                                                                   problem: str) -> None:
    found, said = read_plan(reply)
    assert found is None and problem in said


# -- direct, as a whole mission -------------------------------------------------------------------


@pytest.mark.slow
def test_a_run_triaged_direct_is_the_ordinary_loop_on_branch_direct(lab: Lab) -> None:
    done = lab.mission([route("direct"), *DIRECT])
    assert done.exit_code == 0, done.output
    started, *rest = done.records
    assert "branch" not in started  # written before the router decided
    assert {r.get("branch") for r in rest} == {"direct"}  # mission_finished included
    assert not any("plan" in r for r in done.steps)
    assert done.records[-1]["outcome"] == "answered"
    assert [r["tool"] for r in done.events("tool_call")] == [
        "mcp.read_asset", "mcp.read_asset", "mcp.multiply"]
    assert done.events("grounding")[0]["grounded"] is True
    # Triage is one plain call; every loop turn is recorded for the direct branch.
    assert done.branch_of_calls() == [("plain", None), *[("mission", "direct")] * 4]
    assert done.records[-1]["usage"]["calls"] == 5
    assert done.meta["swarm"] == {"route": "direct", "parallel": 1, "why": "triage chose direct"}
    assert summarize(done.records).staged is False


@pytest.mark.slow
def test_a_triage_reply_that_is_not_a_clear_plan_request_goes_direct(lab: Lab) -> None:
    done = lab.mission(['I think we should plan. {"route": "plan?"}', *DIRECT])
    assert done.records[-1]["outcome"] == "answered"
    assert "is not plan" in done.meta["swarm"]["why"]
    assert len(done.model_calls) == 5  # no plan call was made


@pytest.mark.slow
def test_an_invalid_plan_falls_back_to_direct(lab: Lab) -> None:
    bad = plan(("s1", "read both tables", 1), ("s2", "multiply", 1, ["s1"]))
    done = lab.mission([route("plan"), bad, *DIRECT])
    assert done.exit_code == 0, done.output
    assert {r.get("branch") for r in done.records[1:]} == {"direct"}
    assert not any("plan" in r for r in done.steps)
    assert done.records[-1]["outcome"] == "answered"
    assert done.branch_of_calls()[:3] == [("plain", None), ("plain", None), ("mission", "direct")]
    assert done.meta["swarm"]["route"] == "direct"
    assert done.meta["swarm"]["why"] == ("the plan could not be used: s2 needs s1, which is not "
                                         "on a lower rung (1 vs 1); the run went direct")
    assert summarize(done.records).staged is False


@pytest.mark.slow
def test_a_triage_call_that_fails_goes_direct_and_the_loop_reports_its_own_failure(
        lab: Lab) -> None:
    done = lab.mission([])  # the script is empty: every call fails
    assert done.exit_code == 0, done.output
    finished = done.records[-1]
    assert finished["outcome"] == "incomplete" and finished["branch"] == "direct"
    assert "script exhausted" in finished["reason"]
    assert done.meta["swarm"]["why"].startswith("the triage call failed (script exhausted")
    assert [c["kind"] for c in done.model_calls] == ["plain", "mission"]
