"""`evalkit report`, `evalkit diff` and score's report files given bad input: one
sentence and exit 2, and nothing already on disk is lost or half rewritten."""

from __future__ import annotations

import contextlib
import copy
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalkit.cli import main
from evalkit.errors import EvalkitError
from evalkit.eval.suite import load_suite
from evalkit.report import charts
from evalkit.report.html import GENERATOR_MARKER, MARKER_WITHIN
from evalkit.report.markdown import Rendered, write_rendered
from evalkit.store import replace
from tests.report._folders import make_suite, score_folder, write_runs

#: One worker runs the module (``--dist loadgroup``): the scored folders, and each chart
#: their reports draw, are made once, not once in each worker handed some of its tests.
pytestmark = pytest.mark.xdist_group("bad_input")


def invoke(*args: Any):
    # EVALKIT_DEBUG unset: an escaping exception must show as exit 3, not a traceback.
    return CliRunner(env={"EVALKIT_DEBUG": None}).invoke(main, [str(a) for a in args])


def refused(result) -> str:
    """The one line a refusal prints; fails unless it is a clean exit 2."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output and "internal error" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


@contextlib.contextmanager
def charts_drawn_once() -> Iterator[None]:
    """While this lasts, each of the report's charts is drawn once per distinct input.

    Drawing the charts (matplotlib, to SVG) is most of what rendering a report costs, and
    the tests here render the same few charts over and over: the same folders, and damage
    that leaves the KPIs alone or is refused before a chart is drawn. A chart is a pure
    function of its arguments (``evalkit.report.charts``: a fixed hash salt, no date), so
    the page is byte for byte the one drawing it again would give. A chart that fails to
    draw is not kept: it fails again on every page that asks for it.
    """
    drawn: dict[str, str] = {}

    def once(name: str) -> Any:
        draw = getattr(charts, name)

        def memo(*args: Any, **kwargs: Any) -> str:
            key = repr((name, args, kwargs))  # every field of the KPI and paired rows
            if key not in drawn:
                drawn[key] = draw(*args, **kwargs)
            return drawn[key]
        return memo

    with pytest.MonkeyPatch.context() as patch:
        for name in ("pass_rates", "quality_cost", "paired"):
            patch.setattr(charts, name, once(name))
        yield


@pytest.fixture(scope="module", autouse=True)
def _charts_once() -> Iterator[None]:
    with charts_drawn_once():
        yield


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> dict[str, Any]:
    """Two score folders of a small suite (a mission fails in B), one a run's stream folder."""
    root = tmp_path_factory.mktemp("bad_input")
    suite = load_suite(make_suite(root / "suite.yaml"))
    a = write_runs(root / "A", suite, lambda key: "pass")
    b = write_runs(root / "B", suite, lambda key: "fail" if key == "t1" else "pass")
    return {"root": root, "suite": suite, "A": a, "B": b,
            "report": score_folder(a, suite), "B_report": score_folder(b, suite)}


def _copy(folder: Path, where: Path) -> Path:
    shutil.copytree(folder, where)
    return where


# -- 1. the HTML is never written over a file evalkit did not write ------------------------


@pytest.mark.slow
@pytest.mark.parametrize("target", ["A/t0/events.jsonl", "A/report.json", "A/report.md"])
def test_report_refuses_to_write_its_html_over_a_recorded_or_read_file(scored, tmp_path, target):
    a = _copy(scored["A"], tmp_path / "A")
    victim = tmp_path / target
    before = victim.read_bytes()
    line = refused(invoke("report", a, "-o", victim))
    assert str(victim) in line and "refusing" in line
    assert victim.read_bytes() == before
    assert sorted(p.name for p in victim.parent.iterdir() if p.name.startswith(".")) == []


@pytest.mark.slow
def test_diff_refuses_to_write_its_html_over_the_report_it_read(scored, tmp_path):
    a, b = _copy(scored["A"], tmp_path / "A"), _copy(scored["B"], tmp_path / "B")
    before = (b / "report.json").read_bytes()
    result = invoke("diff", a, b, "--html", b / "report.json")
    assert "refusing" in refused(result)
    assert result.stdout == ""  # refused before the diff is printed, not after
    assert (b / "report.json").read_bytes() == before
    assert invoke("diff", a, b).exit_code == 0  # B still reads


def test_a_marker_past_the_first_kilobytes_does_not_make_a_file_evalkit_html(scored, tmp_path):
    """A log or JSON quoting an evalkit page deep inside is still not one."""
    victim = tmp_path / "notes.html"
    victim.write_bytes(b"x" * MARKER_WITHIN + GENERATOR_MARKER)
    refused(invoke("report", scored["A"], "-o", victim))
    assert victim.read_bytes() == b"x" * MARKER_WITHIN + GENERATOR_MARKER


