"""The supervisor in the real loop: scripted runs that go in circles, each verdict's effect, the bound.

The same scripted model writes the mission turns and answers the reviews, in
order, as one model would. Every run here goes through ``check_recording``:
review calls are in model.jsonl and counted in ``usage.calls``.
"""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from evalkit.eval.summary import summarize
from evalkit.grounding import Grammar
from evalkit.runtime.command import mission_command
from evalkit.signals import stagnation
from tests.grounding.conftest import ASSET_IDS, RunGrounded, answer, call, review
from tests.runtime.conftest import STUB

ECHO = call("mcp.echo", text="again")
BAD = "I think I should look at the data first."  # not JSON: rejected


def reviews(done) -> list[tuple[int, dict[str, Any]]]:
    return [(s["index"], s["review"]) for s in done.events("step_started") if "review" in s]


def kinds(done) -> list[str]:
    return [c["kind"] for c in done.model_calls]


def same_as_offline(done) -> None:
    """The scorer's offline fold saw what the supervisor saw: same signals, same steps."""
    online = [(index - 1, r["signal"]) for index, r in reviews(done)]
    offline = [(f.step, f.signal) for f in stagnation(done.records)]
    assert offline == online
    summary = summarize(done.records)
    if online:
        assert (summary.stagnation_step, summary.stagnation) == online[0]
    else:
        assert summary.stagnation is None and summary.stagnation_step is None


@pytest.mark.slow
def test_repeat_fires_and_a_nudge_is_injected(run_mission: RunGrounded) -> None:
    done = run_mission([ECHO, ECHO, ECHO, review("nudge", "Stop echoing; read an asset."),
                        answer("done")])
    [(index, said)] = reviews(done)
    assert index == 3
    assert said == {"signal": "repeat", "verdict": "nudge", "reviews_left": 2, "threshold": 3,
                    "note": "Stop echoing; read an asset."}
    step = done.events("step_started")[3]
    assert step["injected"] == ["Supervisor's note: Stop echoing; read an asset."]
    assert kinds(done) == ["mission", "mission", "mission", "plain", "mission"]
    plain = done.model_calls[3]
    assert plain["request"]["extra"]["tools"] is None
    asked = plain["request"]["messages"][-1]["content"]
    assert "same tool call returned the same result 3 times" in asked
    assert "mcp.echo" in asked and '"progressing"' in asked
    # the nudge is the user turn right before the next mission call
    assert done.model_calls[4]["request"]["messages"][-1] == {
        "role": "user", "content": "Supervisor's note: Stop echoing; read an asset."}
    assert done.records[-1]["outcome"] == "answered" and "reason" not in done.records[-1]
    assert done.records[-1]["usage"]["calls"] == 5
    same_as_offline(done)


@pytest.mark.slow
def test_rejected_replies_fire_and_stuck_winds_the_run_up(run_mission: RunGrounded) -> None:
    done = run_mission([BAD, BAD, BAD, review("stuck", "It never produces JSON."),
                        answer("Best I can say: nothing was read.")])
    [(index, said)] = reviews(done)
    assert (index, said["signal"], said["verdict"]) == (3, "rejected", "stuck")
    assert "injected" not in done.events("step_started")[3]
    told = done.model_calls[4]["request"]["messages"][-1]["content"]
    assert "judged this run stuck" in told
    finished = done.records[-1]
    assert (finished["outcome"], finished["reason"]) == ("answered", "stuck")
    assert done.events("answer")[0]["text"] == "Best I can say: nothing was read."
    same_as_offline(done)


@pytest.mark.slow
def test_a_stuck_run_that_calls_a_tool_instead_of_answering_ends_incomplete(
        run_mission: RunGrounded) -> None:
    done = run_mission([ECHO, ECHO, ECHO, review("stuck"), ECHO])
    last = done.events("reply_rejected")[-1]
    assert last["index"] == 3 and last["tool"] == "mcp.echo" and "stuck" in last["problem"]
    assert len(done.events("tool_call")) == 3  # the stuck turn ran nothing
    finished = done.records[-1]
    assert (finished["outcome"], finished["reason"]) == ("incomplete", "stuck")


@pytest.mark.slow
def test_oscillation_and_a_progressing_verdict_raises_its_threshold(
        run_mission: RunGrounded) -> None:
    a, b = call("mcp.echo", text="a"), call("mcp.echo", text="b")
    done = run_mission([a, b, a, b, review("progressing", "It is comparing two values."),
                        a, b, a, b, answer("a and b")])
    [(index, said)] = reviews(done)
    assert (index, said["signal"], said["verdict"], said["threshold"]) == (
        4, "oscillation", "progressing", 8)
    assert said["reviews_left"] == 2 and "injected" not in done.events("step_started")[4]
    assert done.records[-1]["outcome"] == "answered"
    same_as_offline(done)


@pytest.mark.slow
def test_nothing_new_for_four_steps(run_mission: RunGrounded) -> None:
    done = run_mission([ECHO, BAD, BAD, ECHO, BAD, review("nudge"), answer("ok")])
    [(index, said)] = reviews(done)
    assert (index, said["signal"]) == (5, "idle")
    assert said["note"].startswith("4 steps in a row produced no new call or result")
    same_as_offline(done)


