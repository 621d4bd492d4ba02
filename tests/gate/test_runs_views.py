"""The run store contract: RunRecord, RunEvent, TerminalSummary and `evalkit runs list|show`.

Read over the committed corpus (recordings/, real runs of the built-in runtime) and over
runs made here: with the store's own writer, and written raw as a foreign agent or a
crash would leave them (torn lines, no mission_finished, a broken meta.json).
"""

from __future__ import annotations

import json
import secrets
import string
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.contract import OUTCOMES
from evalkit.errors import EvalkitError
from evalkit.redact import REDACTED
from evalkit.store import layout
from evalkit.store.reader import read_events_file
from evalkit.store.runstore import RunStore
from evalkit.store.runviews import (
    INCOMPLETE,
    RUNNING,
    STATUSES,
    TEXT_LIMIT,
    find_run_dirs,
    list_runs,
    run_events,
    run_record,
    terminal_summary,
)
from tests._runs import answer, call, envelope, finished, result, started, write_run

RECORDINGS = Path(__file__).resolve().parents[2] / "recordings"


def _cli(*args: str | Path) -> tuple[int, str]:
    done = CliRunner().invoke(main, [str(a) for a in args])
    return done.exit_code, done.output


def _recorded(suite: str, variant: str, key: str) -> Path:
    (run,) = sorted((RECORDINGS / suite / variant / key / "runs").iterdir())
    return run


# -- the corpus -------------------------------------------------------------------------------


def test_every_recorded_run_is_listed_with_its_suite_task_and_outcome() -> None:
    runs = list_runs(RECORDINGS)
    expected = sorted(RECORDINGS.glob("*/*/*/runs/run_*"))
    assert sorted(Path(r.path) for r in runs) == expected
    for record in runs:
        path = Path(record.path)
        # recordings/<suite>/<variant>/<key>/runs/<run id>
        assert record.workflow_id == path.parents[3].name
        assert record.task_id == path.parents[1].name
        meta = json.loads((path / layout.META_FILE).read_text())
        assert record.status == meta["meta"]["outcome"]
        assert record.run_id == path.name
        assert record.metadata["sealed"] is True


@pytest.mark.slow
def test_suite_outcome_filters_pick_exactly_the_matching_runs() -> None:
    analyst = list_runs(RECORDINGS, suite="analyst")
    assert analyst and {r.workflow_id for r in analyst} == {"analyst"}
    assert len(analyst) == len(list(RECORDINGS.glob("analyst/*/*/runs/run_*")))
    waiting = list_runs(RECORDINGS, outcome="awaiting_approval")
    assert {(r.workflow_id, r.task_id) for r in waiting} >= {("analyst", "gated-compute"),
                                                            ("stub", "boundary")}
    assert all(r.status == "awaiting_approval" for r in waiting)
    both = list_runs(RECORDINGS, suite="stub", outcome="awaiting_approval")
    assert both and all(r.workflow_id == "stub" for r in both)
    assert list_runs(RECORDINGS, suite="no-such-suite") == []


def test_terminal_summary_of_a_gated_recording() -> None:
    run = _recorded("stub", "good", "boundary")
    summary = terminal_summary(run)
    assert summary.status == "awaiting_approval" and summary.finished
    assert summary.used_tools == ("mcp.read_asset",) and summary.tool_calls == 1
    assert summary.gated_tools == ("mcp.submit",)
    assert (summary.input_tokens, summary.output_tokens, summary.total_tokens,
            summary.llm_calls) == (2050, 37, 2087, 2)
    assert summary.content_ref is None
    assert summary.abort_reason == "awaiting approval of mcp.submit"


def test_content_ref_points_at_the_answer_and_the_answer_is_not_copied() -> None:
    run = _recorded("analyst", "good", "busiest-month")
    summary = terminal_summary(run)
    assert summary.status in ("answered", "answered_with_caveat")
    assert summary.abort_reason is None
    name, _, where = summary.content_ref.partition("#seq=")
    assert name == f"{run.name}/{layout.EVENTS_FILE}"
    read = read_events_file(run / layout.EVENTS_FILE)
    (answer_record,) = [r for i, r in enumerate(read.records)
                        if read.envelopes[i]["seq"] == int(where)]
    assert answer_record["event"] == "answer"
    assert summary.answer_chars == len(answer_record["text"])
    shown = json.dumps([summary.to_dict(), *(e.to_dict() for e in run_events(run))])
    assert answer_record["text"] not in shown


