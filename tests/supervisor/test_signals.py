"""The stagnation fold on its own: each signal, settling, thresholds, and runs that must not fire."""

from __future__ import annotations

from typing import Any

from evalkit.signals import THRESHOLDS, Watch, fingerprint, stagnation
from tests._stream_builders import call

Call = tuple[str, dict[str, Any], str]


def stream(*steps: list[Call] | str | None, reviews: dict[int, dict] | None = None,
           branch: str | None = None) -> list[dict[str, Any]]:
    """Records of steps: a list of (tool, arguments, output) calls, "rejected", or None (nothing)."""
    records: list[dict[str, Any]] = [{"event": "mission_started", "schema_version": 1,
                                      "objective": "o", "catalogue": [], "gated": [],
                                      "max_steps": 0, "history": 0}]
    for index, step in enumerate(steps):
        started: dict[str, Any] = {"event": "step_started", "index": index}
        if reviews and index in reviews:
            started["review"] = reviews[index]
        records.append(started)
        if step == "rejected":
            records.append({"event": "reply_rejected", "index": index, "problem": "not JSON"})
        elif step:
            for tool, arguments, output in step:
                records.extend(call(index, tool, arguments, output=output))
    if branch is not None:
        for record in records[1:]:
            record["branch"] = branch
    return records


A: list[Call] = [("mcp.echo", {"text": "a"}, "a")]
B: list[Call] = [("mcp.echo", {"text": "b"}, "b")]


def distinct(n: int) -> list[Call]:
    return [("mcp.add", {"a": n, "b": 1}, f'{{"result": {n + 1}}}')]


def fired(records: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(f.signal, f.step) for f in stagnation(records)]


def test_the_same_call_and_result_three_times() -> None:
    assert fired(stream(A, A, A, None)) == [("repeat", 2)]
    assert fired(stream(A, B, A, B)) == []  # two each: not yet
    assert fired(stream(A, distinct(1), A, distinct(2), A, None)) == [("repeat", 4)]


def test_the_same_call_with_a_different_result_is_not_a_repeat() -> None:
    changing = [[("mcp.sleep", {"seconds": 1}, f"slept {i}")] for i in range(6)]
    assert fired(stream(*changing, None)) == []


def test_three_steps_of_rejected_replies() -> None:
    assert fired(stream("rejected", "rejected", "rejected", None)) == [("rejected", 2)]
    assert fired(stream("rejected", "rejected", A, "rejected", None)) == []


def test_a_b_a_b_oscillation() -> None:
    assert fired(stream(A, B, A, B, None)) == [("oscillation", 3)]
    assert fired(stream(distinct(1), A, B, A, B, None)) == [("oscillation", 4)]


def test_four_steps_with_nothing_new() -> None:
    # A is not new the second time, the rejections are not new: 4 stale steps in a row
    assert fired(stream(A, "rejected", "rejected", A, "rejected", None)) == [("idle", 4)]
    assert fired(stream(A, None, None, None, None, None)) == [("idle", 4)]


def test_a_long_varied_run_never_fires() -> None:
    steps = [distinct(i) for i in range(30)]
    steps[10] = "rejected"
    steps[20] = "rejected"
    assert fired(stream(*steps, None)) == []


def test_signals_are_checked_at_boundaries_only() -> None:
    # the third A is the last step: no step_started follows, so no boundary looks at it
    assert fired(stream(A, A, A)) == []


def test_a_firing_with_no_review_restarts_the_window() -> None:
    assert fired(stream(A, A, A, A, A, A, None)) == [("repeat", 2), ("repeat", 5)]


def test_a_progressing_review_raises_that_signals_threshold() -> None:
    review = {"signal": "repeat", "verdict": "progressing", "reviews_left": 2}
    first = [A, distinct(100), A, distinct(101), A]  # fires when index 4 closes
    then: list = []
    for n in range(6):
        then += [A, distinct(n)]
    records = stream(*first, *then[:-1], None, reviews={5: review})
    # six more As (indexes 5, 7, ... 15) at the raised threshold
    assert fired(records) == [("repeat", 4), ("repeat", 15)]
    # without the review the window restarts at the same threshold: it fires at the third A
    assert fired(stream(*first, *then[:-1], None))[1] == ("repeat", 9)
    watch = Watch()
    for record in records:
        watch.feed(record)
    assert watch.thresholds["repeat"] == 2 * THRESHOLDS["repeat"]


def test_a_recorded_threshold_is_taken_as_is() -> None:
    review = {"signal": "repeat", "verdict": "progressing", "reviews_left": 2, "threshold": 3}
    assert fired(stream(*([A] * 6), None, reviews={3: review})) == [("repeat", 2), ("repeat", 5)]


def test_branch_records_are_not_folded_but_direct_ones_are() -> None:
    assert fired(stream(A, A, A, None, branch="s1")) == []
    assert fired(stream(A, A, A, None, branch="direct")) == [("repeat", 2)]


def test_the_fingerprint_ignores_handles_and_ordinals() -> None:
    one = {"tool": "t", "arguments": {"b": 1, "a": 2}, "ok": True, "exit_code": 0,
           "output": "x", "error": None, "handle": "r1"}
    two = {**one, "arguments": {"a": 2, "b": 1}, "handle": "r9", "call": 2}
    assert fingerprint(one) == fingerprint(two)
    assert fingerprint(one) != fingerprint({**one, "output": "y"})


def test_junk_records_do_not_break_the_fold() -> None:
    junk = [{"event": "step_started", "index": {"odd": 1}, "review": "nope"},
            {"event": "tool_result", "tool": 3, "arguments": [1], "output": {"x": 1}},
            {"event": "step_started", "review": {"signal": 7, "threshold": True}}, "x", 5]
    assert stagnation(junk) == []


def test_a_repetition_judged_progress_raises_idle_with_it() -> None:
    review = {"signal": "repeat", "verdict": "progressing", "reviews_left": 2}
    records = stream(*([A] * 9), None, reviews={3: review})
    # six more As after the review: repeat at its raised threshold, not idle at 4
    assert fired(records) == [("repeat", 2), ("repeat", 8)]
    watch = Watch()
    for record in records:
        watch.feed(record)
    assert watch.thresholds["repeat"] == 2 * THRESHOLDS["repeat"]
    assert watch.thresholds["idle"] == 2 * THRESHOLDS["idle"]
    # a false alarm on rejected replies leaves idle where it was
    rejected = {"signal": "rejected", "verdict": "progressing", "reviews_left": 2}
    watch = Watch()
    for record in stream("rejected", "rejected", "rejected", None, reviews={3: rejected}):
        watch.feed(record)
    assert watch.thresholds["idle"] == THRESHOLDS["idle"]
