"""Tables schema 2, read back as users read it: pyarrow, DuckDB, pandas and polars see the
declared types; times, durations and copies are what the recordings say; a dataset of
another schema, or an unknown named query, is one sentence."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import evalkit
from evalkit.cli import main
from evalkit.eval.named_queries import QUERIES, named
from evalkit.eval.tables import json_columns, open_dataset
from evalkit.store import columns
from evalkit.tables_doc import arrow_types, render
from tests.report._folders import make_suite, measure_folder

ROOT = Path(__file__).resolve().parent.parent
GOOD = ROOT / "recordings" / "stub" / "good"


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """recordings/stub/good ingested as `evalkit ingest` does it (runs, summaries, verdicts)."""
    return evalkit.ingest(GOOD, tmp_path_factory.mktemp("good") / "ds").out


def test_tables_md_is_the_rendering_of_the_declarations() -> None:
    text = (ROOT / "docs" / "TABLES.md").read_text(encoding="utf-8")
    assert text == render(), "docs/TABLES.md is stale: run `python -m evalkit.tables_doc " \
                             "docs/TABLES.md`"
    assert "docs/TABLES.md" in (ROOT / "EVAL.md").read_text(encoding="utf-8")


def _polars(type: pa.DataType) -> pl.DataType:
    """The polars type a column of Arrow type ``type`` reads as."""
    if pa.types.is_timestamp(type):
        return pl.Datetime("us", type.tz)
    if pa.types.is_list(type):
        return pl.List(_polars(type.value_type))
    if pa.types.is_struct(type):
        return pl.Struct({f.name: _polars(f.type) for f in type})
    return {pa.string(): pl.String, pa.int64(): pl.Int64, pa.int32(): pl.Int32,
            pa.float64(): pl.Float64, pa.bool_(): pl.Boolean}[type]


@pytest.mark.slow
def test_every_table_reads_with_its_declared_types_in_four_readers(good: Path) -> None:
    con = open_dataset(good)
    try:
        for table, schema in arrow_types().items():
            file = good / f"{table}.parquet"
            read = pq.read_table(file)
            assert read.num_rows > 0 or table == "tool_catalogue", table
            assert read.schema.equals(schema), table  # pyarrow: names and types, in order
            described = con.execute(f"DESCRIBE {table}").fetchall()
            json_named = set(json_columns(table))
            assert [(name, type) for name, type, *_ in described] == [
                (f.name, columns.duckdb_type(f.type, f.name in json_named)) for f in schema
            ], table
            frame = pd.read_parquet(file, dtype_backend="pyarrow")
            assert list(frame.columns) == schema.names, table
            for field in schema:
                assert frame[field.name].dtype == pd.ArrowDtype(field.type), (table, field.name)
            polars = pl.read_parquet(file)
            assert dict(polars.schema) == {f.name: _polars(f.type) for f in schema}, table
    finally:
        con.close()


def test_times_and_counts_are_typed_values(good: Path) -> None:
    con = open_dataset(good)
    try:
        # Every record of both copies has a time: the store's from its envelopes, the
        # capture's from the same record in the store's copy beside it.
        untimed = con.execute("SELECT source, count(*) FILTER (WHERE ts IS NULL), count(*) "
                          "FROM events GROUP BY source ORDER BY source").fetchall()
        assert [(s, missing) for s, missing, _ in untimed] == [("capture", 0), ("store", 0)]
        same = con.execute("SELECT count(*) FROM events c JOIN events s ON c.source = 'capture' "
                       "AND s.source = 'store' AND c.record::VARCHAR = s.record::VARCHAR AND c.ts = s.ts "
                       "AND s.run LIKE c.run || '/runs/%'").fetchone()[0]
        assert same == untimed[0][2]
        first = con.execute("SELECT ts FROM events WHERE run = 'chaining' AND line = 1").fetchone()[0]
        chaining = next((GOOD / "chaining" / "runs").iterdir()) / "events.jsonl"
        at = json.loads(chaining.read_text().splitlines()[0])["at"]
        assert first == datetime.fromisoformat(at).astimezone(UTC)
        # Runs: start and end from the records, wall time as the runtime measured it,
        # process time as the harness did (the capture only: command.json is beside it).
        runs = con.execute("SELECT run, source, ts, end_ts, wall_s, process_s FROM runs "
                       "WHERE split_part(run, '/', 1) = 'chaining' ORDER BY source").fetchall()
        (_, _, start, end, wall, process), (_, _, s_start, s_end, s_wall, s_process) = runs
        command = json.loads((GOOD / "chaining" / "command.json").read_text())
        assert (process, s_process) == (command["wall_s"], None)
        assert start <= end and (start, end, wall) == (s_start, s_end, s_wall)
        assert wall == json.loads((chaining.parent / "meta.json").read_text())["meta"]["elapsed_s"]
        # Tool calls: start from their tool_call record, end when recorded, the duration.
        timed = con.execute("SELECT count(*), count(duration_ms), "
                        "bool_and(duration_ms = epoch_ms(ts) - epoch_ms(start_ts)) "
                        "FROM tool_calls").fetchone()
        assert timed[0] > 0 and timed[1] == timed[0] and timed[2]
        # The catalogue is its own table, with typed scopes and hints.
        assert con.execute("SELECT count(*) FROM tool_calls WHERE tool IS NULL").fetchone()[0] == 0
        hint = con.execute("SELECT annotations.readOnlyHint, scopes FROM tool_catalogue "
                       "WHERE run LIKE 'chaining/%' AND name = 'mcp.add'").fetchone()
        assert hint == (True, ["mcp.call"])
        kinds = con.execute("SELECT typeof(steps), typeof(record), typeof(ts) FROM events "
                        "LIMIT 1").fetchone()
        assert kinds == ("BIGINT", "JSON", "TIMESTAMP WITH TIME ZONE")
    finally:
        con.close()


@pytest.mark.slow
def test_the_views_show_each_run_and_each_verdict_once(good: Path, tmp_path: Path) -> None:
    con = open_dataset(good)
    try:
        count = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
        assert count("SELECT count(*) FROM runs") == 24
        assert count("SELECT count(*) FROM runs_latest") == 12
        assert count("SELECT count(*) FROM runs_latest WHERE source = 'capture'") == 12
        assert count("SELECT count(*) FROM events_latest") == count(
            "SELECT count(*) FROM events WHERE source = 'capture'")
        assert count("SELECT count(*) FROM verdicts_latest") == 12
    finally:
        con.close()
    # The same recordings scored twice (a re-score beside them): still one verdict each.
    folder = shutil.copytree(GOOD, tmp_path / "good")
    (folder / "again").mkdir()
    shutil.copy(folder / "report.json", folder / "again" / "report.json")
    rows = evalkit.query(folder, "SELECT (SELECT count(*) FROM verdicts), "
                                 "(SELECT count(*) FROM verdicts_latest), "
                                 "(SELECT count(DISTINCT key) FROM verdicts_latest)")[1]
    assert rows == [(24, 12, 12)]


def _cli(*args: str) -> tuple[int, str, str]:
    done = CliRunner().invoke(main, list(args))
    return done.exit_code, done.stdout, done.stderr


@pytest.mark.slow
def test_named_queries_show_their_sql_and_answer(good: Path, tmp_path: Path) -> None:
    for query in QUERIES:
        code, out, _ = _cli("sql", "--query", query.name, "--show")
        assert (code, out) == (0, query.sql)
    code, out, _ = _cli("sql", str(good), "--query", "pass-rates", "--format", "json")
    rates = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and sum(r["missions"] for r in rates) == 12
    assert all(r["pass_rate"] == 1 and r["suite"] == "stub" for r in rates)
    code, out, _ = _cli("sql", str(good), "--query", "slowest-tools", "--format", "json")
    tools = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and tools and all(t["median_ms"] is not None for t in tools)
    medians = [t["median_ms"] for t in tools]
    assert medians == sorted(medians, reverse=True)
    code, out, _ = _cli("sql", str(good), "--query", "token-cost", "--format", "json")
    assert code == 0 and len(out.splitlines()) == 12
    code, out, _ = _cli("sql", str(good), "SELECT ts FROM runs_latest WHERE run = 'chaining'",
                        "--format", "json")
    started = datetime.fromisoformat(json.loads(out)["ts"])  # a time as ISO 8601, zoned
    assert code == 0 and started.tzinfo is not None and started.year == 2026
    suite = make_suite(tmp_path / "s.yaml")
    measure_folder(tmp_path / "m", suite, {
        "direct": lambda key, rep: "pass",
        "swarm": lambda key, rep: "fail" if (key, rep) == ("t1", 2) else "pass"}, repeat=2)
    flaky = evalkit.query(tmp_path / "m", named("flaky").sql)
    assert [row[1:] for row in flaky[1]] == [("swarm", "t1", 2, 1, [2])]


def test_bad_asks_are_one_sentence(good: Path) -> None:
    for args, words in (
            (("sql", str(good), "--query", "nope"), "there is no named query 'nope'; the named "
             "queries are pass-rates, slowest-tools, token-cost, flaky"),
            (("sql", "--show"), "--show prints the SQL of a named query"),
            (("sql", str(good), "SELECT 1", "--query", "flaky"), "give either a QUERY or --query NAME"),
            (("sql", str(good)), "give a FOLDER")):
        code, out, err = _cli(*args)
        assert (code, out) == (2, "") and err.startswith(f"Error: {words}"), err
        assert len(err.splitlines()) == 1 and "Traceback" not in err


@pytest.mark.slow
def test_a_schema_1_dataset_is_refused_until_ingest_rewrites_it(tmp_path: Path) -> None:
    folder = shutil.copytree(GOOD, tmp_path / "good")
    dataset = evalkit.ingest(folder).out
    manifest = json.loads((dataset / "dataset.json").read_text())
    del manifest["schema"]
    (dataset / "dataset.json").write_text(json.dumps({**manifest, "version": 1}))
    said = "holds tables of schema 1, written by an older evalkit; re-run `evalkit ingest`"
    suite = ROOT / "suites" / "stub"
    for args in (("sql", str(dataset), "SELECT count(*) FROM runs"),
                 ("score", "--suite", str(suite), "--dataset", str(dataset))):
        code, out, err = _cli(*args)
        assert code == 2 and said in err and len(err.splitlines()) == 1, err
    with pytest.raises(evalkit.EvalkitError, match="schema 1"):
        evalkit.runs_df(dataset)
    code, out, err = _cli("ingest", str(folder))
    assert code == 0, err
    assert json.loads((dataset / "dataset.json").read_text())["schema"] == columns.SCHEMA
    assert len(evalkit.runs_df(dataset)) == 24
    (dataset / "dataset.json").write_text("{not json")
    code, _, err = _cli("sql", str(dataset), "SELECT 1")
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err


def _captured(folder: Path, runs: str = "runs") -> Path:
    """A mission folder as `evalkit run` leaves one: the captured stream (bare records, one
    the store never got: the last word of a run whose store refused it), command.json,
    and the run store's copy in envelopes."""
    from tests._runs import bare, envelope, finished, started, write_run

    records = [started(run_id="run_x-1"), {"event": "step_started", "index": 1}, finished()]
    times = ["2026-01-02T03:04:05.006Z", "2026-01-02T03:04:05.500+01:00",
             "2026-01-02T03:04:07Z"]
    write_run(folder, [bare(r) for r in records] + [bare({"event": "answer", "text": "late"})])
    (folder / "command.json").write_text(json.dumps({"runs": runs, "wall_s": 2.5}))
    write_run(folder / "runs" / "run_x-1",
              [envelope(i, r, at) for i, (r, at) in enumerate(zip(records, times, strict=True), 1)],
              meta={"run_id": "run_x-1", "meta": {}})
    return folder


