"""Repair, then caveat: what the loop does with an answer under a grounding grammar.

The checks themselves are ``evalkit.grounding`` (pure, shared with offline
tools); this is the runtime's half. It keeps the run's tool results as they
were emitted (the evidence), and judges each answer:

- grounded → the verdict record (``repairing: false``) and the answer as is;
- not grounded, a repair left (``max_repairs``, default 1) and the run able
  to take another turn → an interim record (``repairing: true``) and the
  problem to send back, naming the exact unsupported tokens and the checks
  short of citations; the loop goes on and the next answer is judged again;
- otherwise → the verdict record with the caveat, and the answer kept with
  the caveat appended: ``answered_with_caveat``.

A validator that crashes never fails the mission: the verdict says
``ran: false``, the answer is kept with a caveat saying it went unchecked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalkit.grounding import Grammar, Report, evidence_from_records, validate, with_caveat
from evalkit.runtime import prompts


@dataclass
class Judgement:
    """What the loop does next with one answer."""

    #: The ``grounding`` record to emit (before the answer, or before the repair turn).
    record: dict[str, Any]
    #: Set when the answer goes back: the problem the model is told.
    repair: str | None = None
    #: The answer text to emit (caveat appended when it stayed ungrounded).
    text: str = ""
    outcome: str = "answered"


class GroundingGate:
    """One run's grounding: evidence as emitted, repairs given so far."""

    def __init__(self, grammar: Grammar) -> None:
        self.grammar = grammar
        self.repairs = 0
        self._results: list[Mapping[str, Any]] = []

    def see(self, record: Mapping[str, Any]) -> None:
        if record.get("event") == "tool_result":
            self._results.append(record)

    def judge(self, answer: str, catalogue: Sequence[Mapping[str, Any]], *,
              can_repair: bool) -> Judgement:
        """Check ``answer`` against the run's results so far and decide."""
        report = self.report(answer, catalogue)
        if report.grounded:
            return Judgement(report.record(repairs=self.repairs, repairing=False, caveat=None),
                             text=answer, outcome="answered")
        if report.ran and can_repair and self.repairs < self.grammar.max_repairs:
            self.repairs += 1
            short = [f"{r.check} (at least {r.minimum})" for r in report.rows
                     if r.configured and r.cited < r.minimum]
            return Judgement(report.record(repairs=self.repairs, repairing=True, caveat=None),
                             repair=prompts.repair_problem(report.unsupported, short))
        caveat = report.caveat()
        return Judgement(report.record(repairs=self.repairs, repairing=False, caveat=caveat),
                         text=with_caveat(answer, caveat), outcome="answered_with_caveat")

    def report(self, answer: str, catalogue: Sequence[Mapping[str, Any]]) -> Report:
        names = [str(tool.get("name")) for tool in catalogue]
        code = {str(tool.get("name")) for tool in catalogue if tool.get("code")}
        try:
            evidence = evidence_from_records(self._results, code_tools=code)
            return validate(answer, self.grammar, evidence, tools=names)
        except Exception:  # a bug in a check: the answer is kept, flagged as unchecked
            return Report([], ran=False)
