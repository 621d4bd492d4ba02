"""The failure taxonomy: pass, fail, missing, or an infrastructure error — each told apart."""

from __future__ import annotations

import json
from pathlib import Path

from evalkit.eval import taxonomy
from evalkit.eval.score import score
from evalkit.eval.suite import load_suite
from tests._stream_builders import finished, good_run, started, step, write_stream
from tests.harness.conftest import foreign_suite

PASSED = {"passed": True, "missing": False, "kpis": {"records": 5}}
FAILED = {"passed": False, "missing": False, "kpis": {"records": 5}}


def test_a_passed_verdict_is_a_pass_even_after_a_timeout() -> None:
    assert taxonomy.categorize(PASSED, {"timed_out": True}) == ("pass", None)


def test_spawn_failure_and_timeout_come_from_what_the_harness_saw() -> None:
    assert taxonomy.categorize(FAILED, {"spawn_error": "cannot start 'x'"}) == (
        "infra", "spawn_failure: cannot start 'x'")
    category, detail = taxonomy.categorize(FAILED, {"timed_out": True, "timeout_s": 2})
    assert category == "infra" and detail == "timeout: killed after 2 s"


def test_missing_is_a_mission_never_run_and_an_empty_stream_is_infra() -> None:
    missing = {"passed": False, "missing": True, "kpis": {"records": None}}
    assert taxonomy.categorize(missing) == ("missing", None)
    assert taxonomy.categorize(missing, {"exit_code": 1})[0] == "infra"
    empty = {"passed": False, "missing": False, "kpis": {"records": 0}}
    assert taxonomy.categorize(empty, {"exit_code": 1}) == (
        "infra", "zero_events: the agent wrote no record (exit code 1)")


def test_an_endpoint_down_at_the_end_is_infra_but_a_recovered_one_is_not(tmp_path: Path) -> None:
    down = {"event": "model_state", "state": "absent", "provider": "openai", "model": "m",
            "detail": "connection refused"}
    up = {"event": "model_state", "state": "loaded", "provider": "openai", "model": "m"}
    dead = write_stream(tmp_path / "dead.jsonl", [started(), step(0), down,
                                                  finished("incomplete", 1)])
    assert taxonomy.categorize(FAILED, None, dead) == (
        "infra", "endpoint_failure: model openai/m absent: connection refused")
    recovered = write_stream(tmp_path / "ok.jsonl", [started(), down, up, *good_run()[1:]])
    assert taxonomy.categorize(FAILED, None, recovered) == ("fail", None)
    answered = write_stream(tmp_path / "answered.jsonl", [*good_run()[:-1], down, finished()])
    # Down after the answer and never back: the endpoint had the last word.
    assert taxonomy.categorize(FAILED, None, answered)[0] == "infra"
    assert taxonomy.categorize(FAILED) == ("fail", None)


def test_a_run_ended_by_a_wire_that_kept_it_waiting_or_by_the_disk_is_infra(
        tmp_path: Path) -> None:
    """A 429 or 503 that never cleared leaves ``queued``/``loading`` as the last state (no
    ``failed``): it was filed as the agent's failure. The run's own reason says whose it was."""
    queued = {"event": "model_state", "state": "queued", "provider": "openai", "model": "m",
              "retry_after_s": 1.0}
    gave_up = ("transport fault: http://127.0.0.1:9/v1/chat/completions answered HTTP 429; "
               "gave up after 3 tries")
    waited = write_stream(tmp_path / "429.jsonl", [started(), step(0), queued, queued,
                                                   finished("incomplete", 1, reason=gave_up)])
    assert taxonomy.categorize(FAILED, None, waited) == ("infra", f"endpoint_failure: {gave_up}")
    full = "recording failed: cannot record to /r/events.jsonl: No space left on device."
    disk = write_stream(tmp_path / "disk.jsonl", [started(), step(0),
                                                  finished("incomplete", 1, reason=full)])
    assert taxonomy.categorize(FAILED, None, disk) == ("infra", f"recording_failure: {full}")
    told = write_stream(tmp_path / "agent.jsonl", [started(), step(0),
                                                   finished("incomplete", 1, reason="stuck")])
    assert taxonomy.categorize(FAILED, None, told) == ("fail", None)


def test_annotate_reads_command_json_offline_and_adds_fields_without_renaming(
        tmp_path: Path) -> None:
    suite = load_suite(foreign_suite(tmp_path / "s.yaml", train=5, test=3))
    runs = tmp_path / "runs"
    write_stream(runs / "t0" / "events.jsonl", good_run())
    write_stream(runs / "t1" / "events.jsonl", [started(), step(1)])
    (runs / "t1" / "command.json").write_text(json.dumps({"timed_out": True, "timeout_s": 5}))
    (runs / "t2").mkdir()
    (runs / "t2" / "events.jsonl").write_text("")
    plain = score(suite, runs=runs).to_dict()
    report = taxonomy.annotate(score(suite, runs=runs).to_dict(), runs)
    words = {v["key"]: v["category"] for v in report["verdicts"]}
    assert words == {"t0": "pass", "t1": "infra", "t2": "infra", "t3": "missing",
                     "t4": "missing", "h0": "missing", "h1": "missing", "h2": "missing"}
    train = report["halves"]["train"]["categories"]
    assert (train["pass"], train["fail"], train["missing"], train["infra"]) == (1, 0, 2, 2)
    assert train["rate"]["value"] == 0.2 and train["rate_without_infra"]["value"] == 0.3333
    for verdict in report["verdicts"]:  # only additions
        assert {k: v for k, v in verdict.items() if k not in ("category", "infra")} in \
            plain["verdicts"]
    assert report["halves"]["train"]["totals"] == plain["halves"]["train"]["totals"]
    md = taxonomy.to_markdown(report)
    assert "| train | 1 | 0 | 2 | 2 | 20%" in md and "**t1** — timeout" in md
