"""Token and cost budgets: a mission ends at the first model call that would cross one.

``--max-tokens N`` and ``--max-cost AMOUNT`` sit beside ``--mission-steps`` and
``--mission-seconds``. Every model call of a run counts — mission turns, the
supervisor's reviews, a swarm's triage, plan and synthesis — because every
one is paid for. Each is checked twice:

- **before the call**, from the request's size: the characters of its
  messages and tool schemas (as JSON) divided by ``CHARS_PER_TOKEN`` (4),
  rounded up. That is the usual rule of thumb for English text on the BPE
  tokenizers hosted models use, an *estimate*: real counts come out higher
  for code and non-Latin text and lower for plain prose. A call whose
  estimated prompt alone would take the run past a budget is not made. The
  estimate never enters the run's usage, which stays what providers reported.
- **after the reply**, from the usage the provider reported (and its cost,
  priced by ``evalkit.pricing``): a reply that took the run past a budget ends
  it there, its content not acted on. The call is recorded all the same.

Either way the run ends ``budget_exhausted`` with ``budget`` = ``{which,
limit, spent}`` (``which`` one of ``tokens``, ``cost``); a stop before the call
adds ``estimate``, what the refused call was estimated to need. A provider
that reports no usage leaves only the first check to hold the run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalkit.pricing import Pricing

#: Characters per token in the pre-call estimate (see the module docstring).
CHARS_PER_TOKEN = 4


def estimate_prompt_tokens(messages: Sequence[Mapping[str, Any]],
                           tools: Sequence[Mapping[str, Any]] | None) -> int:
    """The request's prompt size in tokens, estimated from its characters (at least 1)."""
    chars = 0
    for message in messages:
        content = message.get("content")
        chars += len(content) if isinstance(content, str) else len(
            json.dumps(content, ensure_ascii=False, default=str)) if content else 0
        if message.get("tool_calls"):
            chars += len(json.dumps(message["tool_calls"], ensure_ascii=False, default=str))
    if tools:
        chars += len(json.dumps(list(tools), ensure_ascii=False, default=str))
    return max(1, math.ceil(chars / CHARS_PER_TOKEN))


def tokens_spent(totals: Mapping[str, Any]) -> int | float | None:
    """Tokens a run's usage totals reported: ``total_tokens``, else prompt + completion."""
    total = totals.get("total_tokens")
    if _number(total):
        return total
    prompt, completion = totals.get("prompt_tokens"), totals.get("completion_tokens")
    if _number(prompt) or _number(completion):
        return (prompt if _number(prompt) else 0) + (completion if _number(completion) else 0)
    return None


@dataclass(frozen=True)
class Spend:
    """A run's token and cost budgets, and how its calls are priced."""

    max_tokens: int | None = None
    max_cost: float | None = None
    pricing: Pricing | None = None
    #: (provider, model) the run's calls are priced as.
    priced_as: tuple[str | None, str | None] = (None, None)

    @property
    def bounded(self) -> bool:
        return self.max_tokens is not None or self.max_cost is not None

    def cost(self, usage: Mapping[str, Any] | None) -> float | None:
        """One call's cost at this run's prices (None: unpriced or no tokens reported)."""
        if self.pricing is None:
            return None
        return self.pricing.cost(*self.priced_as, usage)

    def before(self, totals: Mapping[str, Any], messages: Sequence[Mapping[str, Any]],
               tools: Sequence[Mapping[str, Any]] | None) -> dict[str, Any] | None:
        """The ``budget`` record when the next call's estimated prompt would cross a budget."""
        if not self.bounded:
            return None
        estimate = estimate_prompt_tokens(messages, tools)
        spent = tokens_spent(totals)
        if self.max_tokens is not None and (spent or 0) + estimate > self.max_tokens:
            return {"which": "tokens", "limit": self.max_tokens, "spent": spent or 0,
                    "estimate": estimate}
        if self.max_cost is not None:
            cost = self.cost({"prompt_tokens": estimate, "completion_tokens": 0})
            paid = totals.get("cost")
            paid = paid if _number(paid) else 0
            if cost is not None and paid + cost > self.max_cost:
                return {"which": "cost", "limit": self.max_cost, "spent": paid,
                        "estimate": cost}
        return None

    def after(self, totals: Mapping[str, Any]) -> dict[str, Any] | None:
        """The ``budget`` record when the usage reported so far has crossed a budget."""
        spent = tokens_spent(totals)
        if self.max_tokens is not None and spent is not None and spent > self.max_tokens:
            return {"which": "tokens", "limit": self.max_tokens, "spent": spent}
        paid = totals.get("cost")
        if self.max_cost is not None and _number(paid) and paid > self.max_cost:
            return {"which": "cost", "limit": self.max_cost, "spent": paid}
        return None


def priced_as(model: Any) -> tuple[str | None, str | None]:
    """The (provider, model) a backend's calls are priced as: a replay prices as the
    provider it recorded, a live backend as itself."""
    found = getattr(model, "priced_as", None)
    if isinstance(found, tuple) and len(found) == 2:
        return found
    return getattr(model, "provider", None), getattr(model, "model", None)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