def test_a_folder_as_the_html_target_is_refused_and_left_alone(scored, tmp_path):
    folder = tmp_path / "out"
    (folder / "keep.txt").parent.mkdir()
    (folder / "keep.txt").write_text("kept")
    assert "is a folder" in refused(invoke("report", scored["A"], "-o", folder))
    assert [p.name for p in folder.iterdir()] == ["keep.txt"]


@pytest.mark.slow
def test_evalkits_own_html_is_written_over_again_by_report_and_by_diff(scored, tmp_path):
    page = tmp_path / "page.html"
    for _ in range(2):  # the normal re-run: last time's report is replaced quietly
        assert invoke("report", scored["A"], "-o", page).exit_code == 0
    assert GENERATOR_MARKER in page.read_bytes()[:MARKER_WITHIN]
    assert invoke("diff", scored["A"], scored["B"], "--html", page).exit_code == 0
    assert "flipped" in page.read_text(encoding="utf-8")
    assert invoke("report", scored["A"], "-o", page).exit_code == 0  # a diff's page, too
    empty = tmp_path / "empty.html"  # as mktemp leaves it: nothing to lose
    empty.touch()
    assert invoke("report", scored["A"], "-o", empty).exit_code == 0


# -- 2. score's report.json and report.md: both written, or neither ------------------------


#: The head of a previous score report, as evalkit writes it.
OLD_JSON = '{\n  "format": "evalkit-score",\n  "version": 1,\n  "suite": "old"\n}\n'
OLD_MD = "# Suite `old`\n\n**Overall** \u2014 train: 1/1 passed (100%)\n"


@pytest.mark.parametrize("name", ["report.json", "report.md"])
@pytest.mark.parametrize("foreign", ["notes I keep\n", '{"format": "mine"}\n',
                                     "# Suite `x`\nbut mine\n"])
def test_score_report_writes_over_no_file_evalkit_did_not_write(scored, tmp_path, name, foreign):
    out = tmp_path / "out"
    out.mkdir()
    (out / name).write_text(foreign)
    result = invoke("score", "--suite", scored["suite"].path, "--runs", scored["B"],
                    "--report", out)
    assert f"{name} is not a score report evalkit wrote" in refused(result)
    assert [p.name for p in out.iterdir()] == [name] and (out / name).read_text() == foreign
    # Its own earlier report (or an empty file) it replaces, as re-running a score does.
    (out / name).write_text(OLD_JSON if name == "report.json" else OLD_MD)
    assert invoke("score", "--suite", scored["suite"].path, "--runs", scored["B"],
                  "--report", out, "--allow-failures").exit_code == 0
    assert (out / name).read_text() not in (OLD_JSON, OLD_MD)


def test_a_folder_where_report_md_goes_leaves_the_previous_report_json(scored, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text(OLD_JSON)
    (out / "report.md").mkdir()
    result = invoke("score", "--suite", scored["suite"].path, "--runs", scored["B"],
                    "--report", out)
    assert "report.md is a folder" in refused(result)
    assert (out / "report.json").read_text() == OLD_JSON
    assert sorted(p.name for p in out.iterdir()) == ["report.json", "report.md"]


def test_a_failure_writing_report_md_leaves_both_previous_files(tmp_path, monkeypatch):
    """The disk fills while the second file is written: the first must not be replaced yet."""
    (tmp_path / "report.json").write_text(OLD_JSON)
    (tmp_path / "report.md").write_text(OLD_MD)
    written, calls = replace.write_parts, []

    def second_write_fails(stream, parts):
        calls.append(parts)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        written(stream, parts)

    monkeypatch.setattr(replace, "write_parts", second_write_fails)
    with pytest.raises(EvalkitError, match="No space left"):
        write_rendered(tmp_path, Rendered(True, [b"new json"], [b"new md"]))
    assert len(calls) == 2
    assert (tmp_path / "report.json").read_text() == OLD_JSON
    assert (tmp_path / "report.md").read_text() == OLD_MD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "report.md"]


# -- 3. a damaged report.json: one sentence naming where, exit 2 --------------------------


def _verdict(report: dict[str, Any], **fields: Any) -> dict[str, Any]:
    damaged = copy.deepcopy(report)
    damaged["verdicts"][0].update(fields)
    return damaged


def _kpi(report: dict[str, Any], **kpis: Any) -> dict[str, Any]:
    damaged = copy.deepcopy(report)
    damaged["verdicts"][0]["kpis"].update(kpis)
    return damaged


