"""The statistics that decide what is a finding and what is noise.

Small samples are the normal case here (tens of missions, a few repeats), so
every estimate carries an interval and every comparison is paired by
mission: two configurations that differ on one mission at repeat 1 are "no
detectable difference", never "better". Standard library only: these are a
few lines of arithmetic each, and a reader can check them by hand.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Z95 = 1.959963984540054

#: The verdict of a comparison whose test does not reject and whose interval holds 0.
NO_DIFFERENCE = "no detectable difference"
#: The verdict when the interval excludes 0 and the exact test still does not reject.
SUGGESTIVE = "suggestive, not significant"


def wilson(passed: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson score interval for a pass rate; None when there is nothing to rate."""
    if n <= 0:
        return None
    p = passed / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def cohen_kappa(pairs: Sequence[tuple[str, str]]) -> float | None:
    """Cohen's kappa of two raters' labels on the same items (``pairs``: (a, b) per item):
    how far their agreement goes beyond what their own label rates give by chance,
    ``(p_o - p_e) / (1 - p_e)``. None when there is no item, or when chance alone
    gives full agreement (both raters gave one and the same label throughout)."""
    n = len(pairs)
    if not n:
        return None
    observed = sum(1 for a, b in pairs if a == b) / n
    labels = {label for pair in pairs for label in pair}
    expected = sum((sum(1 for a, _ in pairs if a == label) / n) *
                   (sum(1 for _, b in pairs if b == label) / n) for label in labels)
    if expected >= 1:
        return None
    return round((observed - expected) / (1 - expected), 4)


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
    "worse" only when that test rejects at ``alpha``; when it does not but the
    interval excludes 0 it is "suggestive, not significant", since "no detectable
    difference" beside such an interval reads as a contradiction.
    """
    if len(baseline) != len(row):
        raise ValueError("a paired comparison needs the same missions on both sides")
    n = len(row)
    b = sum(1 for x, y in zip(baseline, row, strict=True) if x and not y)
    c = sum(1 for x, y in zip(baseline, row, strict=True) if y and not x)
    if n == 0:
        return Paired(0, 0, 0, 0.0, (0.0, 0.0), 1.0, NO_DIFFERENCE)
    delta = (c - b) / n
    spread = math.sqrt(max((b + c) - (c - b) ** 2 / n, 0.0)) / n
    half = Z95 * spread + 1 / n
    p = mcnemar_exact(b, c)
    bounds = (max(-1.0, delta - half), min(1.0, delta + half))
    if p < alpha:
        verdict = "better" if c > b else "worse"
    else:
        verdict = settle(NO_DIFFERENCE, bounds)
    return Paired(n, b, c, delta, bounds, p, verdict)


def excludes_zero(interval: Sequence[float] | None) -> bool:
    return bool(interval) and (interval[0] > 0 or interval[1] < 0)


def settle(verdict: str, interval: Sequence[float] | None) -> str:
    """The verdict a reader is shown: "no detectable difference" over an interval that
    excludes 0 would contradict the number printed beside it, so it reads
    "suggestive, not significant" there (matrices written before the word existed too)."""
    if verdict == NO_DIFFERENCE and excludes_zero(interval):
        return SUGGESTIVE
    return verdict


def disagreement(verdict: str, p_value: float, alpha: float = 0.05) -> str | None:
    """The one sentence a suggestive comparison needs, None for any other.

    The interval is a normal approximation (Wald, plus a continuity correction) and
    the p-value an exact count; on a handful of discordant missions the two can
    disagree, and the exact test is the one that decides.
    """
    if verdict != SUGGESTIVE:
        return None
    return (f"The 95% interval excludes 0 but the exact McNemar test does not reject "
            f"(p = {p_value:.3g}, not below {alpha:g}): the interval is an approximation that "
            f"runs narrow when so few missions differ, so this is a lead to measure again with "
            f"more missions, not a finding.")


# -- repeats, cells and rows -------------------------------------------------------------------
#
# ``measure`` runs every mission R times per row. The unit of independence is the
# mission (repeats of one mission share its difficulty), so everything below that
# spans missions either treats each mission as one unit (bootstrap, paired
# comparison) or says plainly that it pools trials (Wilson over trials).

#: Outcome words a cell is described from (the failure taxonomy's categories).
PASS, FAIL, MISSING, INFRA = "pass", "fail", "missing", "infra"
OUTCOME_WORDS: tuple[str, ...] = (PASS, FAIL, MISSING, INFRA)

#: How a row and the baseline are paired; see ``compare``.
PAIRING = "mission-majority"

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20240501



def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _interval(bounds: tuple[float, float] | None) -> list[float] | None:
    return None if bounds is None else [round(bounds[0], 4), round(bounds[1], 4)]


def rate(passed: int, n: int) -> dict[str, object]:
    """A pass rate with its 95% Wilson interval: ``{passed, n, value, wilson}``."""
    return {"passed": passed, "n": n, "value": _r(passed / n) if n else None,
            "wilson": _interval(wilson(passed, n))}


def bootstrap_rate(per_mission: Sequence[Sequence[bool]], *,
                   resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                   level: float = 0.95) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the pooled pass rate, resampling *missions*.

    Each resample draws missions with replacement and keeps every repeat of a
    drawn mission together, so a flaky mission widens the interval the way it
    should. Seeded: the same outcomes give the same interval on every machine.
    """
    missions = [(sum(1 for o in tries if o), len(tries)) for tries in per_mission if tries]
    if not missions:
        return None
    rng = random.Random(seed)
    m = len(missions)
    rates: list[float] = []
    for _ in range(resamples):
        passed = tries = 0
        for _ in range(m):
            p, t = missions[rng.randrange(m)]
            passed += p
            tries += t
        rates.append(passed / tries)
    rates.sort()
    low = rates[math.floor((1 - level) / 2 * resamples)]
    high = rates[math.ceil((1 + level) / 2 * resamples) - 1]
    return (low, high)


