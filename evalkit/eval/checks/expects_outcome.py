"""``expects_outcome``: the run ended the way the mission wants (``expects_caveat_ok``
also accepts an answer given with a caveat). A run cut off before it closed is
already failed as unfinished, so it is not judged here too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from evalkit import contract
from evalkit.eval.checks import Check, Field

if TYPE_CHECKING:
    from evalkit.eval.check import Rules
    from evalkit.eval.mission import Mission
    from evalkit.eval.summary import RunSummary

CAVEAT = "answered_with_caveat"


def judge(m: Mission, s: RunSummary) -> Iterator[str]:
    if m.expects_outcome is None or not s.finished:
        return
    wanted = {m.expects_outcome, CAVEAT} if m.expects_caveat_ok else {m.expects_outcome}
    if s.outcome not in wanted:
        also = f" (or {CAVEAT})" if len(wanted) > 1 else ""
        yield f"ended {s.outcome!r}; this mission wants {m.expects_outcome}{also}"


def validate(m: Mission, rules: Rules) -> Iterator[str]:
    if m.expects_outcome is not None and m.expects_outcome not in contract.OUTCOMES:
        yield f"{m.expects_outcome!r} is not an outcome ({', '.join(contract.OUTCOMES)})"


CHECK = Check(
    name="expects_outcome",
    fields=(Field("expects_outcome", "str", "one of the five outcomes",
                  "compared with the last `mission_finished.outcome`"),
            Field("expects_caveat_ok", "bool", "bool", f"also accept `{CAVEAT}`",
                  default=False)),
    judge=judge,
    validate=validate,
    reads=("finished", "outcome"),
    reasons=((r"^ended ", "expects_outcome"),),
)
