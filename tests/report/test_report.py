"""`evalkit report`: one self-contained, deterministic HTML file per folder, halves apart."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser

import pytest
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.errors import EvalkitError
from evalkit.eval import stats
from evalkit.eval.suite import load_suite
from evalkit.report import folders as folder_reader
from evalkit.report.folders import safe_endpoint
from evalkit.report.html import report_html
from evalkit.report.kpis import FLAKY, MISSING, PASS, halves
from tests.report._folders import make_suite, write_runs


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


class Page(HTMLParser):
    """The tags, ids and text of a page, and every URL-bearing attribute."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.ids: set[str] = set()
        self.urls: list[str] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name == "id":
                self.ids.add(value)
            if name in ("src", "href", "xlink:href", "action", "data") and value:
                self.urls.append(value)

    def handle_data(self, data):
        self.text.append(data)

    @property
    def words(self) -> str:
        return " ".join(" ".join(self.text).split())


@pytest.mark.slow
def test_a_run_folder_report_has_provenance_kpis_per_half_charts_reasons_and_rubric(
        folders, tmp_path):
    out = tmp_path / "r.html"
    result = invoke("report", folders["run"], "-o", out)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"wrote {out}"
    text = out.read_text(encoding="utf-8")
    page = Page(text)
    words = page.words
    # Provenance: the fixed items, recorded or not; the spawn line with its key withheld.
    for label in ("suite", "commit", "model", "endpoint", "date", "repeats"):
        assert f"<dt>{label}</dt>" in text
    assert "abc1234" in words and "2026-11-30T09:00:00Z" in words
    # One KPI table per half, never one blended table.
    assert {"kpis-train", "kpis-test", "missions-train", "missions-test"} <= page.ids
    assert text.count('class="sortable kpis"') == 2
    # Charts inline: pass rate and quality/cost per half; no paired chart for one row.
    assert text.count('<svg role="img"') == 4 and "<img" not in text
    # Why they failed, and the reader's rubric beside each mission.
    assert "never called mcp.add; it called ['mcp.echo']" in words
    assert "not run" in words
    assert words.count("must states the sum") == 8 and words.count("must not invents a figure") == 8
    # The newest rubric change first (the suite is found through run.json).
    section = Page(text.split('id="rubric-changes"', 1)[1]).words
    assert section.index("must name the source") < section.index("must state the sum")
    # ...and each mission's newest change sits beside its rubric.
    assert "rubric changed 2026-11-30: must name the source" in words


def test_a_lone_scoring_rates_each_half_with_the_wilson_interval(folders):
    scoring = folder_reader.load(folders["run"])
    by_half = {h.name: h for h in halves(scoring)}
    train, test = by_half["train"].kpis[0], by_half["test"].kpis[0]
    assert (train.runs, train.passed, test.runs, test.passed, test.missing) == (5, 4, 3, 2, 1)
    assert train.interval == _rounded(stats.wilson(4, 5))
    assert test.interval == _rounded(stats.wilson(2, 3))
    assert train.source == "evalkit.eval.stats" and train.bootstrap is None
    assert train.mean_tokens == 120 and train.mean_steps == 2 and train.mean_wall_s == 1.25
    assert train.grounded == 5 and train.grounding_verdicts == 5  # t1 failed on tools only
    statuses = {m.key: m.cells[0][0] for m in by_half["test"].missions}
    assert statuses == {"h0": PASS, "h1": PASS, "h2": MISSING}


def _rounded(pair):
    return (round(pair[0], 4), round(pair[1], 4))


@pytest.mark.slow
def test_a_measure_report_shows_rows_pairs_from_matrix_json_and_flaky_cells(folders):
    scoring = folder_reader.load(folders["measure"])
    text = report_html(scoring)
    words = Page(text).words
    train = {h.name: h for h in halves(scoring)}["train"]
    assert [r.name for r in train.kpis] == ["direct", "swarm", "native"]
    # The paired comparison is the one matrix.json carries.
    matrix = json.loads((folders["measure"] / "matrix.json").read_text())
    written = matrix["statistics"]["swarm"]["train"]["vs_baseline"]
    swarm = next(p for p in train.paired if p.name == "swarm")
    assert (swarm.baseline_only, swarm.row_only, swarm.p_value, swarm.verdict) == (
        written["baseline_only"], written["row_only"], written["p_value"], written["verdict"])
    assert swarm.source == "matrix.json" and swarm.pairing == "mission-majority"
    cell = matrix["statistics"]["direct"]["train"]
    direct = train.kpis[0]
    assert direct.interval == tuple(cell["rate"]["wilson"])
    assert direct.bootstrap == tuple(cell["bootstrap"]) and direct.source == "matrix.json"
    assert direct.pass_at_k == cell["pass_at_k"]["3"] and direct.k == 3
    cells = {m.key: dict(zip(train.configurations, m.cells, strict=True)) for m in train.missions}
    assert cells["t2"]["swarm"] == (FLAKY, 1, 3)
    assert cells["t0"]["native"] == (FLAKY, 2, 3)
    # Three charts per half, paired included; the missions x rows grid is a linked table.
    assert text.count('<svg role="img"') == 6 and text.count('class="sortable grid"') == 2
    assert "claims" in words and "the manifest has no claim table" in words
    assert "pass@3" in words and "no detectable difference" in words
    # Credentials never reach the page.
    assert "hunter22" not in text and "sk-abc" not in text and "http://127.0.0.1:8000/v1" in words