def mean_pass_at_k(counts: Sequence[tuple[int, int]], k: int) -> float | None:
    """pass@k averaged over missions, each given as (tries n, passes c); None if any n < k."""
    values = [pass_at_k(n, c, k) for n, c in counts]
    if not values or any(v is None for v in values):
        return None
    return sum(values) / len(values)  # type: ignore[arg-type]


def mean_pass_hat_k(counts: Sequence[tuple[int, int]], k: int) -> float | None:
    """pass^k averaged over missions, each given as (tries n, passes c); None if any n < k."""
    values = [pass_hat_k(n, c, k) for n, c in counts]
    if not values or any(v is None for v in values):
        return None
    return sum(values) / len(values)  # type: ignore[arg-type]


def majority(outcomes: Sequence[bool]) -> bool | None:
    """Passed on more than half of its tries (a tie is not a pass); None with no tries."""
    if not outcomes:
        return None
    return 2 * sum(1 for o in outcomes if o) > len(outcomes)


def describe_cell(outcomes: Mapping[str, Sequence[str]]) -> dict[str, object]:
    """Everything ``measure`` reports for one row and half.

    ``outcomes`` maps each mission key to its per-repeat outcome words
    (``pass``, ``fail``, ``missing``, ``infra``), in repeat order.

    - ``rate``: passes over all trials, Wilson 95% (trials pooled as if independent);
    - ``rate_without_infra``: the same with infrastructure errors taken out of the
      denominator (the agent's rate when the machinery worked);
    - ``bootstrap``: 95% percentile interval resampling missions (repeats > 1 only),
      the honest interval when repeats of one mission are correlated;
    - ``pass_at_k`` / ``pass_hat_k`` for k = 1..repeat (an infra error is a failed try);
    - ``stability`` over each mission's non-infra tries: stable_pass, stable_fail,
      flaky, or infra when every try was an infrastructure error.
    """
    counts = {word: 0 for word in OUTCOME_WORDS}
    per_mission: dict[str, dict[str, object]] = {}
    tries: list[tuple[int, int]] = []
    pooled: list[list[bool]] = []
    stable = {"stable_pass": 0, "stable_fail": 0, "flaky": 0, "infra": 0}
    for key, words in outcomes.items():
        for word in words:
            counts[word] = counts.get(word, 0) + 1
        passed = sum(1 for w in words if w == PASS)
        clean = [w == PASS for w in words if w != INFRA]
        word = stability(clean) if clean else "infra"
        stable[word] += 1
        tries.append((len(words), passed))
        pooled.append([w == PASS for w in words])
        per_mission[key] = {"tries": len(words), "passed": passed,
                            "infra": sum(1 for w in words if w == INFRA), "stability": word}
    trials = sum(n for n, _ in tries)
    passed_all = counts[PASS]
    repeat = max((n for n, _ in tries), default=0)
    ks = range(1, repeat + 1)
    return {
        "missions": len(per_mission),
        "repeat": repeat,
        "trials": trials,
        "counts": counts,
        "rate": rate(passed_all, trials),
        "rate_without_infra": rate(passed_all, trials - counts[INFRA]),
        "bootstrap": _interval(bootstrap_rate(pooled)) if repeat > 1 else None,
        "pass_at_k": {str(k): _r(mean_pass_at_k(tries, k)) for k in ks},
        "pass_hat_k": {str(k): _r(mean_pass_hat_k(tries, k)) for k in ks},
        "stability": stable,
        "per_mission": per_mission,
    }


