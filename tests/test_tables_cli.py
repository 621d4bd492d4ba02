"""`evalkit ingest` and `evalkit sql` as a user runs them."""

from __future__ import annotations

import json

from click.testing import CliRunner

from evalkit.cli import main
from tests._stream_builders import good_run, mission, write_stream, write_suite


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
    suite = write_suite(tmp_path / "s.yaml", [mission("a", expects_tools=["mcp.add"]),
                                             mission("b", expects_tools=["mcp.echo"])])
    scored = runner.invoke(main, ["score", "--suite", str(suite), "--dataset",
                                  str(runs / "dataset.parquet"), "--json"])
    verdicts = {v["key"]: v["passed"] for v in json.loads(scored.stdout)["verdicts"]}
    assert verdicts == {"a": True, "b": False} and scored.exit_code == 1


def test_bad_sql_and_a_missing_folder_are_one_sentence(tmp_path):
    write_stream(tmp_path / "runs" / "a" / "events.jsonl", good_run())
    runner = CliRunner()
    bad = runner.invoke(main, ["sql", str(tmp_path / "runs"), "SELEC nonsense"])
    assert bad.exit_code == 2 and bad.stderr.splitlines()[-1].startswith("Error: query failed")
    assert "Traceback" not in bad.output
    missing = runner.invoke(main, ["ingest", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "is not a folder" in missing.stderr


def test_score_from_a_dataset_equals_score_from_the_runs(tmp_path):
    runs = tmp_path / "runs"
    for key in ("a", "b", "c"):
        write_stream(runs / key / "events.jsonl", good_run())
    runner = CliRunner()
    assert runner.invoke(main, ["ingest", str(runs)]).exit_code == 0
    # "a" twice: check complains, score still judges both from the one run.
    suite = write_suite(tmp_path / "s.yaml", [mission("a", expects_tools=["mcp.add"]),
                                             mission("b", expects_tools=["mcp.echo"]),
                                             mission("a", expects_tools=["mcp.echo"]),
                                             mission("d")])
    common = ["score", "--suite", str(suite), "--json", "--allow-failures"]
    from_runs = runner.invoke(main, [*common, "--runs", str(runs)])
    from_dataset = runner.invoke(main, [*common, "--dataset", str(runs / "dataset.parquet")])
    assert from_runs.exit_code == from_dataset.exit_code == 0, from_dataset.output
    got = [(v["key"], v["passed"], v["missing"]) for v in json.loads(from_dataset.stdout)["verdicts"]]
    assert got == [("a", True, False), ("b", False, False), ("a", False, False), ("d", False, True)]
    strip = lambda report: [{k: v for k, v in verdict.items() if k != "source"}  # noqa: E731
                            for verdict in json.loads(report)["verdicts"]]
    assert strip(from_runs.stdout) == strip(from_dataset.stdout)