def test_without_statistics_the_report_calls_stats_itself(folders, tmp_path):
    bare = tmp_path / "measure"
    shutil.copytree(folders["measure"], bare)
    matrix = json.loads((bare / "matrix.json").read_text())
    matrix["statistics"] = {}
    (bare / "matrix.json").write_text(json.dumps(matrix))
    scoring = folder_reader.load(bare)
    train = {h.name: h for h in halves(scoring)}["train"]
    swarm = next(p for p in train.paired if p.name == "swarm")
    written = json.loads((folders["measure"] / "matrix.json").read_text())["statistics"]
    expected = written["swarm"]["train"]["vs_baseline"]
    assert (swarm.delta, list(swarm.interval), swarm.p_value, swarm.verdict) == (
        expected["delta"], expected["interval"], expected["p_value"], expected["verdict"])
    assert swarm.source == "evalkit.eval.stats"
    native = train.kpis[2]
    assert native.source == "evalkit.eval.stats"
    assert native.interval == tuple(written["native"]["train"]["rate"]["wilson"])
    assert native.bootstrap == tuple(written["native"]["train"]["bootstrap"])


@pytest.mark.slow
def test_the_same_folder_gives_the_same_bytes_across_processes(folders, tmp_path):
    outs = []
    for n in (1, 2):
        out = tmp_path / f"r{n}.html"
        subprocess.run([sys.executable, "-m", "evalkit.cli", "report", str(folders["measure"]),
                        "-o", str(out)], check=True, capture_output=True)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    assert b"<dc:date>" not in outs[0]


@pytest.mark.slow
def test_the_page_is_self_contained(folders):
    text = report_html(folder_reader.load(folders["measure"]))
    page = Page(text)
    external = [u for u in page.urls if not u.startswith(("#", "data:"))]
    assert external == []
    assert "<link" not in text and "@import" not in text and "url(http" not in text
    assert page.tags.count("script") == 1 and "<script src" not in text
    assert len(text.encode()) < 2_000_000


@pytest.mark.slow
def test_user_text_is_escaped_and_never_parsed_as_markup_or_mathtext(tmp_path):
    hostile = "<script>alert(1)</script> costs $5 and $x^2$ -->"
    suite = make_suite(tmp_path / "suite.yaml", rubric_changes=[
        {"date": "2026-11-30", "key": "t0", "what": hostile, "why": hostile}])
    doc = suite.read_text().replace("invents a figure", hostile.replace("'", "")).replace(
        "key: t0", "key: t0-$x$")
    suite.write_text(doc.replace("'<script>", '"<script>').replace("-->'", '-->"'))
    loaded = load_suite(suite)
    runs = write_runs(tmp_path / "runs", loaded, lambda key: "fail")
    text = report_html(folder_reader.load(runs, loaded), loaded)
    assert "<script>alert" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "t0-$x$" in text


@pytest.mark.slow
def test_a_bare_runs_folder_needs_the_suite_and_a_newer_format_is_refused(folders, tmp_path):
    suite = load_suite(folders["suite"])
    runs = write_runs(tmp_path / "runs", suite, lambda key: "pass")
    refused = invoke("report", runs)
    assert refused.exit_code == 2 and "give --suite" in refused.stderr
    ok = invoke("report", runs, "--suite", folders["suite"], "-o", tmp_path / "r.html")
    assert ok.exit_code == 0, ok.output
    assert "scored from" in (tmp_path / "r.html").read_text()
    newer = tmp_path / "newer"
    shutil.copytree(folders["run"], newer)
    report = json.loads((newer / "report.json").read_text())
    report["version"] = 2
    (newer / "report.json").write_text(json.dumps(report))
    with pytest.raises(EvalkitError, match="newer than this evalkit reads"):
        folder_reader.load(newer)
    assert invoke("report", tmp_path / "nowhere").exit_code == 2


