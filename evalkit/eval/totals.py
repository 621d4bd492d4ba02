"""Totals of verdicts per half and per flag, as a score report shows them.

Train and test are never blended: every total is per half. Totals of runs of
verdicts add up exactly (``Totals.merge``), so a report scored in shares by
several processes shows the very numbers one process would.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable
from typing import Any

from evalkit.eval.suite import SPLITS
from evalkit.eval.verdict import Verdict

#: Per half: the half's totals, and its totals per flag.
HalfTotals = dict[str, tuple["Totals", dict[str, "Totals"]]]


def tally_halves(verdicts: Iterable[Verdict], split: str) -> HalfTotals:
    """Running totals of ``verdicts`` per half and flag; those of shares of a report add up."""
    found: HalfTotals = {half: (Totals(), {}) for half in SPLITS if split in ("all", half)}
    for v in verdicts:
        if v.split in found:
            flags = found[v.split][1]
            (flags.get(v.flag) or flags.setdefault(v.flag, Totals())).add(v)
    # Each verdict has one flag, so a half's totals are its flags' (exact: see Totals),
    # added up once here rather than verdict by verdict.
    for whole, flags in found.values():
        for each in flags.values():
            whole.merge(each)
    return found


def merge_halves(into: HalfTotals, other: HalfTotals) -> None:
    """Add ``other``'s totals to ``into``'s (``other`` is left as it was)."""
    for half, (whole, flags) in other.items():
        mine, my_flags = into[half]
        mine.merge(whole)
        for flag, t in flags.items():
            (my_flags.get(flag) or my_flags.setdefault(flag, Totals())).merge(t)


def halves_dict(found: HalfTotals) -> dict[str, dict[str, Any]]:
    return {half: {"totals": whole.as_dict(),
                   "by_flag": {flag: t.as_dict() for flag, t in sorted(flags.items())}}
            for half, (whole, flags) in found.items()}


class Totals:
    """Running counts and sums of one group; ``as_dict`` is what a report shows.

    Integer KPIs are summed exactly and float ones kept and summed with
    ``math.fsum`` (exactly rounded), so a mean does not depend on the order
    the verdicts came in or on how they were shared out.
    """

    __slots__ = ("missions", "missing", "passed", "human", "rejected", "ints", "floats", "counts",
                 "judged", "not_judged")

    #: The means a report shows, and the KPI each is taken over (scored runs that carry it).
    MEANS = (("mean_steps", "steps"), ("mean_wall_s", "elapsed_s"), ("mean_tokens", "tokens"),
             ("mean_cost", "cost"))
    #: Means shown only when some run carries the KPI: an unpriced report reads as it always
    #: did, with no column of nulls.
    WHEN_KNOWN = frozenset({"mean_cost"})
    #: Decimal places a mean keeps (cost: a fraction of a cent per run is the usual size).
    PLACES = {"mean_cost": 8}

    def __init__(self) -> None:
        self.missions = self.missing = self.passed = self.human = self.rejected = 0
        self.ints = [0] * len(self.MEANS)
        self.floats: list[array[float]] = [array("d") for _ in self.MEANS]
        self.counts = [0] * len(self.MEANS)
        #: Scored missions a model judge grades, and those of them with no judgment recorded
        #: (``evalkit.eval.checks.judge``): shown only where a judge is configured.
        self.judged = self.not_judged = 0

    def add(self, v: Verdict) -> None:
        self.missions += 1
        self.passed += v.passed
        if v.missing:
            self.missing += 1
            return
        if v.extra and "judge" in v.extra:
            self.judged += 1
            self.not_judged += "not_judged" in v.checks
        kpis = v.kpis
        for i, (_, name) in enumerate(self.MEANS):
            value = kpis[name]
            if value is not None:
                if type(value) is int:
                    self.ints[i] += value
                else:
                    self.floats[i].append(value)
                self.counts[i] += 1
        self.human += kpis["human_interventions"] or 0
        self.rejected += kpis["reply_rejected"] or 0

    def merge(self, other: Totals) -> None:
        self.missions += other.missions
        self.missing += other.missing
        self.passed += other.passed
        self.human += other.human
        self.rejected += other.rejected
        self.judged += other.judged
        self.not_judged += other.not_judged
        for i in range(len(self.MEANS)):
            self.ints[i] += other.ints[i]
            self.floats[i].extend(other.floats[i])
            self.counts[i] += other.counts[i]

    def _mean(self, i: int) -> float | None:
        n = self.counts[i]
        if not n:
            return None
        places = self.PLACES.get(self.MEANS[i][0], 3)
        try:
            if not self.floats[i]:
                return round(self.ints[i] / n, places)
            return round(math.fsum([*self.floats[i], self.ints[i]]) / n, places)
        except OverflowError:
            # A sum past the largest float (streams may carry any finite number): each
            # value divided first, still exactly summed, so still independent of order.
            parts = [value / n for value in self.floats[i]]
            return round(math.fsum([*parts, self.ints[i] / n]), places)

    def as_dict(self) -> dict[str, Any]:
        n = self.missions
        out = {
            "missions": n,
            "scored": n - self.missing,
            "missing": self.missing,
            "passed": self.passed,
            "failed": n - self.passed,
            "success_rate": round(self.passed / n, 4) if n else None,
        }
        for i, (mean, _) in enumerate(self.MEANS):
            if mean not in self.WHEN_KNOWN or self.counts[i]:
                out[mean] = self._mean(i)
        out["human_interventions"] = self.human
        out["reply_rejected"] = self.rejected
        if self.judged:
            out["judged"] = self.judged - self.not_judged
            out["not_judged"] = self.not_judged
        return out


__all__ = ["HalfTotals", "Totals", "halves_dict", "merge_halves", "tally_halves"]
