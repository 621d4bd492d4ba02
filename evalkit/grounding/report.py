"""A grounding report: one row per check, and the ``grounding`` record made of it.

Row verdicts (``contract.CHECK_VERDICTS``):

- ``unconfigured`` — the grammar does not configure the check; it is not run
  and counts for nothing;
- ``nothing_considered`` — it ran and the answer made no claim of its kind;
- ``supported`` — every claim it considered was found in the evidence;
- ``unsupported`` — at least one was not (the row's ``unsupported`` lists them,
  as written in the answer).

A row is ``grounded`` when it has no unsupported claim and its ``must_cite``
minimum is met (``grounded`` is null on an unconfigured row). A check *cites*
a claim when it considered it and found it supported; ``minimum`` is how many
citations ``must_cite`` asks of it (0 = none required).

The record's fields:

- ``ran`` — the validator ran (true whenever the record is written);
- ``grounded`` — every configured, non-advisory check is grounded;
- ``verified`` — grounded **and** at least one claim was considered over all
  configured checks: a check over zero claims is not a pass;
- ``unsupported`` — every unsupported token, in order, without repeats;
- ``silent`` — the configured checks that considered nothing
  (verdict ``nothing_considered``), in check order;
- ``uncited`` — the configured checks whose ``must_cite`` minimum was not met
  (fewer supported claims than the minimum), in check order;
- ``repairs`` — repair turns given so far (the interim record counts the one
  it announces); ``repairing`` — true on the interim record that announces a
  repair turn; ``caveat`` — the text appended to the answer, else null;
- ``checks`` — the rows.

``advisory`` marks a row reported but not counted in ``grounded``; no
grammar key makes a check advisory yet, so it is false on every row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from evalkit.grounding.grammar import Grammar


def _plural(n: int, noun: str) -> str:
    if n == 1:
        return f"1 {noun}"
    if noun.endswith("claim of work"):
        return f"{n} claims of work"
    return f"{n} {noun}s"


@dataclass
class Row:
    """One check's result."""

    check: str
    configured: bool
    grounded: bool | None
    verdict: str
    considered: int
    minimum: int
    unsupported: list[str]
    detail: str
    advisory: bool = False
    #: Claims considered and found (what ``must_cite`` counts); not on the wire.
    cited: int = field(default=0, repr=False)

    @classmethod
    def unconfigured(cls, check: str, detail: str) -> Row:
        return cls(check, False, None, "unconfigured", 0, 0, [], detail)

    @classmethod
    def judged(cls, check: str, grammar: Grammar, claimed: Sequence[str],
               missing: Sequence[str], *, noun: str, where: str) -> Row:
        considered, minimum = len(claimed), grammar.minimum(check)
        cited = considered - len(missing)
        if not considered:
            verdict, detail = "nothing_considered", f"the answer makes no {noun} claim"
        elif missing:
            verdict = "unsupported"
            detail = (f"{len(missing)} of {_plural(considered, noun)} not found {where}: "
                      + ", ".join(missing))
        else:
            verdict, detail = "supported", f"{_plural(considered, noun)}, each found {where}"
        if cited < minimum:
            detail += f"; must_cite wants at least {minimum}, {cited} cited"
        return cls(check, True, not missing and cited >= minimum, verdict, considered, minimum,
                   list(missing), detail, cited=cited)

    def as_dict(self) -> dict[str, Any]:
        return {"check": self.check, "configured": self.configured, "grounded": self.grounded,
                "verdict": self.verdict, "considered": self.considered,
                "minimum": self.minimum, "unsupported": list(self.unsupported),
                "detail": self.detail, "advisory": self.advisory}


@dataclass
class Report:
    """Every check's row, in ``CHECKS`` order, and what the record computes from them."""

    rows: list[Row]
    ran: bool = True

    def _counted(self) -> list[Row]:
        return [r for r in self.rows if r.configured and not r.advisory]

    @property
    def grounded(self) -> bool:
        return self.ran and all(r.grounded for r in self._counted())

    @property
    def verified(self) -> bool:
        return self.grounded and sum(r.considered for r in self._counted()) > 0

    @property
    def unsupported(self) -> list[str]:
        return list(dict.fromkeys(t for r in self.rows if r.configured for t in r.unsupported))

    @property
    def silent(self) -> list[str]:
        return [r.check for r in self.rows if r.configured and r.considered == 0]

    @property
    def uncited(self) -> list[str]:
        return [r.check for r in self.rows if r.configured and r.cited < r.minimum]

    def row(self, check: str) -> Row:
        return next(r for r in self.rows if r.check == check)

    def caveat(self) -> str | None:
        """The sentence appended to an answer that stayed ungrounded (None when grounded)."""
        if self.grounded:
            return None
        parts = []
        if not self.ran:
            parts.append("grounding could not check this answer")
        if self.unsupported:
            parts.append("not found in any tool result of this run: "
                         + ", ".join(self.unsupported))
        short = [f"{r.check} (at least {r.minimum}, {r.cited} cited)"
                 for r in self.rows if r.configured and r.cited < r.minimum]
        if short:
            parts.append("fewer citations than required: " + ", ".join(short))
        return "Caveat: " + "; ".join(parts) + "."

    def record(self, *, repairs: int, repairing: bool, caveat: str | None) -> dict[str, Any]:
        """The ``grounding`` stream record."""
        return {
            "event": "grounding", "ran": self.ran, "grounded": self.grounded,
            "verified": self.verified, "repairs": repairs, "repairing": repairing,
            "caveat": caveat, "unsupported": self.unsupported, "silent": self.silent,
            "uncited": self.uncited, "checks": [r.as_dict() for r in self.rows],
        }


def with_caveat(answer: str, caveat: str | None) -> str:
    """The answer with the caveat appended on its own paragraph."""
    if not caveat:
        return answer
    return f"{answer.rstrip()}\n\n{caveat}" if answer.strip() else caveat