@pytest.mark.slow
def test_an_unreadable_review_counts_as_progressing_without_raising(
        run_mission: RunGrounded) -> None:
    done = run_mission([ECHO, ECHO, ECHO, "hmm, hard to say", ECHO, ECHO, ECHO,
                        review("nudge", "try something else"), answer("ok")])
    (first_at, first), (second_at, second) = reviews(done)
    assert first["verdict"] == "progressing" and first["threshold"] == 3
    assert "could not be read" in first["note"]
    assert (second_at - first_at, second["verdict"], second["reviews_left"]) == (3, "nudge", 1)
    same_as_offline(done)


@pytest.mark.slow
def test_at_most_three_reviews_and_the_last_cannot_say_progressing(
        run_mission: RunGrounded) -> None:
    script: list[Any] = [ECHO] * 3 + [review("progressing")]     # threshold 3 -> 6
    script += [ECHO] * 6 + [review("progressing")]               # 6 -> 9
    script += [ECHO] * 9 + [review("progressing"), answer("stopped")]  # the last: stuck
    done = run_mission(script)
    verdicts = [(r["signal"], r["verdict"], r["reviews_left"], r["threshold"])
                for _, r in reviews(done)]
    assert verdicts == [("repeat", "progressing", 2, 6), ("repeat", "progressing", 1, 9),
                        ("repeat", "stuck", 0, 9)]
    assert "cannot say progressing" in reviews(done)[-1][1]["note"]
    last_ask = [c for c in done.model_calls if c["kind"] == "plain"][-1]
    assert "last review" in last_ask["request"]["messages"][-1]["content"]
    assert kinds(done).count("plain") == 3
    assert (done.records[-1]["outcome"], done.records[-1]["reason"]) == ("answered", "stuck")
    same_as_offline(done)


@pytest.mark.slow
def test_with_no_reviews_left_the_next_firing_is_stuck_without_asking(
        run_mission: RunGrounded) -> None:
    script: list[Any] = []
    for _ in range(3):
        script += [ECHO] * 3 + [review("nudge", "change course")]
    script += [ECHO] * 3 + [answer("giving up")]
    done = run_mission(script)
    said = [r for _, r in reviews(done)]
    assert [r["verdict"] for r in said] == ["nudge", "nudge", "nudge", "stuck"]
    assert [r["reviews_left"] for r in said] == [2, 1, 0, 0]
    assert "no reviews left" in said[-1]["note"]
    assert kinds(done).count("plain") == 3
    assert (done.records[-1]["outcome"], done.records[-1]["reason"]) == ("answered", "stuck")
    same_as_offline(done)


@pytest.mark.slow
def test_a_long_varied_run_is_left_alone(run_mission: RunGrounded) -> None:
    script: list[Any] = [call("mcp.add", a=i, b=i + 1) for i in range(12)]
    script[4] = BAD
    script += [call("mcp.read_asset", asset_id=a) for a in ("asset.7f3a", "asset.19c2")]
    done = run_mission(script + [answer("the sums")])
    assert reviews(done) == [] and "plain" not in kinds(done)
    assert done.records[-1]["steps"] == 15
    same_as_offline(done)


@pytest.mark.slow
def test_switched_off_it_never_asks_but_the_stream_still_shows_the_loop(
        run_mission: RunGrounded) -> None:
    done = run_mission([ECHO] * 7 + [answer("done")], supervisor=False)
    assert reviews(done) == [] and "plain" not in kinds(done)
    assert done.records[-1]["outcome"] == "answered"
    summary = summarize(done.records)
    assert (summary.stagnation, summary.stagnation_step) == ("repeat", 2)


@pytest.mark.slow
def test_a_stuck_answer_is_grounded_without_a_repair_turn(run_mission: RunGrounded) -> None:
    grammar = Grammar(identifier_pattern=ASSET_IDS, number_pattern=r"\d[\d,]*")
    done = run_mission([ECHO, ECHO, ECHO, review("stuck"), answer("It is 12,480 units.")],
                       grammar=grammar)
    [verdict] = done.events("grounding")
    assert verdict["repairing"] is False and verdict["repairs"] == 0
    assert verdict["unsupported"] == ["12,480"]
    finished = done.records[-1]
    assert (finished["outcome"], finished["reason"]) == ("answered_with_caveat", "stuck")


@pytest.mark.slow
def test_the_cli_switch(tmp_path) -> None:
    script = tmp_path / "s.json"
    import json

    script.write_text(json.dumps([ECHO] * 3 + [answer("done")]), encoding="utf-8")
    events = tmp_path / "events.jsonl"
    result = CliRunner().invoke(mission_command, [
        "loop", "--script", str(script), "--mcp-stdio", STUB, "--events", str(events),
        "--no-supervisor", "--unsandboxed"], env={"EVALKIT_RUNS": "off"})
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in events.read_text().splitlines()]
    assert records[-1]["outcome"] == "answered"
    assert not any("review" in r for r in records)
    # the same script with the supervisor on: the fourth reply is read as the review
    events.unlink()
    result = CliRunner().invoke(mission_command, [
        "loop", "--script", str(script), "--mcp-stdio", STUB, "--events", str(events),
        "--unsandboxed"], env={"EVALKIT_RUNS": "off"})
    records = [json.loads(line) for line in events.read_text().splitlines()]
    assert any(r.get("review", {}).get("verdict") == "progressing" for r in records)
