"""The shipped stub suite's judged missions, graded offline from the committed judgments."""

from __future__ import annotations

from pathlib import Path

import pytest

import evalkit
from evalkit.store.seal import TAMPERED, Checker, verify_paths

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "suites" / "stub"
RECORDED = ROOT / "recordings" / "stub"
JUDGED = ("chaining", "absence", "synthesis")

pytestmark = pytest.mark.skipif(not (RECORDED / "good").is_dir(), reason="no recorded corpus")


def _verdicts(variant: str) -> tuple[dict[str, dict], dict]:
    report = evalkit.score(SUITE, runs=RECORDED / variant).to_dict()
    return {v["key"]: v for v in report["verdicts"]}, report["halves"]


def test_the_good_answers_are_judged_and_pass_with_every_judgment_recorded():
    found, halves = _verdicts("good")
    for key in JUDGED:
        assert found[key]["passed"], found[key]["reasons"]
        assert found[key]["judge"]["model"] == "scripted/stub"
        assert found[key]["judge"]["grade"] == "pass"
    assert "judge" not in found["orientation"]
    assert (halves["train"]["totals"]["judged"], halves["train"]["totals"]["not_judged"]) == (1, 0)
    assert (halves["test"]["totals"]["judged"], halves["test"]["totals"]["not_judged"]) == (2, 0)


def test_the_bad_answers_fail_with_the_judge_s_reasons_too():
    found, _ = _verdicts("bad")
    said = {key: [r for r, c in zip(found[key]["reasons"], found[key]["checks"], strict=True)
                  if c == "judge"] for key in JUDGED}
    assert said == {
        "chaining": ["the judge (scripted/stub) failed the answer: gives a rounded revenue "
                     "rather than the figure the tools computed"],
        "absence": ["the judge (scripted/stub) failed the answer: states a number of returns "
                    "that no source gives"],
        "synthesis": ["the judge (scripted/stub) scored the answer 0.5; this mission needs "
                      "0.75: leaves out revenue"],
    }


def test_the_committed_judgments_are_sealed_with_the_corpus_key():
    findings = verify_paths([RECORDED], Checker.for_scoring([RECORDED]))
    judged = [f for f in findings if f.kind == "judgments"]
    assert len(judged) == 2 * len(JUDGED)
    assert not [f for f in findings if f.word == TAMPERED]