def test_events_come_in_order_with_bounded_metadata_and_a_limit() -> None:
    run = _recorded("analyst", "good", "gated-compute")
    events = run_events(run)
    assert [e.type for e in events] == ["mission_started", "step_started", "gate_requested",
                                        "mission_finished"]
    assert [e.seq for e in events] == [1, 2, 3, 4]
    gate = events[2].metadata
    assert gate["tool"] == "run_python_code" and "arguments" not in gate
    assert gate["arguments_chars"] > 0 and gate["digest"].startswith("sha256:")
    assert "objective" not in events[0].metadata and events[0].metadata["objective_chars"] > 0
    assert [e.type for e in run_events(run, limit=2)] == ["mission_started", "step_started"]
    assert run_events(run, limit=0) == []


# -- runs made here ---------------------------------------------------------------------------


def _dated(root: Path, name: str, created: str, outcome: str = "answered") -> Path:
    return write_run(root / name, [envelope(1, started()), envelope(2, finished(outcome))],
                     meta={"run_id": name, "created_at": created, "updated_at": created,
                           "meta": {"suite": "alpha" if "a" in name[-1] else "beta"}})


def test_date_filters_take_since_inclusive_and_a_bare_until_as_its_whole_day(
        tmp_path: Path) -> None:
    _dated(tmp_path, "run_1-a", "2026-01-01T10:00:00.000Z")
    _dated(tmp_path, "run_2-b", "2026-02-01T23:59:59.500Z", "budget_exhausted")
    _dated(tmp_path, "run_3-a", "2026-03-01T00:00:00Z")

    def ids(**kw: str) -> list[str]:
        return [r.run_id for r in list_runs(tmp_path, **kw)]

    assert ids() == ["run_1-a", "run_2-b", "run_3-a"]
    assert ids(since="2026-02-01") == ["run_2-b", "run_3-a"]
    assert ids(until="2026-02-01") == ["run_1-a", "run_2-b"]
    assert ids(until="2026-02-01T12:00:00Z") == ["run_1-a"]
    assert ids(since="2026-02-01", until="2026-02-28") == ["run_2-b"]
    assert ids(since="2026-03-01T00:00:00+00:00") == ["run_3-a"]
    assert ids(suite="alpha") == ["run_1-a", "run_3-a"]
    assert ids(outcome="budget_exhausted") == ["run_2-b"]
    for bad in ("yesterday", "2026-02-30", "2026-1-1x"):
        with pytest.raises(EvalkitError, match="is not a date"):
            list_runs(tmp_path, since=bad)


def test_a_run_with_no_times_of_its_own_is_dated_by_its_id(tmp_path: Path) -> None:
    write_run(tmp_path / "run_20250704-120000-abcd", [])  # a crash before anything
    (record,) = list_runs(tmp_path, since="2025-07-04", until="2025-07-04")
    assert record.created_at == "2025-07-04T12:00:00Z"
    assert list_runs(tmp_path, since="2025-07-05") == []


def test_torn_and_partial_runs_are_listed_incomplete_never_an_error(tmp_path: Path) -> None:
    torn = write_run(tmp_path / "run_torn", (envelope(1, started()) + "\n"
                     + '{"seq":2,"at":"2026-01-01T00:00:00Z","record":{"event":"tool_ca').encode())
    write_run(tmp_path / "run_partial", [envelope(1, started()), envelope(2, call(0, "mcp.a"))],
              meta={"run_id": "run_partial", "meta": {}})
    broken = write_run(tmp_path / "run_badmeta", [envelope(1, started()),
                                                  envelope(2, finished())])
    (broken / layout.META_FILE).write_text("{not json")
    (tmp_path / "run_metaonly").mkdir()
    (tmp_path / "run_metaonly" / layout.META_FILE).write_text('{"run_id": "run_metaonly"}')
    write_run(tmp_path / "run_oddword", [envelope(1, finished("exploded"))])
    (tmp_path / "not-a-run").mkdir()  # no run id: not a run
    records = {r.run_id: r for r in list_runs(tmp_path)}
    assert set(records) == {"run_torn", "run_partial", "run_badmeta", "run_metaonly",
                            "run_oddword"}
    for name in ("run_torn", "run_partial", "run_metaonly"):
        assert records[name].status == INCOMPLETE
        assert records[name].metadata["reason"] == "the stream ends without mission_finished"
    assert records["run_torn"].metadata["skipped_lines"] == 1
    assert records["run_badmeta"].status == "answered"
    assert records["run_badmeta"].metadata["meta_unreadable"] is True
    assert records["run_oddword"].status == INCOMPLETE
    assert records["run_oddword"].metadata["recorded_outcome"] == "exploded"
    summary = terminal_summary(torn)
    assert (summary.finished, summary.skipped_lines, summary.events) == (False, 1, 1)
    assert "without mission_finished" in summary.abort_reason
    assert [r.run_id for r in list_runs(tmp_path, outcome="incomplete")] == sorted(
        ["run_torn", "run_partial", "run_metaonly", "run_oddword"], key=lambda n: (
            records[n].created_at or "", n))
    code, out = _cli("runs", "list", tmp_path)
    assert code == 0 and "5 run(s)" in out
    code, out = _cli("runs", "show", torn)
    assert code == 0 and "incomplete" in out and "1 unreadable line(s) skipped" in out


