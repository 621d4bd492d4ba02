"""An interval that excludes 0 beside a test that does not reject: the reader is told why.

Five missions the baseline passed and the row failed, none the other way, over
eight: the Wald interval lies wholly below 0 while the exact McNemar p is
2 · 2⁻⁵ = 0.0625. Calling that "no detectable difference" beside
``-62 pts [-100, -16]`` reads as a contradiction; each report says it is
suggestive, not significant, and why, in one sentence.
"""

from __future__ import annotations

import json
import math
import re

import pytest

from evalkit.eval import stats
from evalkit.eval.measure import to_markdown
from evalkit.report import folders as folder_reader
from evalkit.report.html import report_html
from tests.report._folders import make_suite, measure_folder

T, F = True, False
BASE = [T] * 8
ROW = [F] * 5 + [T] * 3


def test_five_one_way_discordant_of_eight_is_suggestive_with_the_hand_computed_numbers() -> None:
    found = stats.paired(BASE, ROW)
    assert (found.b, found.c, found.delta) == (5, 0, -0.625)
    assert found.p_value == 0.0625  # 2 * C(5,0) / 2**5
    half = stats.Z95 * math.sqrt(5 - 25 / 8) / 8 + 1 / 8
    assert found.interval == pytest.approx((-1.0, -0.625 + half))
    assert found.interval[1] == pytest.approx(-0.1645, abs=1e-4)
    assert found.verdict == "suggestive, not significant"


@pytest.mark.parametrize(("base", "row", "verdict"), [
    ([T] * 6 + [F] * 2, [F] * 6 + [F] * 2, "worse"),       # 6 one way: p = 0.031
    ([T, T, F, F], [F, T, T, F], "no detectable difference"),  # interval holds 0
    ([T] * 8, [F] + [T] * 7, "no detectable difference"),  # one discordant, p = 1
])
def test_other_comparisons_keep_their_verdicts(base, row, verdict) -> None:
    assert stats.paired(base, row).verdict == verdict


def test_a_verdict_written_before_the_word_existed_is_read_as_suggestive() -> None:
    assert stats.settle("no detectable difference", [-1.0, -0.1645]) == stats.SUGGESTIVE
    assert stats.settle("no detectable difference", [-0.5, 0.2]) == stats.NO_DIFFERENCE
    assert stats.settle("worse", [-1.0, -0.5]) == "worse"
    assert stats.disagreement(stats.NO_DIFFERENCE, 0.5) is None


def _matrix(vs: dict) -> dict:
    cell = stats.describe_cell({f"t{i}": ["pass"] for i in range(8)})
    row = stats.describe_cell({f"t{i}": ["fail" if i < 5 else "pass"] for i in range(8)})
    return {"provenance": {"suite": "s", "repeat": 1, "split": "all", "date": "d"},
            "rows": [{"name": "direct", "question": "q", "status": "ran"},
                     {"name": "swarm", "question": "q", "status": "ran"}],
            "statistics": {"direct": {"train": {**cell, "vs_baseline": None}},
                           "swarm": {"train": {**row, "vs_baseline": vs}}}}


def _one_sentence(text: str) -> str:
    found = re.findall(r"The 95% interval excludes 0 but the exact McNemar test does not "
                       r"reject \(p = 0\.0625[^.]*\.[^.]*\.", text)
    assert len(found) == 1, text
    return found[0]


def test_the_markdown_and_console_table_say_suggestive_and_why() -> None:
    vs = stats.compare({f"t{i}": ["pass"] for i in range(8)},
                       {f"t{i}": ["fail" if i < 5 else "pass"] for i in range(8)})
    text = to_markdown(_matrix(vs))
    swarm = next(line for line in text.splitlines()
                 if line.startswith("| swarm |") and "pts" in line)
    assert "-62 pts [-100, -16], p=0.0625" in swarm
    assert swarm.rstrip().endswith("| suggestive, not significant |")
    assert "no detectable difference" not in swarm
    said = next(line for line in text.splitlines() if line.startswith("- **swarm**: "))
    assert said == "- **swarm**: " + _one_sentence(text)


def test_an_older_matrix_saying_no_detectable_difference_is_shown_suggestive() -> None:
    vs = stats.compare({f"t{i}": ["pass"] for i in range(8)},
                       {f"t{i}": ["fail" if i < 5 else "pass"] for i in range(8)})
    vs["verdict"] = "no detectable difference"
    text = to_markdown(_matrix(vs))
    assert "| suggestive, not significant |" in text
    _one_sentence(text)


@pytest.mark.slow
def test_the_html_report_says_suggestive_and_why_beside_the_paired_table(tmp_path) -> None:
    suite = make_suite(tmp_path / "suite.yaml", train=8, test=3)
    folder = measure_folder(tmp_path / "m", suite, {
        "direct": lambda key, rep: "pass",
        "swarm": lambda key, rep: "fail" if key in {f"t{i}" for i in range(5)} else "pass"},
        repeat=1)
    vs = json.loads((folder / "matrix.json").read_text())["statistics"]["swarm"]["train"][
        "vs_baseline"]
    assert (vs["baseline_only"], vs["row_only"], vs["p_value"]) == (5, 0, 0.0625)
    page = report_html(folder_reader.load(folder))
    table = page[page.index('id="paired-train"'):page.index("</table>", page.index(
        'id="paired-train"'))]
    assert '<span class="suggestive">suggestive, not significant</span>' in table
    assert "no detectable difference" not in table
    note = page[page.index('class="note suggestive-why"'):]
    assert note.index("swarm") < note.index("</p>")
    _one_sentence(note[:note.index("</p>")])
