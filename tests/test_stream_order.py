"""Record order is part of conformance: a stream shuffled, reversed or written past its
end is not a mission stream, however well formed each record is.

Before, the scorer looked at records one by one, so a reversed recording of a
good run still passed. The rule (CONTRACT.md, "Order") lives in the fold,
``evalkit.eval.summary``; these tests hold it from both sides — what must be
refused, with the first offending line in the reason, and what evalkit itself
writes that must still pass: two missions appended to one file, a resume
(no second ``mission_started``), a resume that ended before its first step.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.eval.summary import summarize
from tests._stream_builders import answer, call, finished, good_run, started, step

ROOT = Path(__file__).parent.parent
ORDER = "only a new mission_started or a resumed step_started may follow it"


def problems(records: list[dict]) -> tuple[str, ...]:
    return summarize(records).problems


def test_a_reversed_stream_does_not_conform_from_its_first_line() -> None:
    found = summarize(list(reversed(good_run())))
    assert found.problems[0] == ("line 1: the stream begins with mission_finished; "
                                 "mission_started comes first")
    assert found.problems[1] == f"line 2: answer after the mission_finished of line 1: {ORDER}"
    assert found.nonconforming == 6  # every record but the mission_started, now last


@pytest.mark.parametrize(("records", "said"), [
    ([step(0), started(), answer(), finished()],
     "line 1: the stream begins with step_started; mission_started comes first"),
    ([started(), step(0), finished(), *call(0, "mcp.add")],
     f"line 4: tool_call after the mission_finished of line 3: {ORDER}"),
    ([started(), step(0), finished(), answer()],
     f"line 4: answer after the mission_finished of line 3: {ORDER}"),
    ([started(), step(0), step(2), step(1), answer(), finished()],
     "line 4: step_started index 1 after index 2: steps increase"),
    ([started(), step(0), step(0), answer(), finished()],
     "line 3: step_started index 0 after index 0: steps increase"),
    ([started(), step(0), finished("incomplete"), step(0, resumed={"from_seq": 3}),
      answer(), finished()],
     "line 4: step_started index 0 after index 0: steps increase"),
], ids=["no-start", "call-after-end", "answer-after-end", "step-back", "step-repeated",
        "resume-restarts-steps"])
def test_a_stream_out_of_order_names_its_first_offending_line(records: list[dict],
                                                             said: str) -> None:
    assert problems(records)[0] == said


@pytest.mark.parametrize("records", [
    good_run(),
    # two missions appended to one file: the second starts its steps again
    [*good_run(), *good_run()],
    # the first mission was cut off (no mission_finished); the next one begins anyway
    [started(), step(0), *good_run()],
    # a resume: no second mission_started, its first step says so, indexes go on
    [started(), step(0), *call(0, "mcp.add"), finished("incomplete"),
     step(1, resumed={"from_seq": 5, "steps_replayed": 1}), answer(), finished()],
    # a resume whose process died, not closed: the resumed step follows directly
    [started(), step(0), step(1, resumed={"from_seq": 2, "steps_replayed": 1}), answer(),
     finished()],
    # a resume that ended before its first step writes only its own mission_finished
    [started(), step(0), finished("incomplete"), finished("budget_exhausted")],
], ids=["one", "two-appended", "cut-then-new", "resumed", "resumed-after-a-death",
        "resume-ended-at-once"])
def test_what_evalkit_writes_is_in_order(records: list[dict]) -> None:
    assert problems(records) == ()


def test_the_later_of_two_appended_missions_is_read() -> None:
    later = summarize([*good_run(), started(run_id="run_test-2"), step(0), answer("again"),
                       finished(steps=1)])
    assert later.problems == () and later.run_id == "run_test-2" and later.steps == 1


def test_score_fails_a_recording_whose_lines_were_reversed(tmp_path: Path) -> None:
    """End to end on a committed recording that passes as written."""
    runs = tmp_path / "runs"
    shutil.copytree(ROOT / "recordings" / "analyst" / "good", runs,
                    ignore=shutil.ignore_patterns("manifest.json", "report.*", "runs"))
    suite = str(ROOT / "suites" / "analyst")
    args = ["score", "--suite", suite, "--runs", str(runs), "--json"]
    assert CliRunner().invoke(main, args).exit_code == 0
    events = runs / "busiest-month" / "events.jsonl"
    lines = events.read_text(encoding="utf-8").splitlines(keepends=True)
    events.write_text("".join(reversed(lines)), encoding="utf-8")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    [verdict] = [v for v in json.loads(result.stdout)["verdicts"] if v["key"] == "busiest-month"]
    assert verdict["passed"] is False and "contract" in verdict["checks"]
    assert ("line 1: the stream begins with mission_finished; mission_started comes first"
            in verdict["reasons"][0])
