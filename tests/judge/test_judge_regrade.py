"""A regrade carries a recording's judgments beside its replay: filed under the answer's
digest, they grade the replay with no model when it gave the same answer."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import evalkit
from evalkit.runtime.regrade import regrade
from evalkit.store import layout

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "suites" / "stub"
RECORDED = ROOT / "recordings"

pytestmark = pytest.mark.skipif(not (RECORDED / "stub" / "good").is_dir(),
                                reason="no recorded corpus")


def test_a_regraded_judged_mission_is_graded_by_the_recorded_judgment(tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(RECORDED / "stub" / "good" / "chaining", source / "chaining")
    shutil.copy(RECORDED / "evalkit.pub", source / "evalkit.pub")  # the corpus key, trusted
    out = tmp_path / "out"
    report = regrade(source, out, skills=[str(SUITE / "SKILL.md")], jobs=1)
    assert [row["error"] for row in report["runs"]] == [None]
    [replay] = (out / "chaining" / "runs").iterdir()
    assert (replay / layout.JUDGE_DIR / layout.JUDGE_FILE).read_bytes() == \
        (source / "chaining" / layout.JUDGE_DIR / layout.JUDGE_FILE).read_bytes()
    scored = evalkit.score(SUITE, mapping={"chaining": out / "chaining"}, split="train")
    [verdict] = [v for v in scored.to_dict()["verdicts"] if v["key"] == "chaining"]
    assert verdict["passed"], verdict["reasons"]
    assert verdict["judge"]["grade"] == "pass"
