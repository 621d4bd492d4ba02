"""Model-graded rubrics with a scripted judge: validated at load, asked once per key,
recorded and sealed beside the run, read back by ``score`` (which calls no model),
"not judged" when nothing is recorded, and a changed template or judge is a new key
that ``diff`` puts down to the judge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import evalkit
from evalkit.cli import main
from evalkit.eval import judging
from evalkit.eval.diff import compare
from evalkit.eval.stats import cohen_kappa
from evalkit.judge import judge_runs
from evalkit.report import folders as folder_reader
from evalkit.report.markdown import to_markdown, write_report
from evalkit.store import layout
from evalkit.store.seal import TAMPERED, VERIFIED, Checker, verify_paths
from evalkit.store.signing import local_signer
from tests.judge._lab import canned, lab


def invoke(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


def judged(suite: Path, runs: Path, **options):
    return judge_runs(evalkit.load_suite(suite), runs, signer=local_signer(),
                      checker=Checker.for_scoring([runs]), **options)


def verdicts(suite: Path, runs: Path) -> dict[str, dict]:
    return {v["key"]: v for v in evalkit.score(suite, runs=runs).to_dict()["verdicts"]}


def lines(runs: Path, key: str) -> list[dict]:
    path = runs / key / layout.JUDGE_DIR / layout.JUDGE_FILE
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# -- load time --------------------------------------------------------------------------------


@pytest.mark.parametrize(("judge", "said"), [
    ({"scripted": "fair.yaml", "model": "m"}, "names both a model and a scripted judge"),
    ({"pass": 2}, "setting 'pass' must be 'grade' or a least score in (0, 1], not 2"),
    ({"template": "nope"}, "names template 'nope', which evalkit does not ship"),
    ({"colour": "red"}, "has unknown setting 'colour'"),
])
def test_a_judge_that_cannot_be_used_is_refused_by_check_in_one_sentence(tmp_path, judge, said):
    suite, _ = lab(tmp_path, missions={"j2": {"judge": judge}})
    result = evalkit.check(suite)
    assert not result.ok
    [problem] = [p for p in result.problems if "'judge'" in p]
    assert problem.startswith("mission 'j2' field 'judge'") and said in problem, problem
    assert "\n" not in problem


def test_no_judge_at_all_is_refused_and_a_bare_string_is_no_mapping(tmp_path):
    suite, _ = lab(tmp_path, judge={"pass": "grade"})
    problems = evalkit.check(suite).problems
    assert any("names no judge; give a model" in p for p in problems), problems
    doc = yaml.safe_load(suite.read_text())
    doc["missions"][0]["judge"] = "yes please"
    suite.write_text(yaml.safe_dump(doc))
    with pytest.raises(evalkit.EvalkitError, match="field 'judge'.*must be a mapping of settings"):
        evalkit.load_suite(suite)


def test_the_suite_default_is_laid_under_each_mission_s_own_settings(tmp_path):
    suite, _ = lab(tmp_path, missions={"j2": {"judge": {"pass": 0.5}}})
    loaded = evalkit.load_suite(suite)
    assert dict(loaded.mission("j2").judge) == {"scripted": "fair.yaml", "pass": 0.5}
    assert dict(loaded.mission("j1").judge) == {"scripted": "fair.yaml"}
    assert "judge" not in loaded.mission("plain").settings  # the default configures, never opts in


# -- asking once, reading back ----------------------------------------------------------------


def test_a_missing_judgment_is_not_judged_a_failure_counted_apart(tmp_path):
    suite, runs = lab(tmp_path)
    found = verdicts(suite, runs)
    for key in ("j1", "j2", "j3"):
        assert not found[key]["passed"]
        assert "not_judged" in found[key]["checks"]
        assert any(r.startswith("not judged: no judgment of this answer by scripted/fair")
                   for r in found[key]["reasons"])
    assert found["plain"]["passed"] and "judge" not in found["plain"]
    totals = evalkit.score(suite, runs=runs).to_dict()["halves"]["train"]["totals"]
    assert (totals["missions"], totals["passed"], totals["judged"], totals["not_judged"]) \
        == (4, 1, 0, 3)


def test_judgments_are_asked_once_per_key_and_score_reads_them_back(tmp_path):
    suite, runs = lab(tmp_path)
    first = judged(suite, runs)
    assert sorted(first.asked) == ["j1", "j2", "j3"] and not first.recorded_already
    again = judged(suite, runs)
    assert again.asked == [] and sorted(again.recorded_already) == ["j1", "j2", "j3"]
    [line] = lines(runs, "j3")
    assert line["grade"] == "fail" and line["reasons"] == ["guesses instead of stating the sum"]
    assert line["judge"] == "scripted/fair" and line["prompt"].startswith("rubric@")
    assert [m["role"] for m in line["request"]["messages"]] == ["system", "user"]
    assert "It is probably 9." in line["request"]["messages"][1]["content"]
    found = verdicts(suite, runs)
    assert found["j1"]["passed"] and found["j2"]["passed"]
    assert found["j3"]["reasons"] == [
        "the answer does not match /sum is/",
        "the judge (scripted/fair) failed the answer: guesses instead of stating the sum"]
    assert found["j3"]["checks"] == ["answer_must_match", "judge"]
    assert found["j1"]["judge"]["grade"] == "pass" and found["j1"]["judge"]["machine"] == 1
    totals = evalkit.score(suite, runs=runs).to_dict()["halves"]["train"]["totals"]
    assert (totals["judged"], totals["not_judged"]) == (3, 0)


def test_a_least_score_is_the_pass_rule_when_the_mission_gives_one(tmp_path):
    suite, runs = lab(tmp_path, missions={"j3": {"judge": {"pass": 0.5}}})
    canned(tmp_path / "fair.yaml", [{"grade": "pass", "score": 0.4, "reasons": ["thin"]}])
    judged(suite, runs)
    found = verdicts(suite, runs)
    assert found["j2"]["passed"]  # the judge's own grade decides
    assert found["j3"]["reasons"] == [
        "the judge (scripted/fair) scored the answer 0.4; this mission needs 0.5: thin"]


def test_the_judgments_are_sealed_apart_and_an_edit_is_tampering(tmp_path):
    suite, runs = lab(tmp_path)
    judged(suite, runs)
    folder = runs / "j3" / layout.JUDGE_DIR
    findings = {f.path: f for f in verify_paths([runs], Checker.for_scoring([runs]))}
    assert findings[folder].word == VERIFIED and findings[folder].kind == "judgments"
    path = folder / layout.JUDGE_FILE
    path.write_text(path.read_text().replace('"fail"', '"pass"'), encoding="utf-8")
    findings = {f.path: f for f in verify_paths([runs], Checker.for_scoring([runs]))}
    assert findings[folder].word == TAMPERED
    found = verdicts(suite, runs)["j3"]
    assert found["checks"] == ["tampered"]
    assert found["reasons"][0].startswith("recording altered after it was closed: judge.jsonl")


def test_a_scripted_judge_with_nothing_to_say_records_nothing(tmp_path):
    suite, runs = lab(tmp_path)
    canned(tmp_path / "fair.yaml", [{"mission": "j1", "grade": "pass"}])
    done = judged(suite, runs)
    assert done.asked == ["j1"] and set(done.skipped) == {"j2", "j3"}
    assert not (runs / "j2" / layout.JUDGE_DIR).exists()


def test_the_cli_judges_then_scores_with_the_judge_s_reasons(tmp_path):
    suite, runs = lab(tmp_path)
    done = invoke("judge", runs, "--suite", suite)
    assert done.exit_code == 0, done.output
    assert "judged: asked 3, 0 already recorded" in done.output
    again = invoke("judge", runs, "--suite", suite)
    assert "judged: asked 0, 3 already recorded" in again.output
    scored = invoke("score", "--suite", suite, "--runs", runs)
    assert scored.exit_code == 1
    assert "the judge (scripted/fair) failed the answer: guesses instead" in scored.output
    assert "judged 3, not judged 0" in scored.output
    assert "They agree on 2 of 2 missions that have both." in scored.output


def test_a_scripted_judge_file_that_is_not_there_is_said_by_judge_not_by_score(tmp_path):
    suite, runs = lab(tmp_path, missions={"j2": {"judge": {"scripted": "missing.yaml"}}})
    assert evalkit.check(suite).ok
    done = invoke("judge", runs, "--suite", suite)
    assert done.exit_code == 2
    assert ("mission 'j2' field 'judge' names scripted judge 'missing.yaml', which is "
            "not a file beside the suite") in done.output


def test_bad_cli_input_is_one_sentence_and_exit_2(tmp_path):
    suite, runs = lab(tmp_path)
    both = invoke("judge", runs, "--suite", suite, "--model", "m", "--scripted", "x.yaml")
    assert both.exit_code == 2 and "give --model or --scripted, not both" in both.output
    nowhere = invoke("judge", tmp_path / "nope", "--suite", suite)
    assert nowhere.exit_code == 2 and "is not a folder of runs" in nowhere.output
    no_url = invoke("judge", runs, "--suite", suite, "--model", "m")
    assert no_url.exit_code == 2 and "has no endpoint; give --endpoint URL" in no_url.output


# -- the key: template and judge --------------------------------------------------------------


def test_a_changed_template_is_a_new_key_and_diff_puts_the_flips_down_to_the_judge(
        tmp_path, monkeypatch):
    suite, runs = lab(tmp_path)
    judged(suite, runs)
    write_report(evalkit.score(suite, runs=runs).to_dict(), tmp_path / "before")
    edited = tmp_path / "prompts"
    edited.mkdir()
    (edited / "rubric.j2").write_text(
        judging.template_text("rubric") + "Be strict.\n", encoding="utf-8")
    monkeypatch.setattr(judging, "TEMPLATES", edited)
    write_report(evalkit.score(suite, runs=runs).to_dict(), tmp_path / "after")
    diff = compare(folder_reader.load(tmp_path / "before").side(),
                   folder_reader.load(tmp_path / "after").side())
    flips = {f.key: f for f in diff.flips}
    assert set(flips) == {"j1", "j2"}  # j3 failed on both sides
    for flip in flips.values():
        assert flip.direction == "pass→fail" and flip.checks == ["not_judged", "judge"]
        assert flip.judge["changed"] == ["prompt"]
        assert flip.judge["a"]["grade"] == "pass" and flip.judge["b"]["grade"] is None
    # Judged again under the new template: a second judgment per answer, the first kept.
    assert sorted(judged(suite, runs).asked) == ["j1", "j2", "j3"]
    assert len(lines(runs, "j1")) == 2
    assert verdicts(suite, runs)["j1"]["passed"]


def test_another_judge_s_flips_are_the_judge_s_and_both_judges_are_compared(tmp_path):
    suite, runs = lab(tmp_path)
    judged(suite, runs)
    write_report(evalkit.score(suite, runs=runs).to_dict(), tmp_path / "fair")
    canned(tmp_path / "harsh.yaml", [{"grade": "fail", "reasons": ["too short"]}])
    judged(suite, runs, override={"scripted": str(tmp_path / "harsh.yaml")})
    # The suite's judge still decides; the other judge's grades ride beside it.
    found = verdicts(suite, runs)
    assert found["j1"]["passed"]
    assert found["j1"]["judge"]["others"] == [
        {"model": "scripted/harsh", "prompt": found["j1"]["judge"]["prompt"], "grade": "fail"}]
    text = to_markdown(evalkit.score(suite, runs=runs).to_dict())
    # fair: pass, pass, fail; harsh: fail x3 -> agree 1 of 3, kappa 0 (p_o = p_e = 1/3).
    prompt = found["j1"]["judge"]["prompt"]
    assert (f"| scripted/fair ({prompt}) | scripted/harsh ({prompt}) | 3 | 1 | 0 |"
            in text), text
    doc = yaml.safe_load(suite.read_text())
    doc["judge"] = {"scripted": "harsh.yaml"}
    suite.write_text(yaml.safe_dump(doc, sort_keys=False))
    write_report(evalkit.score(suite, runs=runs).to_dict(), tmp_path / "harsh")
    diff = compare(folder_reader.load(tmp_path / "fair").side(),
                   folder_reader.load(tmp_path / "harsh").side())
    flips = {f.key: f for f in diff.flips}
    assert set(flips) == {"j1", "j2"}
    assert flips["j1"].checks == ["judge"] and flips["j1"].judge["changed"] == ["model"]
    text = invoke("diff", tmp_path / "fair", tmp_path / "harsh").output
    assert "the judge changed (model)" in text


def test_cohen_s_kappa_against_a_hand_computed_value():
    # 10 answers: both pass 4, both fail 3, A pass/B fail 2, A fail/B pass 1.
    # p_o = 7/10; p_e = 0.6*0.5 + 0.4*0.5 = 0.5; kappa = (0.7 - 0.5) / 0.5 = 0.4.
    pairs = [("pass", "pass")] * 4 + [("fail", "fail")] * 3 + [("pass", "fail")] * 2 \
        + [("fail", "pass")]
    assert cohen_kappa(pairs) == 0.4
    assert cohen_kappa([]) is None
    assert cohen_kappa([("pass", "pass")] * 3) is None  # chance alone agrees fully
    assert cohen_kappa([("pass", "fail"), ("fail", "pass")]) == -1.0


@pytest.mark.slow
def test_score_reaches_neither_the_judge_s_caller_nor_the_runtime():
    from tests.test_layering import _command_module, _reach

    reached = _reach(["evalkit", "evalkit.cli", _command_module("score")])
    assert "evalkit.eval.checks.judge" in reached or "evalkit.eval.judging" in reached
    assert [m for m in reached if m.startswith(("evalkit.judge", "evalkit.runtime"))] == []


@pytest.mark.slow
def test_the_html_report_shows_the_judge_beside_the_machine_checks_and_other_judges(tmp_path):
    suite, runs = lab(tmp_path)
    judged(suite, runs)
    canned(tmp_path / "harsh.yaml", [{"grade": "fail", "reasons": ["too short"]}])
    judged(suite, runs, override={"scripted": str(tmp_path / "harsh.yaml")})
    scored = invoke("score", "--suite", suite, "--runs", runs, "--report", tmp_path / "scored")
    assert scored.exit_code == 1, scored.output
    page = tmp_path / "report.html"
    done = invoke("report", tmp_path / "scored", "-o", page, "--suite", suite)
    assert done.exit_code == 0, done.output
    html = page.read_text(encoding="utf-8")
    assert "<h2>The judge</h2>" in html
    assert "agree on 2 of 2 graded missions that have both" in html
    assert "<td>scripted/harsh (" in html and "<td>0</td>" in html  # kappa 0, as in report.md


def test_a_dataset_grades_judged_missions_as_the_runs_folder_does(tmp_path):
    suite, runs = lab(tmp_path)
    judged(suite, runs)

    def seen(report) -> dict:
        return {v["key"]: (v["passed"], v["reasons"], v["checks"], v.get("judge"))
                for v in report.to_dict()["verdicts"]}

    evalkit.ingest(runs, tmp_path / "ds")
    assert seen(evalkit.score(suite, dataset=tmp_path / "ds")) == \
        seen(evalkit.score(suite, runs=runs))
    path = runs / "j1" / layout.JUDGE_DIR / layout.JUDGE_FILE
    path.write_text(path.read_text(encoding="utf-8").replace('"pass"', '"fail"'),
                    encoding="utf-8")
    evalkit.ingest(runs, tmp_path / "ds2")
    found = seen(evalkit.score(suite, dataset=tmp_path / "ds2"))
    assert found["j1"][2] == ["tampered"] and found["j2"][0]
