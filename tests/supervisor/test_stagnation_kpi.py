"""Stagnation as a KPI: the scorer reads, from the recording, where the supervisor saw a loop.

Every way a run is scored — its stream folded, or a dataset's summary, kept by
ingest or folded again from the records it keeps — runs the same
``evalkit.signals`` fold, so each says exactly what the live supervisor said.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.eval import tables
from evalkit.eval.summary import summarize
from evalkit.eval.tables import summaries_from_dataset
from evalkit.eval.verdict import KPI_NAMES, kpis_of
from evalkit.store.ingest import ingest
from evalkit.store.reader import read_stream
from tests.grounding.conftest import RunGrounded, answer, call, review

ECHO = call("mcp.echo", text="again")


def first_review(done) -> tuple[str, int] | None:
    for step in done.events("step_started"):
        if "review" in step:
            return step["review"]["signal"], step["index"] - 1
    return None


@pytest.mark.slow
def test_the_kpi_equals_what_the_supervisor_saw_on_every_scoring_path(
        run_mission: RunGrounded, tmp_path: Path) -> None:
    a, b = call("mcp.echo", text="a"), call("mcp.echo", text="b")
    runs = {
        "repeat": run_mission([ECHO, ECHO, ECHO, review("nudge", "stop"), answer("x")]),
        "oscillation": run_mission([a, b, a, b, review("stuck"), answer("x")]),
        "rejected": run_mission(["no", "no", "no", review("progressing"), answer("x")]),
        "clean": run_mission([call("mcp.add", a=1, b=2), answer("3")]),
    }
    root = tmp_path / "runs"
    files = sorted(root.glob("*/events.jsonl"))
    assert len(files) == len(runs)
    refolded = summaries_from_dataset(ingest(root).out)
    dataset = summaries_from_dataset(tables.ingest(root, tmp_path / "kept").out)
    for name, done in runs.items():
        saw = first_review(done)
        key = f"{done.outcome.run_id}/events.jsonl"
        read = read_stream(done.run_dir)
        plain = summarize(read.records, read.lines, source=key)
        for summary in (plain, refolded[key], dataset[key]):
            got = (summary.stagnation, summary.stagnation_step)
            assert got == (saw if saw else (None, None)), (name, got)
        assert refolded[key] == plain and dataset[key] == plain
        kpis = kpis_of(plain)
        assert set(kpis) == set(KPI_NAMES)
        assert (kpis["stagnation"], kpis["stagnation_step"]) == (saw or (None, None))
    assert first_review(runs["repeat"]) == ("repeat", 2)
    assert first_review(runs["oscillation"]) == ("oscillation", 3)
    assert first_review(runs["rejected"]) == ("rejected", 2)
    assert first_review(runs["clean"]) is None


@pytest.mark.slow
def test_a_stream_from_an_agent_without_a_supervisor_is_scored_too(
        run_mission: RunGrounded) -> None:
    done = run_mission([ECHO, ECHO, call("mcp.add", a=1, b=1), ECHO, ECHO, answer("x")],
                       supervisor=False)
    summary = summarize(done.records)
    assert (summary.stagnation, summary.stagnation_step) == ("repeat", 3)
