"""One mission's verdict, judged from its run's summary — never from the agent's
own account of how it did.

Reasons accumulate; a verdict passes when it has none. Each reason is one
plain sentence saying what happened and what the mission wanted, because the
person reading a red CI line should not need to open the stream to know why.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from evalkit.eval.suite import Mission
from evalkit.eval.summary import RunSummary
from evalkit.patterns import compile_pattern

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
    #: The machine check behind each reason, parallel to ``reasons`` (see CHECKS).
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
    called = _distinct(summary.tools_called)
    found = _stream_reasons(summary) + machine_reasons(mission, summary, called=called)
    return _verdict(mission, found, missing=False, kpis=kpis_of(summary, tools=called),
                    source=source)


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

#: Every check a reason can come from, as named in ``Verdict.checks``.
CHECKS: tuple[str, ...] = (
    "missing", TAMPERED, "empty_stream", "contract", "unfinished", "expects_tools", "forbids_tools",
    "expects_outcome", "expects_grounded", "answer", "answer_must_match",
    "answer_must_not_match", "answer_pattern", "max_reply_rejected", "must_not_stage",
)


def machine_reasons(m: Mission, s: RunSummary, *,
                    called: list[str] | None = None) -> list[tuple[str, str]]:
    """(check, sentence) for every configured machine check that failed.

    ``called`` is the run's distinct tools, when the caller has them already.
    """
    found: list[tuple[str, str]] = []
    called = _distinct(s.tools_called) if called is None else called
    for tool in m.expects_tools or ():
        if tool not in called:
            found.append(("expects_tools", f"never called {tool}; it called {called!r}"))
    for tool in m.forbids_tools or ():
        if tool in called:
            found.append(("forbids_tools",
                          f"reached for {tool}, which this mission forbids (and called it)"))
        elif tool in s.gate_tools or tool in s.rejected_tools:
            found.append(("forbids_tools", f"reached for {tool}, which this mission forbids "
                                           "(named, and the call never left the loop)"))
    if m.expects_outcome is not None and s.finished:
        wanted = {m.expects_outcome}
        if m.expects_caveat_ok:
            wanted.add("answered_with_caveat")
        if s.outcome not in wanted:
            also = " (or answered_with_caveat)" if len(wanted) > 1 else ""
            found.append(("expects_outcome", f"ended {s.outcome!r}; this mission wants "
                                             f"{m.expects_outcome}{also}"))
    if m.expects_grounded is not None:
        if not s.grounding_verdict:
            found.append(("expects_grounded", "no grounding verdict was recorded; "
                                              f"this mission wants grounded={m.expects_grounded}"))
        elif s.grounded is not m.expects_grounded:
            found.append(("expects_grounded", f"grounding says grounded={s.grounded}; "
                                              f"this mission wants {m.expects_grounded}"))
    found.extend(_answer_reasons(m, s))
    if m.max_reply_rejected is not None and s.reply_rejected > m.max_reply_rejected:
        noun = "reply" if s.reply_rejected == 1 else "replies"
        found.append(("max_reply_rejected", f"{s.reply_rejected} {noun} could not be read; "
                                            f"this mission allows {m.max_reply_rejected}"))
    if m.must_not_stage and s.staged:
        found.append(("must_not_stage", "the run was STAGED: a plan rode step_started"))
    return found


def _answer_reasons(m: Mission, s: RunSummary) -> list[tuple[str, str]]:
    if not m.answer_must_match and not m.answer_must_not_match:
        return []
    if not s.answered:
        return [("answer", "no answer was recorded; this mission checks the answer text")]
    found: list[tuple[str, str]] = []
    # An answer record whose text is null is searched as empty text: what must
    # match does not, and nothing it must not match is there (the seed's reading).
    answer = s.answer if s.answer is not None else ""
    # Lowered once for every pattern that ignores case (None: not ASCII, a regex must fold).
    lowered = (answer.lower() if answer.isascii() else None) if _ignores_case(
        m.answer_must_match, m.answer_must_not_match) else _UNSET
    for pattern in m.answer_must_match or ():
        hit = _search(pattern, answer, lowered)
        if isinstance(hit, str):
            found.append(("answer_pattern", hit))
        elif not hit:
            found.append(("answer_must_match", f"the answer does not match /{pattern}/"))
    for pattern in m.answer_must_not_match or ():
        hit = _search(pattern, answer, lowered)
        if isinstance(hit, str):
            found.append(("answer_pattern", hit))
        elif hit:
            found.append(("answer_must_not_match",
                          f"the answer matches /{pattern}/, which this mission forbids"))
    return found


_UNSET: Any = object()


@functools.lru_cache(maxsize=4096)
def _ignores_case(*patterns: tuple[str, ...] | None) -> bool:
    """Whether any of the patterns ignores case (a suite repeats its pattern lists)."""
    return any(p.startswith("(?i)") for group in patterns for p in group or ())


def _search(pattern: str, answer: str, lowered: str | None = _UNSET) -> bool | str:
    """Whether the pattern is found, or the sentence saying it cannot be used.

    The meaning is RE2's search (``evalkit.patterns``: linear in the answer,
    whatever the pattern). Most answer patterns are plain words, though, and
    a case-insensitive regex scan of a long answer that does not contain them
    is the slowest step of a verdict; those are answered by a substring test
    that finds exactly what the regex would. ``lowered`` is
    ``answer.lower()`` when the answer is ASCII and None when it is not, if
    the caller has it already.
    """
    literal, folded = _as_literal(pattern)
    if literal is not None:
        if not folded:
            return literal in answer
        if lowered is _UNSET:
            lowered = answer.lower() if answer.isascii() else None
        if lowered is not None:  # no character outside ASCII can fold onto these
            return literal in lowered
    try:
        return compile_pattern(pattern).search(answer) is not None
    except ValueError as refused:
        return f"the pattern /{pattern}/ {refused}; this check cannot pass"


#: Characters that stand for themselves in a regex, outside a character class.
_PLAIN = re.compile(r"[A-Za-z0-9 _,'\":;!@#%&=<>/~-]*")


@functools.lru_cache(maxsize=4096)
def _as_literal(pattern: str) -> tuple[str | None, bool]:
    """(the text a pattern matches literally, whether case is ignored), or (None, False).

    Only ASCII patterns of plain characters, optionally led by ``(?i)``, qualify.
    """
    folded = pattern.startswith("(?i)")
    body = pattern[4:] if folded else pattern
    if not _PLAIN.fullmatch(body):
        return None, False
    return (body.lower() if folded else body), folded


#: Up to this many items, ``_distinct`` scans a list (quadratic, but short).
_FEW = 16


def _distinct(items: tuple[str | None, ...]) -> list[str]:
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
        "tools": _distinct(s.tools_called) if tools is None else tools,
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
