"""Swarm streams (branch fields, a plan on step_started) score as the spec says."""

from __future__ import annotations

from pathlib import Path

from evalkit.contract import conforms
from evalkit.eval.score import score
from evalkit.eval.suite import load_suite
from tests._stream_builders import answer, call, finished, mission, started, step, write_stream
from tests._stream_builders import write_suite as suite_file


def staged() -> list[dict]:
    """Triage chose to stage: a plan on the first step, two child steps, a synthesis."""
    plan = {"steps": [{"id": "s1", "goal": "add"}, {"id": "s2", "goal": "echo"}]}
    return [started(), step(0, plan=plan),
            step(1, branch="s1"), *[dict(r, branch="s1") for r in call(1, "mcp.add")],
            step(2, branch="s2"), *[dict(r, branch="s2") for r in call(2, "mcp.echo")],
            step(3), answer("The sum is 5."), finished(steps=4)]


def direct() -> list[dict]:
    return [started(), *[dict(r, branch="direct") for r in
                         [step(0), *call(0, "mcp.add"), step(1), answer("The sum is 5.")]],
            dict(finished(), branch="direct")]


def test_branch_and_plan_records_conform_and_score(tmp_path: Path) -> None:
    for record in staged() + direct():
        assert conforms(record) == []
    missions = [mission(f"m{i}", expects_tools=["mcp.add"], answer_must_match=["sum is 5"],
                        must_not_stage=(i % 2 == 0)) for i in range(4)]
    missions += [mission(f"h{i}", split="test", expects_tools=["mcp.add"]) for i in range(3)]
    suite = load_suite(suite_file(tmp_path / "s.yaml", missions, flags=["chaining"]))
    runs = tmp_path / "runs"
    write_stream(runs / "m0" / "events.jsonl", staged())   # must_not_stage: fails
    write_stream(runs / "m1" / "events.jsonl", staged())   # staging allowed: passes
    write_stream(runs / "m2" / "events.jsonl", direct())   # must_not_stage, direct: passes
    for key in ("m3", "h0", "h1", "h2"):
        write_stream(runs / key / "events.jsonl", direct())
    verdicts = {v.key: v for v in score(suite, runs=runs).verdicts}
    assert verdicts["m0"].passed is False
    assert verdicts["m0"].reasons == ["the run was STAGED: a plan rode step_started"]
    assert verdicts["m0"].kpis["staged"] is True
    assert verdicts["m1"].passed is True and verdicts["m1"].kpis["staged"] is True
    # Child-branch calls count like any other call; steps come from mission_finished.
    assert verdicts["m1"].kpis["tools"] == ["mcp.add", "mcp.echo"]
    assert verdicts["m1"].kpis["steps"] == 4
    assert verdicts["m2"].passed is True and verdicts["m2"].kpis["staged"] is False
