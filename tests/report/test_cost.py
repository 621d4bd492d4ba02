"""Cost in the comparison: the report's rows carry a cost interval, pairs a cost delta, and a
row that is better but dearer says both in words."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.eval.suite import load_suite
from evalkit.report import folders, html
from evalkit.report.kpis import halves
from tests._stream_builders import write_stream
from tests.report._folders import make_suite, run_records, score_folder

#: Per mission and row: the cost each run recorded (the row costs 0.002 more everywhere).
COST = {"direct": 0.001, "grounding": 0.003}


def _measure(folder: Path, suite_path: Path, repeat: int = 2) -> Path:
    suite = load_suite(suite_path)
    rows = []
    for name in ("direct", "grounding"):
        reps = []
        for n in range(1, repeat + 1):
            rep = folder / name / f"rep{n}"
            for i, m in enumerate(suite.missions):
                records = run_records("pass" if name == "grounding" else "fail")
                records[-1]["usage"]["cost"] = COST[name] + i * 0.0001
                write_stream(rep / m.key / "events.jsonl", records)
            score_folder(rep, suite)
            reps.append(f"{name}/rep{n}")
        rows.append({"name": name, "question": f"is {name} better?", "delta": {},
                     "status": "ran", "reps": reps})
    matrix = {"format": "evalkit-matrix", "version": 1,
              "provenance": {"suite": suite.name, "suite_path": str(suite_path),
                             "repeat": repeat, "split": "all"},
              "baseline": "direct", "rows": rows, "statistics": {}}
    (folder / "matrix.json").write_text(json.dumps(matrix), encoding="utf-8")
    return folder


@pytest.mark.slow
def test_rows_carry_a_cost_interval_and_a_dearer_better_row_says_both(tmp_path: Path) -> None:
    suite_path = make_suite(tmp_path / "suite.yaml", train=8, test=3)
    folder = _measure(tmp_path / "m", suite_path)
    scoring = folders.load(folder, load_suite(suite_path))
    train = next(h for h in halves(scoring) if h.name == "train")
    by_name = {r.name: r for r in train.kpis}
    # mean per mission of 0.001, 0.0011, ... 0.0018 (each the same over both repeats)
    assert round(by_name["direct"].mean_cost, 8) == 0.00135
    low, high = by_name["direct"].cost_interval
    assert 0.001 <= low <= 0.00135 <= high <= 0.0018
    [pair] = train.paired
    assert pair.verdict == "better"
    assert round(pair.cost_delta, 8) == 0.002 and pair.cost_interval == (0.002, 0.002)
    assert pair.quality_and_cost == ("better on quality, and costs more: +0.002 per mission "
                                     "against the baseline.")
    page = html.report_html(scoring)
    assert "better on quality, and costs more" in page
    assert "95% bootstrap over missions" in page  # the chart's cost axis says its interval
