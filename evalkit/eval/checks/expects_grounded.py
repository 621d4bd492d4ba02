"""``expects_grounded``: the last grounding verdict (not an interim one, written while
a repair was still possible) says what the mission wants."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from evalkit.eval.checks import Check, Field

if TYPE_CHECKING:
    from evalkit.eval.mission import Mission
    from evalkit.eval.summary import RunSummary


def judge(m: Mission, s: RunSummary) -> Iterator[str]:
    if not s.grounding_verdict:
        yield f"no grounding verdict was recorded; this mission wants grounded={m.expects_grounded}"
    elif s.grounded is not m.expects_grounded:
        yield f"grounding says grounded={s.grounded}; this mission wants {m.expects_grounded}"


CHECK = Check(
    name="expects_grounded",
    fields=(Field("expects_grounded", "bool", "bool", "compared with `grounded` of the last "
                  "grounding record whose `repairing` is false"),),
    judge=judge,
    reads=("grounding_verdict", "grounded"),
    reasons=((r"^no grounding verdict was recorded|^grounding says grounded=",
              "expects_grounded"),),
)