def test_a_capture_is_dated_record_for_record_from_the_store_s_copy(tmp_path: Path) -> None:
    _captured(tmp_path / "runs" / "m1")
    _captured(tmp_path / "runs" / "m2", runs="../m1/runs")  # never read outside its folder
    con = open_dataset(evalkit.ingest(tmp_path / "runs").out)
    try:
        got = con.execute("SELECT run, line, ts FROM events WHERE source = 'capture' "
                          "ORDER BY run, line").fetchall()
        utc = [datetime(2026, 1, 2, 3, 4, 5, 6000, UTC), datetime(2026, 1, 2, 2, 4, 5, 500000, UTC),
               datetime(2026, 1, 2, 3, 4, 7, tzinfo=UTC), None]
        assert [ts for run, _, ts in got if run == "m1"] == utc
        assert [ts for run, _, ts in got if run == "m2"] == [None] * 4
        runs = con.execute("SELECT run, source, ts, end_ts, process_s FROM runs "
                           "ORDER BY run").fetchall()
        assert runs[0] == ("m1", "capture", utc[0], utc[2], 2.5)
        assert runs[2] == ("m2", "capture", None, None, 2.5)
        assert runs[1][1:4] == ("store", utc[0], utc[2]) and runs[1][4] is None
    finally:
        con.close()


