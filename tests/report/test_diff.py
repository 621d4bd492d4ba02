"""`evalkit diff`: flips run by run, attributed to checks, grounding tokens, refusals, exit codes."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.errors import EvalkitError
from evalkit.eval.diff import FIX, REGRESSION, Side, check_of, compare
from evalkit.eval.suite import Mission
from evalkit.eval.summary import RunSummary
from evalkit.eval.verdict import judge
from evalkit.report import folders as folder_reader
from evalkit.report.html import diff_html
from tests.report._folders import make_suite, run_folder, write_runs


def invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def regrade(folders, tmp_path):
    """A regrade of the run folder under a stricter grammar: bare runs, no report.json.

    t0 and t2 are no longer grounded (pass→fail); t1 now calls the right tool and
    h2, never run before, now passes (fail→pass); h0 now fails on tools (pass→fail).
    """
    from evalkit.eval.suite import load_suite

    shapes = {"t0": "ungrounded", "t2": "ungrounded", "h0": "fail"}
    return write_runs(tmp_path / "regrade", load_suite(folders["suite"]),
                      lambda key: shapes.get(key, "pass"))


# -- attribution ------------------------------------------------------------------------


def _mission(**machine) -> Mission:
    return Mission(key="k", flag="chaining", prompt="p", **machine)


def _summary(**fields) -> RunSummary:
    base = dict(records=5, started=True, finished=True, outcome="answered", answered=True,
                answer="The sum is 5.", tools_called=("mcp.add",))
    return RunSummary(**{**base, **fields})


def test_every_reason_the_verdict_writes_is_attributed_to_a_named_check():
    cases = [
        (_mission(), None, "missing"),
        (_mission(), _summary(records=0), "empty_stream"),
        (_mission(), _summary(nonconforming=1, problems=("line 1: bad",)), "contract"),
        (_mission(), _summary(finished=False), "unfinished"),
        (_mission(expects_tools=("mcp.multiply",)), _summary(), "expects_tools"),
        (_mission(forbids_tools=("mcp.add",)), _summary(), "forbids_tools"),
        (_mission(forbids_tools=("mcp.x",)), _summary(gate_tools=("mcp.x",)), "forbids_tools"),
        (_mission(expects_outcome="answered"), _summary(outcome="incomplete"), "expects_outcome"),
        (_mission(expects_grounded=True), _summary(), "expects_grounded"),
        (_mission(expects_grounded=True), _summary(grounding_verdict=True, grounded=False),
         "expects_grounded"),
        (_mission(answer_must_match=("x",)), _summary(answered=False, answer=None), "answer"),
        (_mission(answer_must_match=("(?i)product",)), _summary(), "answer_must_match"),
        (_mission(answer_must_not_match=("sum",)), _summary(), "answer_must_not_match"),
        (_mission(answer_must_match=("(",)), _summary(), "answer_pattern"),
        (_mission(max_reply_rejected=0), _summary(reply_rejected=2), "max_reply_rejected"),
        (_mission(must_not_stage=True), _summary(staged=True), "must_not_stage"),
    ]
    for mission, summary, check in cases:
        verdict = judge(mission, summary, missing="not run" if summary is None else None)
        assert verdict.reasons, (mission, summary)
        assert [check_of(r) for r in verdict.reasons] == [check] * len(verdict.reasons)
    assert check_of("no stream: no events.jsonl in t1 or two levels below it") == "missing"
    assert check_of("something evalkit never says") == "other"


# -- a recording and its regrade -----------------------------------------------------------


def test_a_regrade_diffed_against_its_recording_lists_each_flip_with_its_checks(
        folders, regrade):
    from evalkit.eval.suite import load_suite

    suite = load_suite(folders["suite"])
    diff = compare(folder_reader.load(folders["run"]).side(),
                   folder_reader.load(regrade, suite).side())
    flips = {(f.key, f.direction): f for f in diff.flips}
    assert set(flips) == {("t0", REGRESSION), ("t2", REGRESSION), ("h0", REGRESSION),
                          ("t1", FIX), ("h2", FIX)}
    t0 = flips[("t0", REGRESSION)]
    assert t0.checks == ["expects_outcome", "expects_grounded"]
    assert t0.added == ["ended 'answered_with_caveat'; this mission wants answered",
                        "grounding says grounded=False; this mission wants True"]
    assert t0.removed == []
    # The grounding flip names its tokens and checks, read from both streams.
    assert t0.grounding["tokens"] == {"unsupported": {"gained": ["4,218,000"], "lost": []}}
    assert t0.grounding["checks"] == [{"check": "figures", "a": "supported", "b": "unsupported"}]
    assert t0.grounding["a"]["grounded"] is True and t0.grounding["b"]["grounded"] is False
    t1 = flips[("t1", FIX)]
    assert t1.checks == ["expects_tools"] and t1.grounding is None
    assert t1.removed == ["never called mcp.add; it called ['mcp.echo']"]
    assert flips[("h2", FIX)].checks == ["missing"]
    assert flips[("h0", REGRESSION)].checks == ["expects_tools"]
    # Counts per half, never blended.
    assert diff.counts["train"] == {"compared": 5, REGRESSION: 2, FIX: 1, "unchanged": 2,
                                    "reasons_changed": 0}
    assert diff.counts["test"] == {"compared": 3, REGRESSION: 1, FIX: 1, "unchanged": 1,
                                   "reasons_changed": 0}
    assert diff.exit_code("never") == 0
    assert diff.exit_code("regressions") == 1
    assert diff.exit_code("any") == 1


@pytest.mark.slow
def test_the_cli_diff_scores_a_bare_folder_with_suite_and_sets_the_exit_code(
        folders, regrade, tmp_path):
    args = ("diff", folders["run"], regrade, "--suite", folders["suite"])
    plain = invoke(*args)
    assert plain.exit_code == 0, plain.output
    assert "train: 5 runs compared, 2 pass→fail, 1 fail→pass" in plain.stdout
    assert "grounding unsupported: now 4,218,000" in plain.stdout
    assert invoke(*args, "--fail-on", "regressions").exit_code == 1
    assert invoke(*args, "--fail-on", "any").exit_code == 1
    out = tmp_path / "diff.html"
    as_json = invoke(*args, "--json", "--html", out)
    data = json.loads(as_json.stdout)
    assert data["format"] == "evalkit-diff" and data["version"] == 1
    assert data["counts"]["test"][REGRESSION] == 1
    assert {f["key"] for f in data["flips"]} == {"t0", "t1", "t2", "h0", "h2"}
    page = out.read_text(encoding="utf-8")
    assert "Flips, train half (3)" in page and "4,218,000" in page and "expects_grounded" in page


def test_only_fixes_pass_fail_on_regressions_but_not_fail_on_any(folders, tmp_path):
    from evalkit.eval.suite import load_suite

    better = write_runs(tmp_path / "better", load_suite(folders["suite"]), lambda key: "pass")
    args = ("diff", folders["run"], better, "--suite", folders["suite"])
    assert invoke(*args, "--fail-on", "regressions").exit_code == 0
    assert invoke(*args, "--fail-on", "any").exit_code == 1
    same = invoke("diff", folders["run"], folders["run"], "--fail-on", "any")
    assert same.exit_code == 0 and "no verdict flipped" in same.stdout


def test_a_folder_without_a_report_needs_the_suite(folders, regrade):
    result = invoke("diff", folders["run"], regrade)
    assert result.exit_code == 2
    assert "has no report.json or matrix.json; give --suite" in result.stderr


# -- refusals ---------------------------------------------------------------------------


def test_scorings_of_different_suites_are_refused_in_one_sentence_unless_allowed(
        folders, tmp_path):
    other_suite = make_suite(tmp_path / "other.yaml")
    other = run_folder(tmp_path / "other", other_suite, lambda key: "pass")
    refused = invoke("diff", folders["run"], other)
    assert refused.exit_code == 2
    message = refused.stderr.strip()
    assert message.count("\n") == 0
    assert "A scores suite 'suite' and B scores suite 'other'" in message
    assert "--allow-mismatch" in message
    allowed = invoke("diff", folders["run"], other, "--allow-mismatch")
    assert allowed.exit_code == 0
    assert "note: A scores suite 'suite'" in allowed.stdout


def test_different_mission_sets_are_refused_naming_the_missions(folders, tmp_path):
    fewer = tmp_path / "fewer"
    shutil.copytree(folders["run"], fewer)
    report = json.loads((fewer / "report.json").read_text())
    report["verdicts"] = [v for v in report["verdicts"] if v["key"] not in ("t3", "h1")]
    (fewer / "report.json").write_text(json.dumps(report))
    with pytest.raises(EvalkitError) as refused:
        compare(folder_reader.load(folders["run"]).side(), folder_reader.load(fewer).side())
    assert "the mission sets differ: 2 only in A (h1, t3)" in refused.value.message
    diff = compare(folder_reader.load(folders["run"]).side(), folder_reader.load(fewer).side(),
                   allow_mismatch=True)
    assert any("2 runs are on one side only" in note for note in diff.mismatch)
    assert diff.counts["train"]["compared"] + diff.counts["test"]["compared"] == 6


def test_a_lone_scoring_and_a_measure_share_no_configuration(folders):
    with pytest.raises(EvalkitError, match="share no configuration and repeat"):
        compare(folder_reader.load(folders["run"]).side(),
                folder_reader.load(folders["measure"]).side())


# -- measures ---------------------------------------------------------------------------


def test_measures_are_compared_per_configuration_and_repeat(folders, tmp_path):
    changed = tmp_path / "measure-b"
    shutil.copytree(folders["measure"], changed)
    rep = changed / "swarm" / "rep2" / "report.json"
    report = json.loads(rep.read_text())
    for v in report["verdicts"]:
        if v["key"] == "t4":
            v.update(passed=False, reasons=["the run was STAGED: a plan rode step_started"])
    rep.write_text(json.dumps(report))
    diff = compare(folder_reader.load(folders["measure"]).side(),
                   folder_reader.load(changed).side())
    assert [(f.configuration, f.rep, f.key, f.direction, f.checks) for f in diff.flips] == [
        ("swarm", "rep2", "t4", REGRESSION, ["must_not_stage"])]
    assert diff.counts["train"]["compared"] == 3 * 3 * 5
    page = diff_html(diff)
    assert "swarm" in page and "rep2" in page and "must_not_stage" in page


def test_a_side_without_streams_still_diffs_without_tokens():
    a = Side("a", "s", {("", "", "k"): {"key": "k", "flag": "f", "split": "test", "passed": True,
                                        "reasons": [], "kpis": {"grounded": True}}})
    b = Side("b", "s", {("", "", "k"): {"key": "k", "flag": "f", "split": "test", "passed": False,
                                        "reasons": ["grounding says grounded=False; this "
                                                    "mission wants True"],
                                        "kpis": {"grounded": False}}})
    diff = compare(a, b)
    assert diff.flips[0].grounding == {"a": None, "b": None, "tokens": {}, "checks": []}
    assert diff.counts["test"][REGRESSION] == 1 and diff.counts["train"]["compared"] == 0


def test_an_infrastructure_error_is_attributed_to_infra_not_to_a_check():
    ok = {"key": "k", "flag": "f", "split": "train", "passed": True, "reasons": [], "kpis": {},
          "category": "pass", "infra": None}
    down = {"key": "k", "flag": "f", "split": "train", "passed": False, "kpis": {},
            "reasons": ["the stream stopped without mission_finished: the run was cut off, "
                        "not closed"], "category": "infra", "infra": "timeout: killed after 60 s"}
    diff = compare(Side("a", "s", {("", "", "k"): ok}), Side("b", "s", {("", "", "k"): down}))
    assert diff.flips[0].checks == ["unfinished", "infra"]
    assert diff.flips[0].added[-1] == "infrastructure error: timeout: killed after 60 s"
