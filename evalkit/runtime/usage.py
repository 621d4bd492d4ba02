"""The usage ledger: what providers reported, summed, never estimated.

A token field is summed only over the calls that reported it and is absent
from the totals when no call did: zero would claim the run was free, when the
truth is that nobody said.
"""

from __future__ import annotations

from typing import Any

TOKEN_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens")


class UsageLedger:
    """Run totals ``{prompt_tokens?, completion_tokens?, total_tokens?, calls}``."""

    def __init__(self) -> None:
        self.calls = 0
        self._sums: dict[str, int | float] = {}

    def add(self, usage: dict[str, Any] | None) -> None:
        """Count one answered model call and whatever usage it reported."""
        self.calls += 1
        for name in TOKEN_FIELDS:
            value = (usage or {}).get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self._sums[name] = self._sums.get(name, 0) + value

    def totals(self) -> dict[str, Any]:
        return {**{k: self._sums[k] for k in TOKEN_FIELDS if k in self._sums},
                "calls": self.calls}
