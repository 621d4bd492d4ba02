"""The ``verdicts`` table: the score reports beside the runs, queried with ``evalkit sql``."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from evalkit.cli import main
from evalkit.eval.suite import load_suite
from evalkit.eval.verdict import KPI_NAMES
from evalkit.report.verdict_table import KPI_TYPES, VerdictTable
from tests.report._folders import make_suite, measure_folder, run_folder

RECORDED = Path(__file__).resolve().parents[2] / "recordings" / "stub"


def sql(folder: Path, query: str) -> tuple[list[dict], str]:
    done = CliRunner().invoke(main, ["sql", str(folder), query, "--format", "json"])
    assert done.exit_code == 0, done.output
    return [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def test_every_row_says_what_its_report_says(tmp_path):
    folder = shutil.copytree(RECORDED, tmp_path / "stub")
    ingested = CliRunner().invoke(main, ["ingest", str(folder)])
    assert ingested.exit_code == 0, ingested.output
    assert "and 24 verdicts into" in ingested.stdout
    rows = pq.read_table(folder / "dataset.parquet" / "verdicts.parquet").to_pylist()
    assert [(r["report"], r["key"]) for r in rows] == [
        (f"{half}/report.json", v["key"]) for half in ("bad", "good")
        for v in json.loads((folder / half / "report.json").read_text())["verdicts"]]
    for row in rows:
        report = json.loads((folder / row["report"]).read_text())
        v = next(v for v in report["verdicts"] if v["key"] == row["key"])
        assert (row["suite"], row["config"], row["rep"]) == (report["suite"], None, None)
        for name in ("flag", "split", "passed", "missing", "reasons", "checks", "source"):
            assert row[name] == v[name], name
        assert (row["must"], row["must_not"]) == (v["needs_reader"]["must"],
                                                  v["needs_reader"]["must_not"])
        for name in KPI_NAMES:
            want = v["kpis"][name]
            assert row[name] == (float(want) if isinstance(want, int) and KPI_TYPES[name]
                                 == "double" else want), name
    failed = [(r["report"], r["key"]) for r in rows if not r["passed"]]
    assert len(failed) == 12 and all(where == "bad/report.json" for where, _ in failed)


@pytest.mark.slow
def test_a_measure_folder_answers_by_configuration_and_repeat(tmp_path):
    suite = make_suite(tmp_path / "s.yaml")
    # swarm fails t1 on its second repeat only; direct passes everything.
    measure_folder(tmp_path / "m", suite, {
        "direct": lambda key, rep: "pass",
        "swarm": lambda key, rep: "fail" if (key, rep) == ("t1", 2) else "pass"}, repeat=2)
    rows, stderr = sql(tmp_path / "m", "SELECT config, rep, count(*) AS n, "
                       "count(*) FILTER (WHERE NOT passed) AS failed, "
                       "string_agg(CASE WHEN NOT passed THEN key END) AS which "
                       "FROM verdicts GROUP BY ALL ORDER BY ALL")
    assert rows == [
        {"config": "direct", "rep": 1, "n": 8, "failed": 0, "which": None},
        {"config": "direct", "rep": 2, "n": 8, "failed": 0, "which": None},
        {"config": "swarm", "rep": 1, "n": 8, "failed": 0, "which": None},
        {"config": "swarm", "rep": 2, "n": 8, "failed": 1, "which": "t1"},
    ]
    assert "ingested 32 runs and 32 verdicts into a temporary one" in stderr
    where, _ = sql(tmp_path / "m", "SELECT DISTINCT report FROM verdicts "
                   "WHERE config = 'swarm' AND rep = 2")
    assert where == [{"report": "swarm/rep2/report.json"}]


def test_reports_not_of_a_matrix_have_no_configuration(tmp_path):
    suite = make_suite(tmp_path / "s.yaml")
    run_folder(tmp_path / "all" / "run", suite, lambda key: "pass")
    measure_folder(tmp_path / "all" / "m", suite, {"direct": lambda key, rep: "pass"}, repeat=1)
    rows, _ = sql(tmp_path / "all", "SELECT report, config, rep, count(*) AS n FROM verdicts "
                  "GROUP BY ALL ORDER BY report")
    assert rows == [{"report": "m/direct/rep1/report.json", "config": "direct", "rep": 1, "n": 8},
                    {"report": "run/report.json", "config": None, "rep": None, "n": 8}]


def test_a_folder_holding_only_a_score_report_is_queried(tmp_path):
    suite = make_suite(tmp_path / "s.yaml")
    runs = run_folder(tmp_path / "runs", suite, lambda key: "fail" if key == "h0" else "pass")
    out = tmp_path / "scored"
    done = CliRunner().invoke(main, ["score", "--suite", str(suite), "--runs", str(runs),
                                     "--report", str(out)])
    assert done.exit_code == 1, done.output  # h0 failed
    rows, stderr = sql(out, "SELECT key, reasons FROM verdicts WHERE NOT passed")
    assert rows == [{"key": "h0", "reasons": ["never called mcp.add; it called ['mcp.echo']"]}]
    assert "ingested 0 runs and 8 verdicts" in stderr


def test_a_damaged_report_is_left_out_in_one_sentence_and_the_rest_are_gathered(tmp_path):
    suite = make_suite(tmp_path / "s.yaml")
    run_folder(tmp_path / "all" / "good", suite, lambda key: "pass")
    damaged = run_folder(tmp_path / "all" / "cut", suite, lambda key: "pass") / "report.json"
    damaged.write_bytes(damaged.read_bytes()[:300])  # cut short: still begins as ours
    foreign = tmp_path / "all" / "other" / "report.json"
    foreign.parent.mkdir()
    foreign.write_text('{"tool": "someone else\'s", "verdicts": 3}')
    done = CliRunner().invoke(main, ["ingest", str(tmp_path / "all")])
    assert done.exit_code == 0, done.output
    assert "and 8 verdicts into" in done.stdout
    warned = done.stderr.splitlines()
    assert len(warned) == 1 and warned[0].startswith("evalkit: left out ")
    assert "cut/report.json is not JSON" in warned[0] and "Traceback" not in done.output
    reports = {r["report"] for r in pq.read_table(
        tmp_path / "all" / "dataset.parquet" / "verdicts.parquet").to_pylist()}
    assert reports == {"good/report.json"}


def test_a_damaged_matrix_leaves_its_reports_in_but_unplaced(tmp_path):
    suite = make_suite(tmp_path / "s.yaml")
    measure_folder(tmp_path / "m", suite, {"direct": lambda key, rep: "pass"}, repeat=1)
    matrix = tmp_path / "m" / "matrix.json"
    matrix.write_text(matrix.read_text().replace('"rows": [', '"rows": 7, "was": ['))
    done = CliRunner().invoke(main, ["sql", str(tmp_path / "m"),
                                     "SELECT config, count(*) AS n FROM verdicts GROUP BY ALL"])
    assert done.exit_code == 0, done.output
    assert "NULL   | 8" in done.stdout
    assert "cannot place the reports of a matrix in it" in done.stderr


def test_every_kpi_has_a_typed_column():
    assert list(KPI_TYPES) == list(KPI_NAMES)


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                     | st.text() | st.sampled_from([10**400, -2**63 - 1, 2**63, 1e308]), lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=6)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kpis=st.dictionaries(st.sampled_from(KPI_NAMES), _JSON))
@example(kpis={"max_steps": 10**400, "prompt_tokens": 2**63, "records": 2**64,
               "tools": [1, None, {"a": 2**70}], "budget": {"which": "steps"}})
def test_any_kpi_values_give_a_row_or_one_sentence(tmp_path, kpis):
    report = tmp_path / "report.json"
    v = {"key": "a", "flag": "chaining", "split": "train", "passed": True, "missing": False,
         "reasons": [], "checks": [], "kpis": kpis}
    report.write_text(json.dumps({"format": "evalkit-score", "version": 1, "suite": "s",
                                  "verdicts": [v]}, indent=2))
    said: list[str] = []
    [(name, table)] = VerdictTable(warn=said.append)(tmp_path, [str(report)])
    assert name == "verdicts" and len(table) + len(said) == 1
    if said:  # a KPI the report reads as a number, out of range: check_report's sentence
        assert said[0].startswith("left out ") and "\n" not in said[0]
        assert "is not a score report evalkit reads" in said[0]
    else:
        row = table.to_pylist()[0]
        for kpi, value in kpis.items():
            if KPI_TYPES[kpi] == "bool":
                assert row[kpi] == (value if isinstance(value, bool) else None)
            elif KPI_TYPES[kpi] == "double" and row[kpi] is not None:
                assert math.isfinite(row[kpi])


def test_text_no_parquet_string_holds_leaves_its_report_out_in_one_sentence(tmp_path):
    report = tmp_path / "report.json"
    v = {"key": "a", "flag": "chaining", "split": "train", "passed": False, "missing": False,
         "reasons": ["never called mcp.\ud800"], "kpis": {}}
    report.write_text(json.dumps({"format": "evalkit-score", "version": 1, "verdicts": [v]},
                                 indent=2))
    said: list[str] = []
    [(_, table)] = VerdictTable(warn=said.append)(tmp_path, [str(report)])
    assert len(table) == 0 and said == [
        f"left out {report}: it holds text that is not Unicode (a lone surrogate escape), "
        "which a Parquet string cannot hold"]


def test_a_verdict_joins_the_run_it_was_judged_from(tmp_path):
    # A run folder's verdicts join its runs: each verdict's source is a row of runs.
    suite = make_suite(tmp_path / "s.yaml")
    run_folder(tmp_path / "r", suite, lambda key: "pass")
    rows, _ = sql(tmp_path / "r", "SELECT v.key, r.events_path FROM verdicts v "
                  "JOIN runs r ON r.events_path = v.source ORDER BY v.key")
    assert [r["key"] for r in rows] == sorted(m.key for m in load_suite(suite).missions)
