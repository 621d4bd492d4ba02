"""Grounding end to end: scripted missions against the stub plane, repaired, then grounded or caveated."""

from __future__ import annotations

import json

import pytest

from evalkit.eval.summary import summarize
from evalkit.grounding import Grammar
from tests.grounding.conftest import ASSET_IDS, RunGrounded, answer, call

GRAMMAR = Grammar(identifier_pattern=ASSET_IDS, number_pattern=r"\d[\d,]*(?:\.\d+)?")
READ = call("mcp.read_asset", asset_id="asset.7f3a")


def sequence(done, *names: str) -> list[str]:
    """The events of ``names`` in stream order."""
    return [r["event"] for r in done.records if r["event"] in names]


@pytest.mark.slow
def test_an_invented_figure_is_repaired_and_then_grounded(run_mission: RunGrounded) -> None:
    done = run_mission([READ, answer("Shipped 12,480 units in Q3 2024 (asset.7f3a)."),
                        answer("Shipped 12,481 units in Q3 2024 (asset.7f3a).")], grammar=GRAMMAR)
    assert sequence(done, "step_started", "grounding", "answer", "mission_finished") == [
        "step_started", "step_started", "grounding", "step_started", "grounding", "answer",
        "mission_finished"]
    interim, verdict = done.events("grounding")
    assert interim["repairing"] is True and interim["repairs"] == 1
    assert interim["grounded"] is False and interim["unsupported"] == ["12,480"]
    assert interim["caveat"] is None
    assert verdict["repairing"] is False and verdict["grounded"] is True
    assert verdict["verified"] is True and verdict["repairs"] == 1 and verdict["caveat"] is None
    [said] = done.events("answer")
    assert said["outcome"] == "answered" and said["text"].startswith("Shipped 12,481")
    assert done.records[-1]["outcome"] == "answered"
    # the repair turn named the exact token
    repair = done.model_calls[2]["request"]["messages"][-1]
    assert repair["role"] == "user" and "12,480" in repair["content"]
    assert "not accepted" in repair["content"]


@pytest.mark.slow
def test_an_answer_invented_twice_is_kept_with_a_caveat(run_mission: RunGrounded) -> None:
    done = run_mission([READ, answer("Shipped 12,480 units (asset.7f3a, asset.dead)."),
                        answer("Shipped 12,480 units (asset.7f3a, asset.dead).")],
                       grammar=GRAMMAR)
    names = [r["event"] for r in done.records]
    assert names[-4:] == ["step_started", "grounding", "answer", "mission_finished"]
    interim, verdict = done.events("grounding")
    assert (interim["repairing"], verdict["repairing"]) == (True, False)
    assert interim["unsupported"] == verdict["unsupported"] == ["asset.dead", "12,480"]
    assert verdict["grounded"] is False and verdict["verified"] is False
    assert verdict["repairs"] == 1
    [said] = done.events("answer")
    assert said["outcome"] == "answered_with_caveat"
    assert said["text"].startswith("Shipped 12,480 units")
    assert said["text"].endswith(verdict["caveat"])
    assert "asset.dead" in verdict["caveat"] and "12,480" in verdict["caveat"]
    assert done.records[-1]["outcome"] == "answered_with_caveat"
    assert done.outcome.answer == said["text"]
    summary = summarize(done.records)
    assert (summary.grounding_verdict, summary.grounded, summary.repairs) == (True, False, 1)


@pytest.mark.slow
def test_a_repair_turn_may_read_before_answering_again(run_mission: RunGrounded) -> None:
    done = run_mission([answer("asset.19c2 says the average price is 338.0 EUR."),
                        call("mcp.read_asset", asset_id="asset.19c2"),
                        answer("asset.19c2 says the average price is 338 EUR.")],
                       grammar=GRAMMAR)
    interim, verdict = done.events("grounding")
    assert interim["unsupported"] == ["asset.19c2", "338.0"] and verdict["grounded"] is True
    assert done.records[-1]["outcome"] == "answered"


@pytest.mark.slow
def test_no_grammar_no_grounding_record(run_mission: RunGrounded) -> None:
    done = run_mission([answer("Shipped 99,999 units (asset.dead).")])
    assert done.events("grounding") == []
    assert done.records[-1]["outcome"] == "answered"


