"""max_model_calls: judged from the recorded usage, refused when negative, read back by diff."""

from __future__ import annotations

from pathlib import Path

from evalkit.eval.check import check_path
from evalkit.eval.diff import check_of
from evalkit.eval.suite import Mission
from evalkit.eval.summary import summarize
from evalkit.eval.verdict import judge
from tests._stream_builders import good_run, started, step

GOOD = Path(__file__).parent / "data" / "suites" / "good.yaml"


def verdict(records, allowed):
    return judge(Mission("m1", "chaining", "p", max_model_calls=allowed), summarize(records))


def test_a_run_within_its_calls_passes_and_one_over_fails_saying_how_many():
    assert verdict(good_run(), 2).passed  # the builders' runs record two calls
    over = verdict(good_run(), 1)
    assert over.reasons == ["it made 2 model calls; this mission allows 1"]
    assert over.checks == ["max_model_calls"] == [check_of(r) for r in over.reasons]


def test_a_run_that_does_not_count_its_calls_cannot_show_it_kept_to_them():
    quiet = [started(), step(1), {"event": "mission_finished", "outcome": "answered",
                                  "steps": 1, "max_steps": 0}]
    found = verdict(quiet, 5)
    assert found.reasons == ["the stream does not say how many model calls were made; "
                             "this mission allows 5"]
    assert check_of(found.reasons[0]) == "max_model_calls"


def test_check_refuses_a_negative_bound(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(GOOD.read_text().replace("  - key: orient-1\n",
                                             "  - key: orient-1\n    max_model_calls: -1\n", 1))
    assert check_path(path).problems == [
        "mission 'orient-1' field 'max_model_calls': -1 is negative; use 0 or more"]
