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
"""

from __future__ import annotations

from typing import Any

TOKEN_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens")
#: Counters read from a nested details mapping when the top level does not carry them.
NESTED_FIELDS = (("cached_tokens", "prompt_tokens_details"),
                 ("reasoning_tokens", "completion_tokens_details"))


def counters(usage: dict[str, Any] | None) -> dict[str, int | float]:
    """The numeric counters of one call's usage, nested details lifted flat."""
    if not isinstance(usage, dict):
        return {}
    out = {k: v for k, v in usage.items() if _number(v) and k != "calls"}
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

    def add(self, usage: dict[str, Any] | None) -> None:
        """Count one answered model call and whatever usage it reported."""
        self.calls += 1
        for name, value in counters(usage).items():
            self._sums[name] = self._sums.get(name, 0) + value

    def totals(self) -> dict[str, Any]:
        known = [k for k in TOKEN_FIELDS if k in self._sums]
        others = sorted(k for k in self._sums if k not in TOKEN_FIELDS)
        return {**{k: self._sums[k] for k in known + others}, "calls": self.calls}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