DAMAGE = {
    "verdicts [1, 2]": (lambda r: {**r, "verdicts": [1, 2]}, "verdicts[0] is 1, not an object"),
    "key 1": (lambda r: _verdict(r, key=1), "verdicts[0] has key 1"),
    "kpis x": (lambda r: _verdict(r, kpis="x"), 'kpis "x", not an object'),
    "needs_reader x": (lambda r: _verdict(r, needs_reader="x"), 'needs_reader "x"'),
    "needs_reader.must 5": (lambda r: _verdict(r, needs_reader={"must": 5}),
                            "needs_reader.must 5"),
    "tokens -1e308": (lambda r: _kpi(r, tokens=-1e308), "kpis.tokens -1e+308"),
    "tokens 10**400": (lambda r: _kpi(r, tokens=10**400), "kpis.tokens 1000"),
    "steps NaN": (lambda r: _kpi(r, steps=float("nan")), "kpis.steps NaN"),
    "human_interventions x": (lambda r: _kpi(r, human_interventions="x"),
                              'kpis.human_interventions "x"'),
    "passed no": (lambda r: _verdict(r, passed="no"), 'passed "no", not true or false'),
    "no passed": (lambda r: {**r, "verdicts": [{k: v for k, v in r["verdicts"][0].items()
                                                if k != "passed"}]}, "has no passed"),
    "duplicate key": (lambda r: {**r, "verdicts": [*r["verdicts"], r["verdicts"][0]]},
                      "both have key 't0'"),
    "halves x": (lambda r: {**r, "halves": "x"}, 'its halves is "x"'),
    # found by the fuzzer below: the report read how many test missions a list counts
    "halves.test [null]": (lambda r: {**r, "halves": {**r["halves"], "test": [None]}},
                           "its halves.test is [null], not an object"),
    "halves.test.totals 1": (lambda r: {**r, "halves": {**r["halves"], "test": {"totals": 1}}},
                             "its halves.test has totals 1, not an object"),
    "halves.test.totals.missions x": (
        lambda r: {**r, "halves": {**r["halves"], "test": {"totals": {"missions": "x"}}}},
        'its halves.test has totals.missions "x", not a whole number'),
}


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_a_damaged_report_json_is_refused_by_report_and_diff_naming_the_field(scored, tmp_path,
                                                                               name):
    damage, said = DAMAGE[name]
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "report.json").write_text(json.dumps(damage(scored["report"])), encoding="utf-8")
    for args in (("report", bad, "-o", tmp_path / "r.html"), ("diff", scored["A"], bad),
                 ("diff", bad, scored["A"], "--json")):
        line = refused(invoke(*args))
        assert f"{bad / 'report.json'} is not a score report evalkit reads" in line, line
        assert said in line, line
    assert not (tmp_path / "r.html").exists()


@pytest.mark.slow
def test_a_report_json_whose_halves_is_null_is_read_as_one_without_halves(scored, tmp_path):
    """``check_report`` lets ``"halves": null`` through (an absent field), so every reader
    must take it as absent too: it was a TypeError in the HTML report (found by hypothesis)."""
    folder = tmp_path / "no-halves"
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps({**scored["B_report"], "halves": None}),
                                        encoding="utf-8")
    result = invoke("report", folder, "-o", tmp_path / "r.html")
    assert result.exit_code == 0, result.output
    assert "<html" in (tmp_path / "r.html").read_text(encoding="utf-8").lower()


def test_json_nested_past_what_python_parses_is_refused(scored, tmp_path):
    bad = tmp_path / "deep"
    bad.mkdir()
    (bad / "report.json").write_text("[" * 100_000 + "]" * 100_000)
    assert "too deeply" in refused(invoke("report", bad, "-o", tmp_path / "r.html"))
    assert "too deeply" in refused(invoke("diff", scored["A"], bad))


def test_a_run_recording_absurd_tokens_is_refused_when_scored_for_a_report(scored, tmp_path):
    """A stream may carry any finite number; scored here, the report reads it by the same rule."""
    runs = tmp_path / "runs"
    for key in ("t0", "t1", "h0"):
        shutil.copytree(scored["A"] / key, runs / key)
    stream = runs / "t0" / "events.jsonl"
    lines = [json.loads(line) for line in stream.read_text().splitlines()]
    lines[-1]["record"]["usage"]["total_tokens"] = -1e308
    stream.write_text("".join(json.dumps(line) + "\n" for line in lines))
    line = refused(invoke("report", runs, "--suite", scored["suite"].path,
                          "-o", tmp_path / "r.html"))
    assert "kpis.tokens -1e+308" in line and "(key 't0')" in line


