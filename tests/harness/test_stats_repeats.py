"""The statistics measure reports, against values worked out by hand."""

from __future__ import annotations

import pytest

from evalkit.eval import stats


def test_majority_needs_more_than_half() -> None:
    assert stats.majority([True, True, False]) is True
    assert stats.majority([True, False]) is False  # a tie is not a pass
    assert stats.majority([]) is None


def test_mean_pass_at_k_and_pass_hat_k_average_the_per_mission_estimators() -> None:
    # Mission A: 2 of 3 passed; mission B: 0 of 3.
    counts = [(3, 2), (3, 0)]
    assert stats.mean_pass_at_k(counts, 1) == pytest.approx((2 / 3 + 0) / 2)
    assert stats.mean_pass_at_k(counts, 2) == pytest.approx((1 + 0) / 2)  # C(1,2)=0
    assert stats.mean_pass_hat_k(counts, 2) == pytest.approx((1 / 3 + 0) / 2)
    assert stats.mean_pass_at_k(counts, 4) is None  # more draws than tries
    assert stats.mean_pass_at_k([], 1) is None


def test_the_bootstrap_resamples_missions_and_is_reproducible() -> None:
    per_mission = [[True, True, True], [False, False, False], [True, False, True]]
    first = stats.bootstrap_rate(per_mission)
    assert first == stats.bootstrap_rate(per_mission)
    assert first[0] == 0.0 and first[1] == 1.0  # all-B and all-A resamples both occur
    assert stats.bootstrap_rate([[True] * 3] * 4) == (1.0, 1.0)
    assert stats.bootstrap_rate([]) is None


def test_describe_cell_counts_every_category_and_keeps_infra_out_of_stability() -> None:
    cell = stats.describe_cell({"a": ["pass", "pass", "fail"], "b": ["infra", "infra", "infra"],
                                "c": ["pass", "infra", "pass"], "d": ["missing"] * 3})
    assert cell["counts"] == {"pass": 4, "fail": 1, "missing": 3, "infra": 4}
    assert cell["trials"] == 12 and cell["repeat"] == 3
    assert cell["rate"]["value"] == 0.3333 and cell["rate_without_infra"]["value"] == 0.5
    assert cell["stability"] == {"stable_pass": 1, "stable_fail": 1, "flaky": 1, "infra": 1}
    assert cell["per_mission"]["c"]["stability"] == "stable_pass"


def test_an_empty_cell_has_no_rates() -> None:
    cell = stats.describe_cell({})
    assert cell["rate"] == {"passed": 0, "n": 0, "value": None, "wilson": None}
    assert cell["pass_at_k"] == {} and cell["bootstrap"] is None


def test_compare_pairs_by_mission_majority_and_excludes_infra_only_missions() -> None:
    baseline = {"a": ["pass", "pass", "fail"], "b": ["fail", "fail", "pass"],
                "c": ["infra", "infra", "infra"], "d": ["pass"] * 3}
    row = {"a": ["fail", "fail", "pass"], "b": ["pass", "infra", "pass"],
           "c": ["pass"] * 3, "d": ["pass"] * 3}
    result = stats.compare(baseline, row)
    # a: T -> F (baseline only), b: F -> T (row only), c: excluded, d: concordant.
    assert (result["missions"], result["baseline_only"], result["row_only"]) == (3, 1, 1)
    assert result["excluded"] == ["c"] and result["delta"] == 0.0
    assert result["p_value"] == 1.0 and result["verdict"] == stats.NO_DIFFERENCE
    assert result["pairing"] == stats.PAIRING == "mission-majority"


def test_six_one_sided_discordant_missions_are_a_finding_five_are_not() -> None:
    base = {f"m{i}": ["pass"] for i in range(6)}
    worse = stats.compare(base, {f"m{i}": ["fail"] for i in range(6)})
    assert worse["p_value"] == 0.03125 and worse["verdict"] == "worse"  # 2 / 2**6
    five = stats.compare({k: v for k, v in base.items() if k != "m5"},
                         {f"m{i}": ["fail"] for i in range(5)})
    # Five of five one way: the interval [-100, -80] excludes 0, the exact test does not reject.
    assert five["p_value"] == 0.0625 and five["verdict"] == stats.SUGGESTIVE
    better = stats.compare({f"m{i}": ["fail"] for i in range(6)}, base)
    assert better["verdict"] == "better"
