"""``must_not_stage``: the run answered directly, without a staged plan (docs/SWARM.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from evalkit.eval.checks import Check, Field

if TYPE_CHECKING:
    from evalkit.eval.mission import Mission
    from evalkit.eval.summary import RunSummary


def judge(m: Mission, s: RunSummary) -> Iterator[str]:
    if m.must_not_stage and s.staged:
        yield "the run was STAGED: a plan rode step_started"


CHECK = Check(
    name="must_not_stage",
    fields=(Field("must_not_stage", "bool", "bool",
                  "fails if any `step_started` carries a `plan`", default=False),),
    judge=judge,
    reads=("staged",),
    reasons=((r"^the run was STAGED", "must_not_stage"),),
)
