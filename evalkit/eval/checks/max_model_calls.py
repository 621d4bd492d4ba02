"""``max_model_calls``: the run answered within a number of model calls.

A run that never says how many calls it made cannot show it kept to the
bound, so it fails saying so, as ``expects_grounded`` does without a verdict.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from evalkit.eval.checks import Check, Field

if TYPE_CHECKING:
    from evalkit.eval.check import Rules
    from evalkit.eval.mission import Mission
    from evalkit.eval.summary import RunSummary


def judge(m: Mission, s: RunSummary) -> Iterator[str]:
    allowed = m.max_model_calls
    if s.model_calls is None:
        yield ("the stream does not say how many model calls were made; "
               f"this mission allows {allowed}")
    elif s.model_calls > allowed:
        noun = "model call" if s.model_calls == 1 else "model calls"
        yield f"it made {s.model_calls} {noun}; this mission allows {allowed}"


def validate(m: Mission, rules: Rules) -> Iterator[str]:
    if m.max_model_calls < 0:
        yield f"{m.max_model_calls} is negative; use 0 or more"


CHECK = Check(
    name="max_model_calls",
    fields=(Field("max_model_calls", "int", "int ≥ 0",
                  "most model calls allowed, as `mission_finished.usage.calls` counts them"),),
    judge=judge,
    validate=validate,
    reads=("model_calls",),
    reasons=((r"^it made .* model calls?; this mission allows"
              r"|^the stream does not say how many model calls", "max_model_calls"),),
)
