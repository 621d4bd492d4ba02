"""The statistics that decide what is a finding and what is noise.

Small samples are the normal case here (tens of missions, a few repeats), so
every estimate carries an interval and every comparison is paired by
mission: two configurations that differ on one mission at repeat 1 are "no
detectable difference", never "better". Standard library only: these are a
few lines of arithmetic each, and a reader can check them by hand.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

Z95 = 1.959963984540054


def wilson(passed: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson score interval for a pass rate; None when there is nothing to rate."""
    if n <= 0:
        return None
    p = passed / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts.

    ``b`` = missions the baseline passed and the row failed, ``c`` = the
    reverse. Under no difference each discordant mission is a fair coin.
    """
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """Chance that at least one of k draws (without replacement) from n tries passes."""
    if k > n or n <= 0:
        return None
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float | None:
    """Chance that all of k draws (without replacement) from n tries pass (pass^k)."""
    if k > n or n <= 0:
        return None
    return math.comb(c, k) / math.comb(n, k)


def stability(outcomes: Sequence[bool]) -> str:
    """One mission over repeats: ``stable_pass``, ``stable_fail`` or ``flaky``."""
    if not outcomes:
        return "missing"
    if all(outcomes):
        return "stable_pass"
    if not any(outcomes):
        return "stable_fail"
    return "flaky"


@dataclass(frozen=True)
class Paired:
    """A row compared with the baseline, mission by mission."""

    missions: int
    #: Baseline passed, row failed / baseline failed, row passed.
    b: int
    c: int
    delta: float
    interval: tuple[float, float]
    p_value: float
    verdict: str

    def as_dict(self) -> dict[str, object]:
        return {"missions": self.missions, "baseline_only": self.b, "row_only": self.c,
                "delta": round(self.delta, 4),
                "interval": [round(self.interval[0], 4), round(self.interval[1], 4)],
                "p_value": round(self.p_value, 6), "verdict": self.verdict}


def paired(baseline: Sequence[bool], row: Sequence[bool], alpha: float = 0.05) -> Paired:
    """Paired comparison of two pass/fail vectors over the same missions.

    The delta is the row's pass rate minus the baseline's; its 95% interval
    is the Wald interval for a difference of paired proportions with a
    continuity correction, clipped to [-1, 1]; significance is the exact
    McNemar test on the discordant missions. The verdict is "better" or
    "worse" only when that test rejects at ``alpha``.
    """
    if len(baseline) != len(row):
        raise ValueError("a paired comparison needs the same missions on both sides")
    n = len(row)
    b = sum(1 for x, y in zip(baseline, row, strict=True) if x and not y)
    c = sum(1 for x, y in zip(baseline, row, strict=True) if y and not x)
    if n == 0:
        return Paired(0, 0, 0, 0.0, (0.0, 0.0), 1.0, "no detectable difference")
    delta = (c - b) / n
    spread = math.sqrt(max((b + c) - (c - b) ** 2 / n, 0.0)) / n
    half = Z95 * spread + 1 / n
    p = mcnemar_exact(b, c)
    if p < alpha:
        verdict = "better" if c > b else "worse"
    else:
        verdict = "no detectable difference"
    return Paired(n, b, c, delta, (max(-1.0, delta - half), min(1.0, delta + half)), p, verdict)