@pytest.mark.slow
def test_max_repairs_bounds_the_repair_turns(run_mission: RunGrounded) -> None:
    bad = answer("Shipped 12,480 units.")
    none = run_mission([READ, bad], grammar=Grammar(number_pattern=r"\d[\d,]*", max_repairs=0))
    [only] = none.events("grounding")
    assert only["repairing"] is False and only["repairs"] == 0 and only["caveat"]
    assert none.records[-1]["outcome"] == "answered_with_caveat"
    two = run_mission([READ, bad, bad, bad],
                      grammar=Grammar(number_pattern=r"\d[\d,]*", max_repairs=2))
    assert [(g["repairing"], g["repairs"]) for g in two.events("grounding")] == [
        (True, 1), (True, 2), (False, 2)]


@pytest.mark.slow
def test_no_repair_turn_past_the_step_ceiling(run_mission: RunGrounded) -> None:
    done = run_mission([READ, answer("Shipped 12,480 units.")], grammar=GRAMMAR, steps=2)
    [only] = done.events("grounding")
    assert only["repairing"] is False and only["repairs"] == 0
    assert done.records[-1]["outcome"] == "answered_with_caveat"


@pytest.mark.slow
def test_a_figure_laundered_through_a_code_tool_is_still_unsupported(
        run_mission: RunGrounded) -> None:
    done = run_mission([READ, answer("Shipped 12,480 units."),
                        call("run_python_code", code="print(12480)"),
                        answer("Shipped 12,480 units (computed).")], grammar=GRAMMAR,
                       profile="dev")
    assert done.events("tool_result")[1]["output"].strip() == "12480"
    verdict = done.events("grounding")[-1]
    assert verdict["grounded"] is False and verdict["unsupported"] == ["12,480"]
    assert done.records[-1]["outcome"] == "answered_with_caveat"


@pytest.mark.slow
def test_a_quoted_timestamp_grounds_nothing_and_claims_nothing(run_mission: RunGrounded) -> None:
    grammar = Grammar(number_pattern=r"\d[\d,]*", max_repairs=0)
    view = call("mcp.view_run", run_id="run.a1b2c3")
    quoted = run_mission([view, answer("The run started at 2024-10-02T09:14:03Z.")],
                         grammar=grammar)
    [verdict] = quoted.events("grounding")
    assert verdict["grounded"] is True and verdict["verified"] is False
    assert verdict["silent"] == ["figures"]
    borrowed = run_mission([view, answer("The run took 14 steps.")], grammar=grammar)
    assert borrowed.events("grounding")[0]["unsupported"] == ["14"]


@pytest.mark.slow
def test_repair_under_the_native_protocol(run_mission: RunGrounded) -> None:
    def reply(name: str, **arguments: object) -> dict:
        return {"tool_calls": [{"name": name, "arguments": json.dumps(arguments)}]}

    done = run_mission([reply("mcp_read_asset", asset_id="asset.7f3a"),
                        reply("mission_answer", text="12,480 units"),
                        reply("mission_answer", text="12,481 units")],
                       grammar=GRAMMAR, protocol="native")
    interim, verdict = done.events("grounding")
    assert interim["repairing"] and verdict["grounded"]
    sent = done.model_calls[2]["request"]["messages"]
    assert sent[-1]["role"] == "tool" and "12,480" in sent[-1]["content"]
    assert sent[-1]["tool_call_id"] == sent[-2]["tool_calls"][0]["id"]


def test_the_console_says_what_grounding_and_the_supervisor_decided() -> None:
    from evalkit.runtime.console import Console

    line = Console(None).line  # type: ignore[arg-type]
    base = {"event": "grounding", "ran": True, "repairs": 0, "caveat": None, "silent": [],
            "uncited": [], "checks": []}
    assert "repair turn" in line({**base, "grounded": False, "verified": False,
                                  "repairing": True, "unsupported": ["12,480"]})
    assert "NOT grounded (12,480)" in line({**base, "grounded": False, "verified": False,
                                            "repairing": False, "unsupported": ["12,480"]})
    assert "NOTHING CHECKED" in line({**base, "grounded": True, "verified": False,
                                      "repairing": False, "unsupported": []})
    said = line({"event": "step_started", "index": 3,
                 "review": {"signal": "repeat", "verdict": "nudge", "reviews_left": 2,
                            "note": "read an asset"}})
    assert said == "[step 3] supervisor saw repeat: nudge (2 review(s) left): read an asset"