def test_a_regraded_measure_layout_is_scored_row_by_row(folders, tmp_path):
    suite = load_suite(folders["suite"])
    for row in ("direct", "swarm"):
        for n in (1, 2):
            write_runs(tmp_path / "out" / row / f"rep{n}", suite,
                       lambda key, row=row: "fail" if row == "swarm" and key == "t0" else "pass")
    scoring = folder_reader.load(tmp_path / "out", suite)
    assert [(c.name, [r.label for r in c.reps]) for c in scoring.ran] == [
        ("direct", ["rep1", "rep2"]), ("swarm", ["rep1", "rep2"])]
    train = {h.name: h for h in halves(scoring)}["train"]
    # Paired by mission (majority of repeats): t0 failed both repeats of swarm.
    assert (train.paired[0].baseline_only, train.paired[0].missions) == (1, 5)
    assert train.paired[0].verdict == "no detectable difference"


@pytest.mark.slow
def test_the_default_output_is_beside_the_report_and_charts_import_lazily(folders, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(folders["run"], copy)
    result = invoke("report", copy)
    assert result.exit_code == 0 and (copy / "report.html").is_file()
    probe = ("import sys, evalkit.report.html, evalkit.report.folders, evalkit.report.text, "
             "evalkit.eval.diff, evalkit.commands.report\n"
             "print(sorted(m for m in sys.modules if m.startswith(('matplotlib', "
             "'evalkit.runtime', 'duckdb'))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(("given", "shown"), [
    ("http://user:hunter22@127.0.0.1:8000/v1?api_key=sk-abc#x", "http://127.0.0.1:8000/v1"),
    ("https://[::1]:8443/v1", "https://[::1]:8443/v1"),
    ("https://api.example.org/v1", "https://api.example.org/v1"),
    ("not a url with sk-aaaaaaaaaaaaaaaaaaaaaaaa", "not a url with [REDACTED]"),
])
def test_endpoints_lose_their_credentials(given, shown):
    assert safe_endpoint(given) == shown


def test_measure_fixture_follows_the_documented_layout(folders):
    root = folders["measure"]
    matrix = json.loads((root / "matrix.json").read_text())
    assert matrix["format"] == "evalkit-matrix" and matrix["baseline"] == "direct"
    for row in matrix["rows"]:
        for rep in row["reps"]:
            assert (root / rep / "report.json").is_file()
            assert re.fullmatch(r"[a-z]+/rep\d+", rep)


def test_a_report_of_a_folder_with_one_half_shows_only_that_half(tmp_path):
    suite_path = make_suite(tmp_path / "suite.yaml")
    suite = load_suite(suite_path)
    runs = write_runs(tmp_path / "runs", suite, lambda key: "pass")
    from evalkit.eval.score import score
    from evalkit.report.markdown import write_report

    write_report(score(suite, runs=runs, split="test").to_dict(), tmp_path / "scored")
    page = Page(report_html(folder_reader.load(tmp_path / "scored"), suite))
    assert "kpis-test" in page.ids and "kpis-train" not in page.ids


def test_run_folder_fixture_is_what_run_writes(folders):
    assert (folders["run"] / "run.json").is_file() and (folders["run"] / "report.md").is_file()


def test_a_suite_without_held_out_missions_shows_no_empty_test_half(tmp_path):
    suite = load_suite(make_suite(tmp_path / "suite.yaml", train=3, test=0))
    runs = write_runs(tmp_path / "runs", suite, lambda key: "pass")
    page = Page(report_html(folder_reader.load(runs, suite), suite))
    assert "kpis-train" in page.ids and "kpis-test" not in page.ids


@pytest.mark.slow
def test_infrastructure_errors_are_counted_apart_and_rated_without(folders, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(folders["run"], copy)
    report = json.loads((copy / "report.json").read_text())
    for v in report["verdicts"]:
        v["category"] = "pass" if v["passed"] else ("missing" if v["missing"] else "fail")
        v["infra"] = None
        if v["key"] == "t1":
            v.update(category="infra", infra="endpoint_failure: model openai/m failed")
    (copy / "report.json").write_text(json.dumps(report))
    scoring = folder_reader.load(copy)
    train = {h.name: h for h in halves(scoring)}["train"]
    row = train.kpis[0]
    assert (row.infra, row.passed, row.runs, row.rate_without_infra) == (1, 4, 5, 1.0)
    cells = {m.key: m.cells[0][0] for m in train.missions}
    assert cells["t1"] == "infra"
    reasons = {m.key: [r for r, _ in m.reasons] for m in train.missions}
    assert "infrastructure error: endpoint_failure: model openai/m failed" in reasons["t1"]
    words = Page(report_html(scoring)).words
    assert "without infra errors" in words