def compare(baseline: Mapping[str, Sequence[str]], row: Mapping[str, Sequence[str]],
            alpha: float = 0.05) -> dict[str, object]:
    """A row against the baseline over the same missions, paired by mission.

    Pairing (``mission-majority``): each mission is one pair. On each side its
    outcome is the majority of its non-infra tries (more than half passed; a
    tie is not a pass). A mission with no non-infra try on either side cannot
    be paired and is listed under ``excluded``. The paired missions then go to
    ``paired``: the delta of majority pass rates (row minus baseline) with its
    95% interval, the exact McNemar p-value on the discordant missions, and the
    verdict — better or worse only when McNemar rejects at ``alpha``, else
    "no detectable difference" (or "suggestive, not significant" when the
    interval excludes 0 all the same). Repeats therefore sharpen each mission's
    outcome but never multiply the sample: R repeats of 10 missions are 10 pairs.
    """
    base_votes: list[bool] = []
    row_votes: list[bool] = []
    excluded: list[str] = []
    for key in baseline:
        if key not in row:
            excluded.append(key)
            continue
        b = majority([w == PASS for w in baseline[key] if w != INFRA])
        r = majority([w == PASS for w in row[key] if w != INFRA])
        if b is None or r is None:
            excluded.append(key)
            continue
        base_votes.append(b)
        row_votes.append(r)
    result = paired(base_votes, row_votes, alpha).as_dict()
    result.update({
        "pairing": PAIRING,
        "excluded": excluded,
        "baseline_rate": _r(sum(base_votes) / len(base_votes)) if base_votes else None,
        "row_rate": _r(sum(row_votes) / len(row_votes)) if row_votes else None,
    })
    return result


# -- cost ------------------------------------------------------------------------------------
#
# A row's cost is compared the way its quality is: the mission is the unit. Each mission's
# cost is the mean over its priced repeats; a row's cost is the mean of those over missions,
# with a percentile bootstrap that resamples missions; and a row is set against the baseline
# mission by mission (paired), so that a row that happened to draw the expensive missions is
# not called dear. A run with no cost (unpriced, no tokens reported, missing) is left out and
# counted, never taken as 0.


