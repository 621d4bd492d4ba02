"""One mission's verdict, judged from its run's summary — never from the agent's
own account of how it did.

Reasons accumulate; a verdict passes when it has none. Each reason is one
plain sentence saying what happened and what the mission wanted, because the
person reading a red CI line should not need to open the stream to know why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evalkit.eval import checks
from evalkit.eval.mission import Mission
from evalkit.eval.summary import RunSummary

#: The KPI names, in report order. A value the stream does not carry is None.
KPI_NAMES: tuple[str, ...] = (
    "records", "outcome", "steps", "max_steps", "elapsed_s", "budget", "tokens",
    "prompt_tokens", "completion_tokens", "model_calls", "cost", "tools", "tool_calls",
    "refusals", "reply_rejected", "staged", "gate_requested", "injected",
    "human_interventions", "grounding_ran", "grounded", "verified", "repairs",
    "answer_chars", "protocol", "profile", "sandbox", "run_id", "skipped_lines",
    "stagnation", "stagnation_step",
)


@dataclass
class Verdict:
    key: str
    flag: str
    split: str
    passed: bool
    reasons: list[str]
    missing: bool
    needs_reader: dict[str, list[str]]
    kpis: dict[str, Any]
    source: str | None = None
    #: The check behind each reason, parallel to ``reasons`` (see ``check_names``).
    checks: list[str] = field(default_factory=list)
    because: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = {
            "key": self.key,
            "flag": self.flag,
            "split": self.split,
            "passed": self.passed,
            "missing": self.missing,
            "reasons": list(self.reasons),
            "checks": list(self.checks),
            "needs_reader": self.needs_reader,
            "kpis": self.kpis,
            "source": self.source,
        }
        out.update(self.extra)
        return out


#: The reason of a mission with nothing at all where its run would be.
NOT_RUN = "not run"


def judge(mission: Mission, summary: RunSummary | None, *, source: str | None = None,
          missing: str | None = None) -> Verdict:
    """The verdict for one mission given its run's summary.

    ``summary`` is None when there is no stream; ``missing`` then says why
    (``not run`` for a declared mission with no run directory at all).
    """
    if summary is None:
        reason = missing or NOT_RUN
        return _verdict(mission, [("missing", reason)], missing=True, kpis=empty_kpis(),
                        source=source)
    if summary.records == 0:
        return _verdict(mission, [("empty_stream", "the stream is empty: the run failed")],
                        missing=False, kpis=kpis_of(summary), source=source)
    called = distinct(summary.tools_called)
    configured = checks.configured(mission.settings)
    found = _stream_reasons(summary) + machine_reasons(mission, summary, configured)
    verdict = _verdict(mission, found, missing=False, kpis=kpis_of(summary, tools=called),
                       source=source)
    for check in configured:
        if check.note is not None:
            verdict.extra[check.name] = check.note(mission, summary)
    return verdict


def altered(mission: Mission, reason: str, *, source: str | None = None) -> Verdict:
    """The verdict of a mission whose recording fails its seal (``evalkit.store.seal``):
    a failure of the recording, not of the agent, judged from nothing it claims."""
    return _verdict(mission, [(TAMPERED, reason)], missing=False, kpis=empty_kpis(),
                    source=source)


def _verdict(mission: Mission, found: list[tuple[str, str]], *, missing: bool,
             kpis: dict[str, Any], source: str | None) -> Verdict:
    checks, reasons = (list(column) for column in zip(*found, strict=True)) if found else ([], [])
    # Positional, in field order: a verdict per mission, and keywords cost a third more.
    return Verdict(mission.key, mission.flag, mission.split, not found, reasons, missing,
                   {"must": list(mission.must), "must_not": list(mission.must_not)},
                   kpis, source, checks, mission.because)


def _stream_reasons(s: RunSummary) -> list[tuple[str, str]]:
    found = []
    if s.nonconforming:
        quoted = "; ".join(s.problems)
        noun = "record does" if s.nonconforming == 1 else "records do"
        found.append(("contract", f"{s.nonconforming} {noun} not conform to the stream "
                                  f"contract: {quoted}"))
    if not s.finished:
        found.append(("unfinished", "the stream stopped without mission_finished: "
                                    "the run was cut off, not closed"))
    return found


#: The check of a recording altered after it was closed.
TAMPERED = "tampered"

#: The checks a stream answers before any the mission sets, each with how a report's
#: reason sentence is read back to it (``evalkit.eval.diff``).
STREAM_CHECKS: tuple[tuple[str, str], ...] = (
    ("missing", r"^not run$|^no stream\b"),
    (TAMPERED, r"^recording altered after it was closed"),
    ("empty_stream", r"^the stream is empty"),
    ("contract", r"not conform to the stream contract"),
    ("unfinished", r"^the stream stopped without mission_finished"),
)


def check_names() -> tuple[str, ...]:
    """Every check a reason can come from, as named in ``Verdict.checks``."""
    return (*(name for name, _ in STREAM_CHECKS),
            *(name for check in checks.registered() for name in check.names))


def __getattr__(name: str) -> Any:
    if name == "CHECKS":  # the registry can grow, so the list is made when asked for
        return check_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def machine_reasons(m: Mission, s: RunSummary,
                    configured: list[checks.Check] | None = None) -> list[tuple[str, str]]:
    """(check, sentence) for every check the mission sets that the run fails, in the
    registry's order (``configured``: those checks, when the caller has asked already)."""
    found: list[tuple[str, str]] = []
    for check in checks.configured(m.settings) if configured is None else configured:
        for said in check.judge(m, s):  # most yield nothing: no list made per check
            found.append(check.named(said))
    return found


#: Up to this many items, ``distinct`` scans a list (quadratic, but short).
_FEW = 16


def distinct(items: tuple[str | None, ...]) -> list[str]:
    """The items in first-seen order, without None."""
    if len(items) > _FEW:
        seen: dict[str | None, None] = dict.fromkeys(items)
        seen.pop(None, None)
        return list(seen)  # type: ignore[arg-type]
    found: list[str] = []
    for item in items:  # a run's few tool calls: a list scan beats building a dict
        if item is not None and item not in found:
            found.append(item)
    return found


def empty_kpis() -> dict[str, Any]:
    return dict.fromkeys(KPI_NAMES)


def kpis_of(s: RunSummary, *, tools: list[str] | None = None) -> dict[str, Any]:
    """The KPI row of one run, straight from its summary (``tools``: its distinct tools,
    a list the row then holds)."""
    gates = len(s.gate_tools)
    return {
        "records": s.records,
        "outcome": s.outcome,
        "steps": s.steps,
        "max_steps": s.max_steps,
        "elapsed_s": s.elapsed_s,
        "budget": s.budget,
        "tokens": s.total_tokens,
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": s.completion_tokens,
        "model_calls": s.model_calls,
        "cost": s.cost,
        "tools": distinct(s.tools_called) if tools is None else tools,
        "tool_calls": len(s.tools_called),
        "refusals": s.refusals,
        "reply_rejected": s.reply_rejected,
        "staged": s.staged,
        "gate_requested": gates,
        "injected": s.injected,
        "human_interventions": gates + s.injected,
        "grounding_ran": s.grounding_ran,
        "grounded": s.grounded,
        "verified": s.verified,
        "repairs": s.repairs,
        "answer_chars": len(s.answer) if s.answer is not None else None,
        "protocol": (s.protocol or "json") if s.started else None,
        "profile": s.profile,
        "sandbox": s.sandbox,
        "run_id": s.run_id,
        "skipped_lines": s.skipped,
        "stagnation": s.stagnation,
        "stagnation_step": s.stagnation_step,
    }
