"""`measure --pricing`: each row's mean cost per mission with its bootstrap interval and the
paired cost delta against the baseline, from the usage the stub suite's scripted agents declare."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.pricing import EXAMPLE
from tests.harness.conftest import invoke, read_json

STUB = Path(__file__).resolve().parents[2] / "suites" / "stub"


@pytest.mark.slow
def test_measure_reports_cost_per_row_with_an_interval_and_the_paired_delta(
        tmp_path: Path) -> None:
    out = tmp_path / "matrix"
    result = invoke("measure", "--suite", STUB, "--out", out, "--config", "grounding",
                    "--split", "test", "--pricing", EXAMPLE, "--quiet")
    assert result.exit_code == 0, result.output
    matrix = read_json(out / "matrix.json")
    assert matrix["provenance"]["spending"]["pricing"] == str(EXAMPLE)
    cells = matrix["statistics"]
    for row in ("direct", "grounding"):
        cost = cells[row]["test"]["cost"]
        assert cost["missions"] == 4 and cost["unknown"] == 0 and cost["mean"] > 0
        low, high = cost["bootstrap"]
        assert low <= cost["mean"] <= high
    versus = cells["grounding"]["test"]["cost_vs_baseline"]
    assert versus["missions"] == 4 and versus["pairing"] == "mission-mean"
    assert versus["interval"][0] <= versus["delta"] <= versus["interval"][1]
    assert cells["direct"]["test"]["cost_vs_baseline"] is None
    argv = read_json(out / "direct" / "rep1" / next(
        p.name for p in (out / "direct" / "rep1").iterdir() if p.is_dir()) / "command.json")["argv"]
    assert "--pricing" in argv  # the built-in agent priced its own calls too
    text = (out / "matrix.md").read_text()
    assert "mean cost per mission [bootstrap 95%]" in text