def test_a_run_being_written_is_running_then_its_outcome(tmp_path: Path) -> None:
    store = RunStore(tmp_path, durable=False)
    writer = store.create({"objective": "count the rows", "suite": "mine", "task": "rows"})
    writer.append(started(run_id=writer.run_id))
    (live,) = list_runs(tmp_path)
    assert (live.status, live.workflow_id, live.task_id) == (RUNNING, "mine", "rows")
    assert terminal_summary(writer.path).abort_reason is None
    writer.append(finished("answered"))
    writer.update_meta(outcome="answered")
    writer.close()
    (done,) = list_runs(tmp_path, outcome="answered")
    assert done.run_id == writer.run_id and done.created_at and done.finished_at
    assert set(STATUSES) == {*OUTCOMES, RUNNING}


def test_a_governance_refusal_is_counted_and_shown_bounded(tmp_path: Path) -> None:
    refusal = "denied under profile 'safe': python.exec needs --profile dev " + "x" * 400
    run = write_run(tmp_path / "run_denied", [
        envelope(1, started()), envelope(2, call(0, "run_python_code")),
        envelope(3, result(0, "run_python_code", ok=False, exit_code=None, output=refusal,
                           error=refusal)),
        envelope(4, call(1, "mcp.a")),
        envelope(5, result(1, "mcp.a", ok=False, exit_code=1, error="boom " * 5)),
        envelope(6, finished("incomplete", reason="stuck"))])
    summary = terminal_summary(run)
    assert (summary.denied_calls, summary.failed_calls, summary.tool_calls) == (1, 1, 2)
    assert summary.abort_reason == "stuck"
    shown = run_events(run)[2].metadata
    assert shown["refusal"].startswith("denied under profile 'safe'")
    assert len(shown["refusal"]) == TEXT_LIMIT and shown["refusal"].endswith("…")
    assert "refusal" not in run_events(run)[4].metadata  # a tool's own error: size only
    assert run_events(run)[4].metadata["error_chars"] == 25


# -- the command ------------------------------------------------------------------------------


def test_runs_list_and_show_print_json_that_parses() -> None:
    code, out = _cli("runs", "list", RECORDINGS, "--suite", "stub", "--json")
    assert code == 0
    listed = json.loads(out)
    assert listed["format"] == "evalkit-runs" and listed["runs"]
    assert {r["workflow_id"] for r in listed["runs"]} == {"stub"}
    run = _recorded("stub", "good", "boundary")
    code, out = _cli("runs", "show", run, "--json", "--events", "3")
    assert code == 0
    shown = json.loads(out)
    assert shown["record"]["run_id"] == run.name and shown["record"]["task_id"] == "boundary"
    assert shown["summary"]["gated_tools"] == ["mcp.submit"]
    assert [e["type"] for e in shown["events"]] == ["mission_started", "step_started",
                                                     "tool_call"]
    code, out = _cli("runs", "show", run.name, "--root", RECORDINGS)
    assert code == 0 and f"run {run.name}: awaiting_approval" in out
    assert "events (7 of 7)" in out
    code, by_mission = _cli("runs", "show", run.parents[1])  # the mission's folder: its one run
    assert code == 0 and by_mission == out
    code, out = _cli("runs", "show", RECORDINGS / "stub")
    assert code == 2 and "holds 24 runs" in out


