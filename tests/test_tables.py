"""A dataset's summaries are the fold's: kept by ingest, or folded again from its records."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalkit.contract import FIELDS, OPTIONAL
from evalkit.errors import EvalkitError
from evalkit.eval import tables
from evalkit.eval.tables import (
    DatasetSummaries,
    query,
    stored_summaries_current,
    summaries_from_dataset,
)
from evalkit.store.ingest import ingest
from evalkit.store.ingest import writers as ingest_writers
from evalkit.store.layout import resolve_relative
from tests._runs import bare, envelope, reference, write_corpus, write_run


def _assert_equal(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for key, summary in want.items():
        assert got[key].as_dict() == summary.as_dict(), key
        assert got[key] == summary, key


def test_corpus_summaries_equal_summarize(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_corpus(runs)
    files = sorted(runs.glob("*/events.jsonl"))
    want = reference(runs, files)
    result = ingest(runs)  # the bare dataset: summaries folded from its records when asked
    assert not stored_summaries_current(result.out)
    _assert_equal(summaries_from_dataset(result.out), want)
    kept = tables.ingest(runs, tmp_path / "kept")  # what `evalkit ingest` writes
    assert stored_summaries_current(kept.out)
    _assert_equal(summaries_from_dataset(kept.out), want)


def test_kept_summaries_are_read_not_recomputed(tmp_path: Path, monkeypatch) -> None:
    runs = tmp_path / "runs"
    write_corpus(runs)
    want = reference(runs, sorted(runs.glob("*/events.jsonl")))
    out = tables.ingest(runs).out

    def no_fold(dataset):
        raise AssertionError("the records were folded again although the kept summaries "
                             "are current")

    monkeypatch.setattr(tables, "_refolded", no_fold)
    _assert_equal(summaries_from_dataset(out), want)


def _table_paths(dataset: Path) -> list[str]:
    import pyarrow.parquet as pq

    return pq.read_table(dataset / "summaries.parquet", columns=["events_path"]).column(0).to_pylist()


@pytest.mark.parametrize("order", ["shuffled", "sorted"])
def test_kept_summaries_find_each_mission_as_the_layout_rule_does(
        tmp_path: Path, monkeypatch, order: str) -> None:
    import random

    import pyarrow.parquet as pq

    runs = tmp_path / "runs"
    write_corpus(runs)
    for extra in ("every_event/second/events.jsonl", "every_event/.hidden/events.jsonl",
                  "lonely/a/b/events.jsonl", "lonely-too/events.jsonl", "deep/a/b/c/events.jsonl",
                  "hidden/.x/events.jsonl", "odd/a.b/events.jsonl"):
        (runs / extra).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(runs / "every_event" / "events.jsonl", runs / extra)
    out = tables.ingest(runs, workers=1).out
    table = pq.read_table(out / "summaries.parquet")
    rows = list(range(len(table)))
    random.Random(7).shuffle(rows) if order == "shuffled" else rows.sort(
        key=lambda i: table.column("events_path")[i].as_py())
    pq.write_table(table.take(rows), out / "summaries.parquet", row_group_size=2)
    kept = DatasetSummaries(out)

    paths = _table_paths(out)
    for key in {p.split("/", 1)[0] for p in paths} | {"nowhere", "every", "lonely-"}:
        found = kept.find(key)
        want = resolve_relative(key, [p for p in paths if p.split("/", 1)[0] == key])
        assert (found and found[0]) == want, key
        if found:
            assert paths[found[1]] == found[0]
            assert kept.summary(found[1]) == summaries_from_dataset(out)[found[0]]


def test_row_groups_end_at_the_bytes_bound_as_batches_arrive(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("summary", pa.string())])
    writers = ingest_writers.Writers(tmp_path, {"summaries": schema})
    batch = pa.table({"summary": ["x" * 1000] * 1000}, schema=schema)  # ~1 MB a batch
    batches = 3 * ingest_writers.ROW_GROUP_BYTES // batch.nbytes
    for _ in range(batches):
        writers.write("summaries", batch)
    writers.close()

    meta = pq.ParquetFile(tmp_path / "summaries.parquet").metadata
    sizes = [meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)]
    assert meta.num_rows == batches * len(batch)
    assert meta.num_row_groups >= 3  # not one group of everything
    assert max(sizes) <= ingest_writers.ROW_GROUP_BYTES + 2 * batch.nbytes
    # A reader decoding one group at a time holds a few MB, not tens.
    assert ingest_writers.ROW_GROUP_BYTES <= 16 * 2**20


def test_summaries_kept_by_another_fold_are_recomputed(tmp_path: Path, monkeypatch) -> None:
    runs = tmp_path / "runs"
    write_corpus(runs)
    want = reference(runs, sorted(runs.glob("*/events.jsonl")))
    out = tables.ingest(runs).out
    monkeypatch.setattr(tables, "SUMMARY_VERSION", tables.SUMMARY_VERSION + 1)
    assert not stored_summaries_current(out)
    # Were the stale table read, this would fail: make it say something else entirely.
    stale = out / "summaries.parquet"
    stale.write_bytes(b"not parquet at all")
    _assert_equal(summaries_from_dataset(out), want)


def test_corpus_checks_that_matter(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_corpus(runs)
    got = summaries_from_dataset(ingest(runs).out)
    assert got == summaries_from_dataset(tables.ingest(runs, runs / "kept").out)
    every = got["every_event/events.jsonl"]
    assert every.finished and every.outcome == "budget_exhausted" and every.budget == {
        "which": "steps", "limit": 8, "spent": 8}
    assert every.staged and every.injected == 1 and every.refusals == 1
    assert every.rejected_tools == ("mcp.x",) and every.gate_tools == ("mcp.b",)
    assert every.grounding_records == 2 and every.repairs == 2 and every.protocol == "native"
    assert got["no_finish/events.jsonl"].finished is False
    odd = got["nonconforming/events.jsonl"]
    assert odd.nonconforming == 8 and len(odd.problems) == 3
    assert odd.problems[0] == "line 1: unknown event 'mystery'"
    assert got["empty/events.jsonl"].records == 0
    assert got["blank_only/events.jsonl"].skipped == 6
    big = got["nan_ish/events.jsonl"]
    assert big.steps == 2**60 + 1 and big.repairs == 2**62 + 3
    assert got["repeats/events.jsonl"].run_id == "second"  # the last start, as the last finish
    assert got["repeats/events.jsonl"].outcome == "answered"


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=6,
)
_FIELD_VALUES = {
    "tool": st.sampled_from(["mcp.a", "mcp.b", "fs"]) | _JSON,
    "ok": st.booleans() | _JSON, "repairing": st.booleans() | _JSON,
    "outcome": st.sampled_from(["answered", "incomplete"]) | _JSON,
    "usage": st.fixed_dictionaries({}, optional={
        k: st.integers(0, 10**6) | _JSON
        for k in ("prompt_tokens", "completion_tokens", "total_tokens", "calls", "cost")}) | _JSON,
    "budget": st.fixed_dictionaries({"which": st.sampled_from(["steps", "seconds"]) | _JSON})
    | _JSON,
    "schema_version": st.sampled_from([1, 1, 1, 2, True, "1"]),
}


@st.composite
def _record(draw: st.DrawFn) -> dict:
    event = draw(st.sampled_from([*FIELDS, "unknown_event"]))
    fields = list(FIELDS.get(event, ())) + list(OPTIONAL.get(event, ())) + ["branch"]
    chosen = draw(st.lists(st.sampled_from(fields), unique=True)) if fields else []
    if draw(st.integers(0, 4)):  # mostly conforming
        chosen = list(dict.fromkeys(list(FIELDS.get(event, ())) + chosen))
    record = {"event": event}
    for name in chosen:
        record[name] = draw(_FIELD_VALUES.get(name, _JSON))
    return record


@st.composite
def _stream(draw: st.DrawFn) -> list[str]:
    lines = []
    for seq, kind in enumerate(draw(st.lists(st.integers(0, 9), max_size=12)), start=1):
        if kind == 0:
            lines.append(draw(st.sampled_from([
                "", "   ", '{"event":"to', "[1]", "NaN", "{,}",
                # JSON orjson refuses: a lone surrogate escape, a number past a double
                '{"event":"answer","text":"cut \\ud83d","outcome":"answered"}',
                '{"event":"mission_finished","outcome":"answered","steps":1e400,"max_steps":2}',
                '{"seq":9,"record":{"event":"tool_call","index":1,"tool":"mcp.\\udc00",'
                '"arguments":{}}}'])))
        elif kind <= 4:
            lines.append(envelope(seq, draw(_record())))
        else:
            lines.append(bare(draw(_record())))
    return lines


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@pytest.mark.slow
@given(streams=st.lists(_stream(), min_size=1, max_size=6))
def test_random_streams_equal_summarize(tmp_path_factory: pytest.TempPathFactory,
                                        streams: list[list[str]]) -> None:
    runs = tmp_path_factory.mktemp("runs")
    for i, lines in enumerate(streams):
        write_run(runs / f"r{i}", lines)
    files = sorted(runs.glob("*/events.jsonl"))
    want = reference(runs, files)
    _assert_equal(summaries_from_dataset(ingest(runs).out), want)
    _assert_equal(summaries_from_dataset(tables.ingest(runs, runs / "kept").out), want)


@pytest.mark.slow
def test_query_over_a_dataset_and_a_runs_folder(tmp_path: Path, capsys) -> None:
    runs = tmp_path / "runs"
    write_corpus(runs)
    columns, rows = query(runs, "SELECT count(*) AS n FROM runs")
    assert columns == ["n"] and rows[0][0] == len(list(runs.iterdir()))
    assert "ingested" in capsys.readouterr().err
    result = ingest(runs)
    columns, rows = query(runs, "SELECT event, count(*) FROM events GROUP BY 1 ORDER BY 1")
    assert capsys.readouterr().err == ""
    assert ("answer",) == rows[0][:1] or any(r[0] == "answer" for r in rows)
    assert query(result.out, "SELECT count(*) FROM tool_calls")[1][0][0] == 0


def test_bad_sql_is_one_sentence(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_run(runs / "a", [bare({"event": "step_started", "index": 1})])
    ingest(runs)
    with pytest.raises(EvalkitError) as caught:
        query(runs, "SELEC nonsense")
    assert "\n" not in caught.value.message and caught.value.message.startswith("query failed")
    with pytest.raises(EvalkitError):
        query(runs, "SELECT no_such_column FROM events")


def test_newer_dataset_version_is_refused(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_run(runs / "a", [bare({"event": "step_started", "index": 1})])
    out = ingest(runs).out
    manifest = json.loads((out / "dataset.json").read_text())
    (out / "dataset.json").write_text(json.dumps({**manifest, "schema": 99}))  # was "version"
    with pytest.raises(EvalkitError, match="schema 99"):
        summaries_from_dataset(out)


def test_a_damaged_kept_table_falls_back_to_the_events(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_corpus(runs)
    want = reference(runs, sorted(runs.glob("*/events.jsonl")))
    out = tables.ingest(runs).out
    assert stored_summaries_current(out)
    (out / "summaries.parquet").write_bytes(b"not parquet, though the stamp is current")
    _assert_equal(summaries_from_dataset(out), want)


def test_a_damaged_events_table_is_one_sentence(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_corpus(runs)
    out = ingest(runs).out  # no kept summaries: scoring must read the events
    (out / "events.parquet").write_bytes(b"garbage")
    with pytest.raises(EvalkitError) as caught:
        summaries_from_dataset(out)
    message = caught.value.message
    assert "\n" not in message and "re-create it with `evalkit ingest`" in message


def test_sql_over_a_damaged_dataset_is_one_sentence(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_run(runs / "a", [bare({"event": "step_started", "index": 1})])
    out = tables.ingest(runs).out
    (out / "runs.parquet").write_bytes(b"garbage")
    with pytest.raises(EvalkitError) as caught:
        query(out, "SELECT count(*) FROM runs")
    assert "\n" not in caught.value.message and "runs.parquet" in caught.value.message
