"""`evalkit ingest` and `evalkit sql` as a user runs them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from evalkit.cli import main
from tests._stream_builders import good_run, mission, padded, write_stream, write_suite


def test_ingest_then_sql_then_score_from_the_dataset(tmp_path):
    runs = tmp_path / "runs"
    for key in ("a", "b"):
        write_stream(runs / key / "events.jsonl", good_run())
    runner = CliRunner()
    done = runner.invoke(main, ["ingest", str(runs)])
    assert done.exit_code == 0, done.output
    assert "ingested 2 runs, 14 records" in done.stdout
    assert (runs / "dataset.parquet" / "events.parquet").is_file()
    query = runner.invoke(main, ["sql", str(runs), "SELECT event, count(*) AS n FROM events "
                                 "GROUP BY event ORDER BY event", "--format", "json"])
    assert query.exit_code == 0, query.output
    rows = [json.loads(line) for line in query.stdout.splitlines()]
    assert {"event": "tool_call", "n": 2} in rows
    suite = write_suite(tmp_path / "s.yaml", padded([mission("a", expects_tools=["mcp.add"]),
                                                    mission("b", expects_tools=["mcp.echo"])]),
                        flags=["chaining"])
    scored = runner.invoke(main, ["score", "--suite", str(suite), "--dataset",
                                  str(runs / "dataset.parquet"), "--json"])
    verdicts = {v["key"]: v["passed"] for v in json.loads(scored.stdout)["verdicts"]}
    assert {"a": True, "b": False}.items() <= verdicts.items() and scored.exit_code == 1
    assert not any(passed for key, passed in verdicts.items() if key.startswith("unrun-"))


def test_bad_sql_and_a_missing_folder_are_one_sentence(tmp_path):
    write_stream(tmp_path / "runs" / "a" / "events.jsonl", good_run())
    runner = CliRunner()
    bad = runner.invoke(main, ["sql", str(tmp_path / "runs"), "SELEC nonsense"])
    assert bad.exit_code == 2 and bad.stderr.splitlines()[-1].startswith("Error: query failed")
    assert "Traceback" not in bad.output
    missing = runner.invoke(main, ["ingest", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and missing.stderr == f"Error: {tmp_path / 'nope'} does not exist\n"
    (tmp_path / "file").write_text("x")
    a_file = runner.invoke(main, ["ingest", str(tmp_path / "file")])
    assert a_file.exit_code == 2 and "is not a folder of run directories" in a_file.stderr


def test_score_from_a_dataset_equals_score_from_the_runs(tmp_path):
    runs = tmp_path / "runs"
    for key in ("a", "b", "c"):
        write_stream(runs / key / "events.jsonl", good_run())
    runner = CliRunner()
    assert runner.invoke(main, ["ingest", str(runs)]).exit_code == 0
    suite = write_suite(tmp_path / "s.yaml", padded([mission("a", expects_tools=["mcp.add"]),
                                                    mission("b", expects_tools=["mcp.echo"]),
                                                    mission("c", expects_tools=["mcp.echo"]),
                                                    mission("d")]), flags=["chaining"])
    common = ["score", "--suite", str(suite), "--json", "--allow-failures"]
    from_runs = runner.invoke(main, [*common, "--runs", str(runs)])
    from_dataset = runner.invoke(main, [*common, "--dataset", str(runs / "dataset.parquet")])
    assert from_runs.exit_code == from_dataset.exit_code == 0, from_dataset.output
    got = [(v["key"], v["passed"], v["missing"]) for v in json.loads(from_dataset.stdout)["verdicts"]]
    assert got[:4] == [("a", True, False), ("b", False, False), ("c", False, False),
                       ("d", False, True)]
    strip = lambda report: [{k: v for k, v in verdict.items() if k != "source"}  # noqa: E731
                            for verdict in json.loads(report)["verdicts"]]
    assert strip(from_runs.stdout) == strip(from_dataset.stdout)


def test_an_events_file_in_the_runs_folder_is_a_run_in_the_dataset_too(tmp_path):
    """``score --runs DIR`` reads ``DIR/<key>`` as the events file when it is a file; the
    dataset holds it too, so both give the same verdicts. Files beside the runs that
    are no stream (a README, a suite) are not made runs."""
    runs = tmp_path / "runs"
    write_stream(runs / "folder" / "events.jsonl", good_run())
    write_stream(runs / "enveloped", good_run())
    write_stream(runs / "bare", good_run(tool="mcp.echo"), envelopes=False)
    (runs / "empty").write_bytes(b"")
    (runs / "README.md").write_text("# what these runs are\n")
    (runs / "suite.json").write_text(json.dumps({"name": "x", "missions": []}))
    (runs / ".hidden").write_text(json.dumps({"event": "answer", "text": "no"}) + "\n")
    runner = CliRunner()
    done = runner.invoke(main, ["ingest", str(runs)])
    assert done.exit_code == 0, done.output
    listed = runner.invoke(main, ["sql", str(runs), "SELECT run, events_path, records FROM runs "
                                  "ORDER BY run", "--format", "json"])
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert rows == [{"run": "bare", "events_path": "bare", "records": 7},
                    {"run": "empty", "events_path": "empty", "records": 0},
                    {"run": "enveloped", "events_path": "enveloped", "records": 7},
                    {"run": "folder", "events_path": "folder/events.jsonl", "records": 7}]
    suite = write_suite(tmp_path / "s.yaml", padded([
        mission(key, expects_tools=["mcp.add"])
        for key in ("folder", "enveloped", "bare", "empty", "README.md", "ghost")]),
        flags=["chaining"])
    common = ["score", "--suite", str(suite), "--json", "--allow-failures"]
    from_runs = runner.invoke(main, [*common, "--runs", str(runs)])
    from_dataset = runner.invoke(main, [*common, "--dataset", str(runs / "dataset.parquet")])
    got = {v["key"]: (v["passed"], v["missing"], v["reasons"][:1])
           for v in json.loads(from_dataset.stdout)["verdicts"]}
    assert got["folder"] == got["enveloped"] == (True, False, [])
    assert got["bare"] == (False, False, ["never called mcp.add; it called ['mcp.echo']"])
    assert got["empty"] == (False, False, ["the stream is empty: the run failed"])
    assert got["ghost"] == (False, True, ["not run"])
    # The README is no run in the tables, but --runs reads it as a stream when a key
    # names it: one with no record, its one line skipped. The manifest says so.
    assert got["README.md"] == (False, False, ["the stream is empty: the run failed"])
    readme = next(v for v in json.loads(from_dataset.stdout)["verdicts"]
                  if v["key"] == "README.md")
    assert (readme["kpis"]["records"], readme["kpis"]["skipped_lines"]) == (0, 1)
    strip = lambda report: [{k: v for k, v in verdict.items() if k != "source"}  # noqa: E731
                            for verdict in json.loads(report)["verdicts"]]
    assert strip(from_runs.stdout) == strip(from_dataset.stdout)


def _same_verdicts(runner: CliRunner, suite: Path, runs: Path) -> list[dict]:
    """Ingest ``runs``, score it both ways, assert the verdicts equal; the verdicts."""
    done = runner.invoke(main, ["ingest", str(runs), "--out", str(runs.parent / "ds")])
    assert done.exit_code == 0, done.output
    common = ["score", "--suite", str(suite), "--json", "--allow-failures"]
    from_runs = runner.invoke(main, [*common, "--runs", str(runs)])
    from_dataset = runner.invoke(main, [*common, "--dataset", str(runs.parent / "ds")])
    assert from_runs.exit_code == from_dataset.exit_code == 0, from_dataset.output
    strip = lambda report: [{k: v for k, v in verdict.items() if k != "source"}  # noqa: E731
                            for verdict in json.loads(report)["verdicts"]]
    assert strip(from_runs.stdout) == strip(from_dataset.stdout)
    return json.loads(from_dataset.stdout)["verdicts"]


def test_a_bare_stream_is_a_run_past_lines_the_reader_skips(tmp_path):
    """A bare events file is a stream however it begins, as long as the reader finds a
    record in it: a torn first line (what a crash mid-write at the start leaves), a
    line that is JSON but no object, or an object that is no record, first. The
    dataset holds it, so --dataset gives the verdict --runs gives."""
    runs = tmp_path / "runs"
    write_stream(runs / "torn", good_run(), tail="")
    text = (runs / "torn").read_text()
    (runs / "torn").write_text('{"seq": 1, "at": "2026-11-30T0\n' + text)
    write_stream(runs / "listed", good_run(), envelopes=False)
    (runs / "listed").write_text("[1]\n\n" + (runs / "listed").read_text())
    write_stream(runs / "odd", good_run(), envelopes=False)
    (runs / "odd").write_text('{"seq": 1}\n' + (runs / "odd").read_text())
    suite = write_suite(tmp_path / "s.yaml", padded(
        [mission(key, expects_tools=["mcp.add"]) for key in ("torn", "listed", "odd")]),
        flags=["chaining"])
    got = {v["key"]: (v["passed"], v["missing"], v["reasons"][:1], v["kpis"]["skipped_lines"])
           for v in _same_verdicts(CliRunner(), suite, runs)}
    assert got["torn"] == (True, False, [], 1)
    assert got["listed"] == (True, False, [], 2)
    assert got["odd"][:2] == (False, False) and "does not conform" in got["odd"][2][0]


def test_a_file_with_no_record_is_an_empty_stream_in_the_dataset_too(tmp_path):
    """A crashed agent's stream of nothing but torn lines, written where the mission's
    stream belongs: --runs reads it as an empty stream (the run failed, not missing),
    and so does --dataset, from the manifest; a file that grew past what is read
    whole at ingest is left to --runs."""
    runs = tmp_path / "runs"
    write_stream(runs / "fine" / "events.jsonl", good_run())
    (runs / "garbled").write_bytes(b'{"seq": 1, "at": "2026\n\xff\xfe\n[3]\n')
    suite = write_suite(tmp_path / "s.yaml", padded([mission("fine"), mission("garbled")]),
                        flags=["chaining"])
    got = {v["key"]: v for v in _same_verdicts(CliRunner(), suite, runs)}
    assert (got["garbled"]["passed"], got["garbled"]["missing"]) == (False, False)
    assert got["garbled"]["reasons"] == ["the stream is empty: the run failed"]
    assert got["garbled"]["kpis"]["skipped_lines"] == 3
    manifest = json.loads((tmp_path / "ds" / "dataset.json").read_text())
    assert manifest["without_records"] == {"garbled": 3}


def test_runs_reached_through_symbolic_links_are_in_the_dataset_too(tmp_path):
    """``score --runs`` follows links where it looks for a stream (the mission folder and
    two levels below it); ingest follows the same links, so both paths give the same
    verdicts. A link to nothing is "not run" on both; a link to a folder with no
    stream is "no stream"; a link that loops back up does not make ingest walk for
    ever."""
    store = tmp_path / "store"
    write_stream(store / "run_1" / "events.jsonl", good_run())
    write_stream(store / "run_2" / "events.jsonl", good_run(tool="mcp.echo"))
    write_stream(store / "bare.jsonl", good_run(), envelopes=False)
    (store / "empty").mkdir()
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "linked").symlink_to(store / "run_1")
    (runs / "linked_file").symlink_to(store / "bare.jsonl")
    (runs / "below").mkdir()
    (runs / "below" / "run_9").symlink_to(store / "run_2")
    (runs / "dangling").symlink_to(tmp_path / "nowhere")
    (runs / "hollow").symlink_to(store / "empty")
    write_stream(runs / "looped" / "events.jsonl", good_run())
    (runs / "looped" / "up").symlink_to(runs)
    suite = write_suite(tmp_path / "s.yaml", padded([
        mission(key, expects_tools=["mcp.add"])
        for key in ("linked", "linked_file", "below", "dangling", "hollow", "looped")]),
        flags=["chaining"])
    got = {v["key"]: (v["passed"], v["missing"], v["reasons"][:1])
           for v in _same_verdicts(CliRunner(), suite, runs)}
    assert got["linked"] == got["linked_file"] == got["looped"] == (True, False, [])
    assert got["below"] == (False, False, ["never called mcp.add; it called ['mcp.echo']"])
    assert got["dangling"] == (False, True, ["not run"])
    assert got["hollow"][:2] == (False, True) and got["hollow"][2][0].startswith("no stream")


def _dataset(tmp_path: Path) -> Path:
    """Two runs ingested the way a user does it; the dataset folder."""
    runs = tmp_path / "runs"
    for key in ("a", "b"):
        write_stream(runs / key / "events.jsonl", good_run())
    assert CliRunner().invoke(main, ["ingest", str(runs)]).exit_code == 0
    return runs / "dataset.parquet"


def _files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes, to show nothing changed or appeared."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _refused(result: Result) -> str:
    """The one sentence of a refusal: exit 2, nothing on stdout, no traceback."""
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize(("statement", "kind"), [
    ("COPY (SELECT 1 AS x) TO '{ds}/runs.parquet' (FORMAT parquet)", "a COPY statement"),
    ("COPY runs TO '{out}/x.csv'", "a COPY statement"),
    ("EXPORT DATABASE '{out}/exp'", "an EXPORT statement"),
    ("ATTACH '{out}/a.db' AS a", "an ATTACH statement"),
    ("CREATE TABLE t AS SELECT 1", "a CREATE statement"),
    ("INSERT INTO runs SELECT * FROM runs", "an INSERT statement"),
    ("SET threads = 1", "a SET statement"),
    ("PRAGMA version", "a PRAGMA statement"),
    ("CALL pragma_version()", "a CALL statement"),
    # EXPLAIN ANALYZE runs what it explains: this one would write the file.
    ("EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{out}/y.csv'", "an EXPLAIN of a COPY statement"),
    # DuckDB's MULTI: a PIVOT without IN (...), here inside a COPY.
    ("COPY (PIVOT runs ON run) TO '{out}/p.csv'", "a statement DuckDB runs as several"),
])
def test_sql_refuses_anything_that_is_not_a_question_and_writes_nothing(tmp_path, statement, kind):
    ds = _dataset(tmp_path)
    before = _files(tmp_path)
    query = statement.format(ds=ds, out=tmp_path)
    done = CliRunner().invoke(main, ["sql", str(ds), query])
    assert _files(tmp_path) == before  # the dataset byte-identical, and no file written
    said = _refused(done)
    assert said.startswith(f"Error: {kind}") and "exactly one SELECT" in said


def test_sql_wants_exactly_one_statement(tmp_path):
    ds = _dataset(tmp_path)
    runner = CliRunner()
    for nothing in ("", "  -- comment", ";"):
        said = _refused(runner.invoke(main, ["sql", str(ds), nothing]))
        assert said.startswith("Error: no SQL statement given")
    said = _refused(runner.invoke(main, ["sql", str(ds), "SELECT 1 AS x; SELECT 2 AS x"]))
    assert said.startswith("Error: 2 SQL statements given")


@pytest.mark.slow
def test_sql_answers_questions_but_reads_no_file_beyond_the_dataset(tmp_path):
    ds = _dataset(tmp_path)
    (tmp_path / "secret.csv").write_text("a\n1\n", encoding="utf-8")
    runner = CliRunner()

    def rows(query: str) -> list[dict]:
        done = runner.invoke(main, ["sql", str(ds), query, "--format", "json"])
        assert done.exit_code == 0, done.output
        return [json.loads(line) for line in done.stdout.splitlines()]

    assert rows("FROM runs SELECT count(*) AS n") == [{"n": 2}]
    assert rows("WITH e AS (SELECT * FROM events) SELECT count(*) AS n FROM e") == [{"n": 14}]
    assert rows("SELECT count(*) AS n FROM summaries") == [{"n": 2}]
    assert rows(f"SELECT count(*) AS n FROM read_parquet('{ds}/events.parquet')") == [{"n": 14}]
    assert {"name": "tool_calls"} in rows("SHOW TABLES")
    assert {r["column_name"] for r in rows("DESCRIBE runs")} >= {"run", "events_path"}
    assert len(rows("SUMMARIZE runs")) > 0
    assert rows("PIVOT (SELECT run FROM runs) ON run IN ('a', 'b') USING count(*)") == [
        {"a": 1, "b": 1}]
    assert rows("EXPLAIN SELECT count(*) FROM events")[0]["explain_key"] == "physical_plan"
    said = _refused(runner.invoke(main, ["sql", str(ds), f"SELECT * FROM read_csv("
                                         f"'{tmp_path / 'secret.csv'}')"]))
    assert said.startswith("Error: query failed: Permission Error")


@pytest.mark.slow
def test_sql_on_a_folder_with_no_dataset_and_no_runs_is_refused(tmp_path):
    runner = CliRunner()
    empty = tmp_path / "notes"
    (empty / "sub").mkdir(parents=True)
    (empty / "sub" / "readme.txt").write_text("no runs here", encoding="utf-8")
    said = _refused(runner.invoke(main, ["sql", str(empty), "SELECT count(*) FROM runs"]))
    assert said.startswith(f"Error: no dataset and no runs at {empty}")
    said = _refused(runner.invoke(main, ["sql", str(tmp_path / "nope"), "SELECT 1"]))
    assert said.startswith(f"Error: no dataset and no runs at {tmp_path / 'nope'}")
    # A dataset that lost its dataset.json is not quietly an empty one.
    lost = tmp_path / "lost"
    shutil.copytree(_dataset(tmp_path), lost)
    (lost / "dataset.json").unlink()
    said = _refused(runner.invoke(main, ["sql", str(lost), "SELECT count(*) FROM runs"]))
    assert said.startswith(f"Error: no dataset and no runs at {lost}") and "dataset.json" in said
    # A folder of runs (here a level down) with no dataset is still ingested on the fly.
    runs = tmp_path / "more"
    for key in ("a", "b", "c"):
        write_stream(runs / "suite" / key / "events.jsonl", good_run())
    done = runner.invoke(main, ["sql", str(runs), "SELECT count(*) AS n FROM runs",
                                "--format", "json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == {"n": 3} and "ingested 3 runs" in done.stderr
    assert not (runs / "dataset.parquet").exists()  # temporary: nothing kept in the runs folder


def test_sql_json_lines_stay_json_and_a_query_that_is_not_utf8_is_one_sentence(tmp_path):
    ds = _dataset(tmp_path)
    runner = CliRunner()
    done = runner.invoke(main, ["sql", str(ds), "SELECT 'nan'::DOUBLE AS a, "
                                "['inf'::DOUBLE, 2.0] AS b, {'x': '-inf'::DOUBLE} AS c",
                                "--format", "json"])
    assert done.exit_code == 0, done.output
    strict = json.loads(done.stdout, parse_constant=lambda name: pytest.fail(f"{name} in JSON"))
    assert strict == {"a": None, "b": [None, 2.0], "c": {"x": None}}
    # A command-line argument of bytes that are not UTF-8 reaches Python as surrogates.
    bad = runner.invoke(main, ["sql", str(ds), "SELECT \udcff"])
    assert bad.exit_code == 2 and bad.stderr == "Error: query failed: the query is not UTF-8 text\n"


def test_a_stream_cut_mid_emoji_scores_alike_from_the_runs_and_the_dataset(tmp_path):
    """A JavaScript writer that cuts a string mid-emoji writes a lone surrogate escape;
    the answer and mission_finished lines are still JSON, and both paths read them."""
    runs = tmp_path / "runs"
    lines = [json.dumps(r) for r in good_run()[:-2]]
    lines += ['{"event":"answer","text":"The sum is 5 \\ud83d","outcome":"answered"}',
              '{"event":"mission_finished","outcome":"answered","steps":2,"max_steps":0,'
              '"elapsed_s":1e400}']
    (runs / "a").mkdir(parents=True)
    (runs / "a" / "events.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    suite = write_suite(tmp_path / "s.yaml", padded([mission(
        "a", expects_tools=["mcp.add"], expects_outcome="answered",
        answer_must_match=["sum is 5"])]), flags=["chaining"])
    runner = CliRunner()
    assert runner.invoke(main, ["ingest", str(runs)]).exit_code == 0
    reports = []
    for source in (["--runs", str(runs)], ["--dataset", str(runs / "dataset.parquet")]):
        done = runner.invoke(main, ["score", "--suite", str(suite), *source, "--json",
                                    "--allow-failures"])
        assert done.exit_code == 0, done.output
        verdict = next(v for v in json.loads(done.stdout)["verdicts"] if v["key"] == "a")
        reports.append(verdict)
    assert reports[0] == reports[1]
    assert reports[0]["passed"] and reports[0]["kpis"]["skipped_lines"] == 0
    assert reports[0]["kpis"]["elapsed_s"] is None and reports[0]["kpis"]["answer_chars"] == 14