# -- 3'. any JSON at all as report.json: exit 0 or 2, never a crash ------------------------

_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-10**400, max_value=10**400)
    | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=3),
    max_leaves=8)

#: Where a damaged report differs from a good one: top level, a verdict, its kpis or reader.
_PLACES = st.sampled_from([
    (), ("verdicts", 0), ("verdicts", 1), ("verdicts", 0, "kpis"), ("verdicts", 2, "kpis"),
    ("verdicts", 1, "needs_reader"), ("halves",), ("halves", "train")])
_FIELDS = st.sampled_from([
    "format", "version", "suite", "split", "halves", "verdicts", "key", "flag", "passed",
    "missing", "reasons", "checks", "needs_reader", "kpis", "source", "category", "infra",
    "must", "must_not", "steps", "tokens", "cost", "elapsed_s", "model_calls", "grounded",
    "human_interventions", "reply_rejected", "outcome", "train", "test", "totals"])


@st.composite
def _damaged(draw, good: dict[str, Any]) -> Any:
    """A good report with a few fields replaced, removed or duplicated; or any JSON at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(_VALUES)
    report = copy.deepcopy(good)
    for _ in range(draw(st.integers(1, 3))):
        holder: Any = report
        for step in draw(_PLACES):
            holder = holder[step] if isinstance(holder, dict) and step in holder or (
                isinstance(holder, list) and isinstance(step, int) and step < len(holder)) \
                else None
        if not isinstance(holder, dict):
            continue
        name, how = draw(_FIELDS), draw(st.sampled_from(["set", "drop", "copy"]))
        if how == "drop":
            holder.pop(name, None)
        elif how == "copy" and holder is report and isinstance(report.get("verdicts"), list) \
                and report["verdicts"]:  # an earlier step may have dropped or replaced them
            report["verdicts"] = [*report["verdicts"], copy.deepcopy(report["verdicts"][0])]
        else:
            holder[name] = draw(_VALUES)
    return report


@pytest.mark.slow  # 60 whole reports rendered: a fuzzer, not the unit tier
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_any_json_as_report_json_gives_exit_0_or_2_never_a_crash(scored, data):
    """Report and diff read the file whatever it holds: they render it, or refuse it in one
    sentence (exit 2) — never a traceback, never "internal error" (exit 3)."""
    damaged = data.draw(_damaged(scored["B_report"]))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "damaged"
        folder.mkdir()
        (folder / "report.json").write_text(json.dumps(damaged), encoding="utf-8")
        for args in (("report", folder, "-o", Path(tmp) / "r.html"),
                     ("diff", scored["A"], folder, "--allow-mismatch"),
                     ("diff", folder, scored["A"], "--allow-mismatch", "--json")):
            result = invoke(*args)
            assert result.exit_code in (0, 2), (args[0], result.output, damaged)
            assert "Traceback" not in result.output and "internal error" not in result.output
            if result.exit_code == 2:
                refused(result)


@pytest.mark.slow
def test_a_run_json_nested_hundreds_deep_still_renders(folders, tmp_path):
    """Provenance is spelled out a few levels deep, then "…": a damaged run.json
    nested 900 deep (still JSON Python reads) rendered into exit 3, RecursionError."""
    run = _copy(folders["run"], tmp_path / "run")
    provenance = json.loads((run / "run.json").read_text())
    provenance["spawn"] = json.loads("[" * 900 + "]" * 900)
    (run / "run.json").write_text(json.dumps(provenance))
    result = invoke("report", run, "-o", tmp_path / "r.html")
    assert result.exit_code == 0, result.output
    assert "…" in (tmp_path / "r.html").read_text()


def test_report_and_diff_refuse_a_suite_that_check_refuses(scored, tmp_path):
    """Every subcommand runs check first: scoring bare runs against a suite that cannot be
    graded gives numbers nobody can compare, so no page is drawn and no diff is made."""
    from tests._stream_builders import mission, write_suite

    bad = write_suite(tmp_path / "bad.yaml", [mission("t0"), mission("t1", flag="teleport")])
    page = tmp_path / "r.html"
    for args in (("report", scored["A"], "--suite", bad, "-o", page),
                 ("diff", scored["A"], scored["B"], "--suite", bad)):
        result = invoke(*args)
        assert result.exit_code == 1 and result.stdout == "", (args, result.output)
        assert "suite 'bad' is not gradeable" in result.stderr
        assert "'teleport' is not in the vocabulary" in result.stderr
        assert "Traceback" not in result.output
    assert not page.exists()