def test_the_default_root_is_the_state_folders_run_store(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(layout.RUNS_ENV, raising=False)
    monkeypatch.setenv("EVALKIT_HOME", str(tmp_path / "home"))
    store = RunStore(tmp_path / "home" / "runs", durable=False)
    with store.create({"objective": "o"}) as writer:
        writer.append(finished("budget_exhausted"))
    code, out = _cli("runs", "list")
    assert code == 0 and writer.run_id in out and "budget_exhausted" in out
    code, out = _cli("runs", "show", writer.run_id)
    assert code == 0 and f"run {writer.run_id}: budget_exhausted" in out
    monkeypatch.setenv(layout.RUNS_ENV, "off")
    code, out = _cli("runs", "list")
    assert code == 2 and "switched off" in out


def test_bad_words_dates_and_runs_are_one_sentence_and_exit_2(tmp_path: Path) -> None:
    code, out = _cli("runs", "list", RECORDINGS, "--outcome", "passed")
    assert code == 2
    assert out.strip() == ("Error: 'passed' is not an outcome; the outcomes are "
                           + ", ".join(OUTCOMES))
    code, out = _cli("runs", "list", RECORDINGS, "--until", "last week")
    assert code == 2 and len(out.strip().splitlines()) == 1 and "is not a date" in out
    code, out = _cli("runs", "show", "run_nope", "--root", tmp_path)
    assert code == 2 and "no such run: run_nope" in out
    code, out = _cli("runs", "list", tmp_path / "missing")
    assert code == 2 and "no run store at" in out
    assert "Traceback" not in out


# -- the boundary: no payload, no secret ------------------------------------------------------


def _token(n: int) -> str:
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(n))


def test_planted_secrets_and_payloads_never_appear_in_runs_output(tmp_path: Path) -> None:
    shaped = {"openai": "sk-" + _token(32), "github": "ghp_" + _token(36),
              "aws": "AKIA" + "".join(secrets.choice(string.ascii_uppercase) for _ in range(16)),
              "jwt": f"eyJ{_token(18)}.eyJ{_token(26)}.{_token(40)}"}
    plain = {k: f"{k}-{_token(24)}" for k in ("objective", "argument", "output", "answer",
                                               "error", "gate", "key")}
    said = " ".join(shaped.values())
    # Through the store's writer (which scrubs the shaped ones on the way in) ...
    store = RunStore(tmp_path / "store", durable=False)
    with store.create({"objective": f"{plain['objective']} {said}"}) as writer:
        writer.append(started(objective=f"{plain['objective']} {said}"))
        writer.append(call(0, "mcp.echo", arguments={"text": said, plain["key"]: 1}))
        writer.append(result(0, "mcp.echo", arguments={"text": said}, output=said,
                             error=f"denied: {said}"))
        writer.append(finished("incomplete", reason=f"crashed: {said}"))
    # ... and raw, as a foreign agent could leave it: every payload field holds a secret.
    raw = write_run(tmp_path / "store" / "run_raw-1", [
        envelope(1, started(objective=plain["objective"] + said)),
        envelope(2, call(0, "mcp.echo", arguments={"q": plain["argument"], plain["key"]: said})),
        envelope(3, result(0, "mcp.echo", arguments={"q": plain["argument"]},
                           output=plain["output"] + said, ok=False,
                           error=f"{plain['error']} {said}")),
        envelope(4, {"event": "gate_requested", "index": 1, "tool": "mcp.submit",
                     "arguments": {"value": plain["gate"]}, "reason": f"gated: {said}"}),
        envelope(5, answer(plain["answer"] + said)),
        envelope(6, finished("answered", reason=said))])
    texts = []
    for args in (("runs", "list", tmp_path / "store"), ("runs", "list", tmp_path / "store",
                                                        "--json")):
        code, out = _cli(*args)
        assert code == 0
        texts.append(out)
    for run in (writer.path, raw):
        for extra in ((), ("--json",)):
            code, out = _cli("runs", "show", run, "--events", "100", *extra)
            assert code == 0
            texts.append(out)
    joined = "\n".join(texts)
    leaks = [name for name, secret in [*shaped.items(), *plain.items()] if secret in joined]
    assert leaks == []
    assert "mcp.echo" in joined and REDACTED in joined  # bounded text was scrubbed, not dropped


def test_find_run_dirs_skips_hidden_folders_and_does_not_look_inside_a_run(
        tmp_path: Path) -> None:
    outer = write_run(tmp_path / "a" / "run_outer", [envelope(1, finished())])
    write_run(outer / "run_inner", [envelope(1, finished())])
    write_run(tmp_path / ".partial" / "run_hidden", [envelope(1, finished())])
    assert find_run_dirs(tmp_path) == [outer]
    assert run_record(outer).status == "answered"
