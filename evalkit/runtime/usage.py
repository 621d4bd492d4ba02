"""The usage ledger: what providers reported, summed, never estimated.

A token field is summed only over the calls that reported it and is absent
from the totals when no call did: zero would claim the run was free, when the
truth is that nobody said.

Providers report more than the three classic counters, and the others are
what a cost or a cache study needs: the prompt tokens served from a cache
and the completion tokens spent on hidden reasoning. The OpenAI shape nests
them (``prompt_tokens_details.cached_tokens``,
``completion_tokens_details.reasoning_tokens``); some servers put them at
the top level. Either way the run totals carry them flat, as
``cached_tokens`` and ``reasoning_tokens``, and every other numeric top-level
counter a provider sent is summed under its own name, so nothing the
endpoint said is dropped on the way to ``mission_finished.usage``.

Cost is the one figure here that no provider reports: it is priced
(``evalkit.pricing``) and rides each call's usage as ``cost``, a number or
null. So it is not summed like a counter: a run that was priced carries
``cost`` in its totals, and that total is null as soon as one answered call's
cost is unknown (an unpriced model, a provider that reported no tokens),
because a sum that skipped it would claim the run was cheaper than it was.
"""

from __future__ import annotations

from typing import Any

from evalkit.pricing import PLACES

TOKEN_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens")
#: Numeric usage fields that are not summed as counters: the ledger's own call count,
#: and the priced cost (summed apart, see the module docstring).
_NOT_COUNTERS = frozenset({"calls", "cost"})
#: Counters read from a nested details mapping when the top level does not carry them.
NESTED_FIELDS = (("cached_tokens", "prompt_tokens_details"),
                 ("reasoning_tokens", "completion_tokens_details"))


def counters(usage: dict[str, Any] | None) -> dict[str, int | float]:
    """The numeric counters of one call's usage, nested details lifted flat."""
    if not isinstance(usage, dict):
        return {}
    out = {k: v for k, v in usage.items() if _number(v) and k not in _NOT_COUNTERS}
    for name, parent in NESTED_FIELDS:
        details = usage.get(parent)
        if name not in out and isinstance(details, dict) and _number(details.get(name)):
            out[name] = details[name]
    return out


class UsageLedger:
    """Run totals ``{prompt_tokens?, completion_tokens?, total_tokens?, cached_tokens?,
    reasoning_tokens?, …, calls}``."""

    def __init__(self) -> None:
        self.calls = 0
        self._sums: dict[str, int | float] = {}
        #: Whether the run is priced: its totals then carry ``cost`` (a number or null).
        self.priced = False
        self._cost = 0.0
        self._costed = self._uncosted = 0

    def add(self, usage: dict[str, Any] | None) -> None:
        """Count one answered model call and whatever usage it reported."""
        self.calls += 1
        for name, value in counters(usage).items():
            self._sums[name] = self._sums.get(name, 0) + value
        cost = usage.get("cost") if isinstance(usage, dict) else None
        if _number(cost):
            self._cost += cost
            self._costed += 1
        else:
            self._uncosted += 1

    def totals(self) -> dict[str, Any]:
        known = [k for k in TOKEN_FIELDS if k in self._sums]
        others = sorted(k for k in self._sums if k not in TOKEN_FIELDS)
        out = {**{k: self._sums[k] for k in known + others}, "calls": self.calls}
        if self.priced:
            out["cost"] = None if self._uncosted else round(self._cost, PLACES)
        elif self._costed:  # unpriced here, but the provider itself reported a cost
            out["cost"] = round(self._cost, PLACES)
        return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