def _cost_per_mission(costs: Mapping[str, Sequence[float | None]]) -> dict[str, float]:
    """Mission key -> its mean cost over the repeats that have one (missions with none out)."""
    out: dict[str, float] = {}
    for key, values in costs.items():
        known = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if known:
            out[key] = math.fsum(known) / len(known)
    return out


def bootstrap_mean(values: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES,
                   seed: int = BOOTSTRAP_SEED, level: float = 0.95) -> tuple[float, float] | None:
    """Percentile bootstrap interval of a mean over missions (one value per mission), seeded."""
    if not values:
        return None
    rng = random.Random(seed)
    m = len(values)
    means = sorted(math.fsum(values[rng.randrange(m)] for _ in range(m)) / m
                   for _ in range(resamples))
    return (means[math.floor((1 - level) / 2 * resamples)],
            means[math.ceil((1 + level) / 2 * resamples) - 1])


def _money(value: float | None) -> float | None:
    return None if value is None else round(value, 8)


def describe_cost(costs: Mapping[str, Sequence[float | None]]) -> dict[str, object] | None:
    """Mean cost per mission of one row and half, with its 95% bootstrap over missions.

    ``costs`` maps each mission key to its per-repeat costs (None: unknown). None when no
    run of the cell has a cost (an unpriced measure says nothing about cost).
    """
    per_mission = _cost_per_mission(costs)
    if not per_mission:
        return None
    values = list(per_mission.values())
    low_high = bootstrap_mean(values)
    runs = sum(len(v) for v in costs.values())
    priced = sum(1 for v in costs.values() for c in v
                 if isinstance(c, (int, float)) and not isinstance(c, bool))
    return {"mean": _money(math.fsum(values) / len(values)),
            "bootstrap": None if low_high is None else [_money(low_high[0]), _money(low_high[1])],
            "missions": len(values), "runs": runs, "unknown": runs - priced}


def compare_cost(baseline: Mapping[str, Sequence[float | None]],
                 row: Mapping[str, Sequence[float | None]]) -> dict[str, object] | None:
    """The row's cost minus the baseline's, paired by mission, with a 95% bootstrap interval.

    Each mission with a cost on both sides is one pair (its mean over priced repeats on
    each side); the delta is the mean of the pairs' differences, and the interval
    resamples the pairs. Missions without a cost on a side are listed under ``excluded``.
    None when no mission can be paired.
    """
    base, mine = _cost_per_mission(baseline), _cost_per_mission(row)
    keys = [k for k in baseline if k in base and k in mine]
    if not keys:
        return None
    diffs = [mine[k] - base[k] for k in keys]
    low_high = bootstrap_mean(diffs)
    return {"pairing": "mission-mean", "missions": len(keys),
            "delta": _money(math.fsum(diffs) / len(diffs)),
            "interval": None if low_high is None else [_money(low_high[0]), _money(low_high[1])],
            "excluded": [k for k in {**baseline, **row} if k not in keys]}


def quality_and_cost(verdict: str, cost: Mapping[str, object] | None) -> str | None:
    """One sentence when a row is better but costs more (or worse and cheaper): both said.

    A row's pass-rate verdict alone would recommend it; its price is the other half of
    the choice. "costs more" when the paired delta is above 0, with whether its
    interval holds 0 (then the extra cost may be noise).
    """
    if cost is None or verdict not in ("better", "worse"):
        return None
    delta = cost.get("delta")
    if not isinstance(delta, (int, float)) or delta == 0:
        return None
    dearer = delta > 0
    if (verdict == "better") != dearer:
        return None  # better and cheaper, or worse and dearer: one word says it all
    interval = cost.get("interval")
    sure = excludes_zero(interval)  # type: ignore[arg-type]
    how = "costs more" if dearer else "costs less"
    noise = "" if sure else " (its interval includes 0: the difference in cost may be noise)"
    return (f"{verdict} on quality, and {how}: {delta:+.6g} per mission against the baseline"
            f"{noise}.")
