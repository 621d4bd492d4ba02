"""``max_tokens`` / ``max_cost``: a mission's token and cost budget.

A suite sets a budget per mission. The built-in agent is spawned with it
(``--max-tokens``/``--max-cost``), so the run is stopped at the first call
that would cross it; any agent's run is judged against it afterwards, from
the usage and cost its stream reports (or the cost ``score --pricing`` gives
it). A run that ran out of one of these budgets did not finish its mission,
and fails saying which. A run that never says what it spent cannot show it
kept to the budget, so it fails saying so, as ``max_model_calls`` does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from evalkit.eval.checks import Check, Field

if TYPE_CHECKING:
    from evalkit.eval.check import Rules
    from evalkit.eval.mission import Mission
    from evalkit.eval.summary import RunSummary

#: The ``mission_finished.budget.which`` words this check owns (``evalkit.contract.BUDGETS``).
WHICH = ("tokens", "cost")


def tokens(s: RunSummary) -> int | float | None:
    """Tokens the run reported: its total, else prompt + completion; None when it said none."""
    if s.total_tokens is not None:
        return s.total_tokens
    if s.prompt_tokens is None and s.completion_tokens is None:
        return None
    return (s.prompt_tokens or 0) + (s.completion_tokens or 0)


def judge(m: Mission, s: RunSummary) -> Iterator[tuple[str, str]]:
    budget = s.budget if isinstance(s.budget, dict) else {}
    if s.outcome == "budget_exhausted" and budget.get("which") in WHICH:
        which = budget["which"]
        name = "max_tokens" if which == "tokens" else "max_cost"
        yield name, (f"it ran out of its {which} budget ({budget.get('spent')} spent of "
                     f"{budget.get('limit')}) before it answered")
        return
    if m.max_tokens is not None:
        used = tokens(s)
        if used is None:
            yield "max_tokens", ("the stream does not say how many tokens were used; this "
                                 f"mission allows {m.max_tokens}")
        elif used > m.max_tokens:
            yield "max_tokens", f"it used {used:g} tokens; this mission allows {m.max_tokens}"
    if m.max_cost is not None:
        if s.cost is None:
            yield "max_cost", ("the run's cost is not known (no price for its model, or no "
                               f"tokens reported); this mission allows {m.max_cost:g}")
        elif s.cost > m.max_cost:
            yield "max_cost", f"it cost {s.cost:g}; this mission allows {m.max_cost:g}"


def validate(m: Mission, rules: Rules) -> Iterator[tuple[str, str]]:
    if m.max_tokens is not None and m.max_tokens < 1:
        yield "max_tokens", f"{m.max_tokens} is not a budget; use 1 or more"
    if m.max_cost is not None and not m.max_cost > 0:
        yield "max_cost", f"{m.max_cost} is not a budget; use an amount more than 0"


def spawn_flags(m: Mission) -> Iterator[str]:
    """The built-in agent holds the mission's budget itself."""
    if m.max_tokens is not None:
        yield from ("--max-tokens", str(m.max_tokens))
    if m.max_cost is not None:
        yield from ("--max-cost", repr(float(m.max_cost)))


CHECK = Check(
    name="budgets",
    fields=(Field("max_tokens", "int", "int ≥ 1",
                  "most tokens the run may use (`mission_finished.usage`); the built-in agent "
                  "is stopped at it"),
            Field("max_cost", "number", "number > 0",
                  "most the run may cost, in the pricing file's currency; the built-in agent "
                  "is stopped at it (it needs --pricing)")),
    judge=judge,
    validate=validate,
    reads=("outcome", "budget", "total_tokens", "prompt_tokens", "completion_tokens", "cost"),
    emits=("max_tokens", "max_cost"),
    reasons=((r"^it ran out of its tokens budget|^it used .* tokens; this mission allows"
              r"|^the stream does not say how many tokens", "max_tokens"),
             (r"^it ran out of its cost budget|^it cost .*; this mission allows"
              r"|^the run's cost is not known", "max_cost")),
    spawn_flags=spawn_flags,
)
