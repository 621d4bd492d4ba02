"""budgets (max_tokens, max_cost): a mission's budget, judged from the recorded usage and cost,
handed to the built-in agent as flags, refused when it is no budget, read back by diff."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.eval.check import check_path
from evalkit.eval.diff import check_of
from evalkit.eval.runner import check_flags
from evalkit.eval.suite import Mission, load_suite
from evalkit.eval.suite_text import SuiteError
from evalkit.eval.summary import summarize
from evalkit.eval.verdict import judge
from tests._stream_builders import answer, finished, good_run, started, step

GOOD = Path(__file__).parent / "data" / "suites" / "good.yaml"


def verdict(records, **budget):
    return judge(Mission("m1", "chaining", "p", **budget), summarize(records))


def priced(cost):
    return [started(), step(1), answer("The sum is 5."),
            finished(usage={"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
                            "calls": 2, "cost": cost})]


def test_a_run_within_its_budget_passes_and_one_over_fails_saying_by_how_much():
    assert verdict(good_run(), max_tokens=120).passed  # the builders' runs use 120 tokens
    over = verdict(good_run(), max_tokens=100)
    assert over.reasons == ["it used 120 tokens; this mission allows 100"]
    assert verdict(priced(0.004), max_cost=0.005).passed
    dear = verdict(priced(0.006), max_cost=0.005)
    assert dear.reasons == ["it cost 0.006; this mission allows 0.005"]
    assert [check_of(r) for r in over.reasons + dear.reasons] == ["max_tokens", "max_cost"]
    assert over.checks == ["max_tokens"] and dear.checks == ["max_cost"]


def test_an_unknown_cost_cannot_show_it_kept_to_the_budget():
    found = verdict(priced(None), max_cost=0.005)
    assert found.reasons[0].startswith("the run's cost is not known")
    assert check_of(found.reasons[0]) == "max_cost"


def test_a_run_stopped_by_its_budget_fails_naming_the_budget():
    stopped = [started(), step(1), finished(
        "budget_exhausted", budget={"which": "tokens", "limit": 100, "spent": 130})]
    found = verdict(stopped, max_tokens=100)
    assert found.reasons[0] == ("it ran out of its tokens budget (130 spent of 100) before it "
                                "answered")
    assert "max_tokens" in found.checks


def test_the_built_in_agent_is_spawned_with_the_missions_budget(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(GOOD.read_text().replace(
        "  - key: orient-1\n", "  - key: orient-1\n    max_tokens: 5000\n    max_cost: 0.25\n",
        1))
    suite = load_suite(path)
    m = next(m for m in suite.missions if m.key == "orient-1")
    assert check_flags(m) == ("--max-tokens", "5000", "--max-cost", "0.25")
    other = next(m for m in suite.missions if m.key != "orient-1")
    assert check_flags(other) == ()


def test_check_refuses_what_is_no_budget(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(GOOD.read_text().replace(
        "  - key: orient-1\n", "  - key: orient-1\n    max_tokens: 0\n    max_cost: -1\n", 1))
    assert check_path(path).problems == [
        "mission 'orient-1' field 'max_tokens': 0 is not a budget; use 1 or more",
        "mission 'orient-1' field 'max_cost': -1 is not a budget; use an amount more than 0"]
    path.write_text(GOOD.read_text().replace(
        "  - key: orient-1\n", "  - key: orient-1\n    max_cost: lots\n", 1))
    with pytest.raises(SuiteError, match=r"field 'max_cost' \(line \d+\): must be a number, "
                                         r"not a string \('lots'\)"):
        load_suite(path)