def test_a_run_table_not_of_its_declared_columns_is_one_sentence(good: Path,
                                                                 tmp_path: Path) -> None:
    dataset = shutil.copytree(good, tmp_path / "ds")
    table = pq.read_table(dataset / "runs.parquet").drop_columns(["source"])
    pq.write_table(table, dataset / "runs.parquet")
    code, out, err = _cli("sql", str(dataset), "SELECT count(*) FROM runs_latest")
    assert (code, out) == (2, "") and len(err.splitlines()) == 1, err
    assert "cannot read the dataset" in err and "re-create it with `evalkit ingest`" in err


def test_a_tool_call_is_timed_from_its_record_whatever_the_order_of_its_arguments(
        tmp_path: Path) -> None:
    """tools.jsonl is canonical JSON (keys sorted); the stream keeps the agent's order."""
    from tests._runs import envelope, write_run

    asked = {"offset": 4000, "handle": "r2", "length": 4000}
    write_run(tmp_path / "runs" / "r", [
        envelope(1, {"event": "tool_call", "index": 0, "tool": "mission_result",
                     "arguments": asked}, "2026-01-02T03:04:05.000Z"),
        envelope(2, {"event": "tool_call", "index": 1, "tool": "mission_result",
                     "arguments": {**asked, "offset": 8000}}, "2026-01-02T03:04:06.000Z")],
        meta={"run_id": "run_r", "meta": {}},
        tools=[{"call": 1, "at": "2026-01-02T03:04:05.250Z", "tool": "mission_result",
                "arguments": asked, "result": {"exit_code": 0}},
               {"call": 2, "at": "2026-01-02T03:04:06.040Z", "tool": "mission_result",
                "arguments": {**asked, "offset": 8000}, "result": {"exit_code": 0}}])
    out = evalkit.ingest(tmp_path / "runs").out
    calls = pq.read_table(out / "tool_calls.parquet", columns=["call", "duration_ms"])
    assert calls.to_pylist() == [{"call": 1, "duration_ms": 250.0},
                                 {"call": 2, "duration_ms": 40.0}]
