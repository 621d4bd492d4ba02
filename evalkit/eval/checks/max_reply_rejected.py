"""``max_reply_rejected``: how many of the model's replies the loop may fail to read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from evalkit.eval.checks import Check, Field

if TYPE_CHECKING:
    from evalkit.eval.check import Rules
    from evalkit.eval.mission import Mission
    from evalkit.eval.summary import RunSummary


def judge(m: Mission, s: RunSummary) -> Iterator[str]:
    if s.reply_rejected > m.max_reply_rejected:
        noun = "reply" if s.reply_rejected == 1 else "replies"
        yield (f"{s.reply_rejected} {noun} could not be read; "
               f"this mission allows {m.max_reply_rejected}")


def validate(m: Mission, rules: Rules) -> Iterator[str]:
    if m.max_reply_rejected < 0:
        yield f"{m.max_reply_rejected} is negative; use 0 or more"


CHECK = Check(
    name="max_reply_rejected",
    fields=(Field("max_reply_rejected", "int", "int ≥ 0",
                  "most `reply_rejected` records allowed"),),
    judge=judge,
    validate=validate,
    reads=("reply_rejected",),
    reasons=((r"could not be read; this mission allows", "max_reply_rejected"),),
)
