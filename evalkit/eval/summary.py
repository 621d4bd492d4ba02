"""A run folded into the few facts its verdict and KPIs are made of.

Verdicts are never computed from raw records directly: a ``RunSummary`` sits
between, and ``summarize`` here is the one place it is made: from a stream
read under ``--runs``, and by ingest from the records it stores (the summary
a dataset keeps is this fold's, see ``evalkit.eval.tables``). One consumer,
``evalkit.eval.verdict``, judges it.

Normalisation rules (through ``evalkit.store.values``' ``text``/``number``/
``flag``): a field that should be text but holds another JSON value is that
value's compact JSON; a number is an int when integral, else a float;
booleans and non-numbers in numeric fields are null. "Last" means last by
file line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from itertools import count
from typing import Any

import orjson

from evalkit import signals
from evalkit.contract import conforms
from evalkit.store.values import flag, number, text

#: How many conformance problems a verdict quotes.
PROBLEMS_QUOTED = 3


@dataclass
class RunSummary:
    """Everything ``verdict`` and the KPIs read from one stream."""

    source: str | None = None
    records: int = 0
    skipped: int = 0
    #: Records that do not conform, and the first few problems as "line N: problem".
    nonconforming: int = 0
    problems: tuple[str, ...] = ()
    # From the last mission_started (two missions appended to one file: the later one,
    # whose mission_finished the outcome comes from; a resume writes no second one).
    started: bool = False
    run_id: str | None = None
    protocol: str | None = None
    profile: str | None = None
    sandbox: str | None = None
    # From the last mission_finished.
    finished: bool = False
    outcome: str | None = None
    reason: str | None = None
    steps: int | float | None = None
    max_steps: int | float | None = None
    elapsed_s: int | float | None = None
    #: ``mission_finished.budget`` as recorded: ``{which, limit, spent}`` (any JSON value).
    budget: Any = None
    prompt_tokens: int | float | None = None
    completion_tokens: int | float | None = None
    total_tokens: int | float | None = None
    model_calls: int | float | None = None
    cost: int | float | None = None
    # Counts and sequences over the whole stream.
    steps_started: int = 0
    tools_called: tuple[str, ...] = ()
    gate_tools: tuple[str, ...] = ()
    rejected_tools: tuple[str, ...] = ()
    reply_rejected: int = 0
    refusals: int = 0
    staged: bool = False
    injected: int = 0
    # From the last answer.
    answered: bool = False
    answer: str | None = None
    # Grounding: any record at all, and the last verdict record (repairing false).
    grounding_records: int = 0
    grounding_verdict: bool = False
    grounding_ran: bool | None = None
    grounded: bool | None = None
    verified: bool | None = None
    repairs: int | float | None = None
    # Stagnation (evalkit.signals, the supervisor's own fold): the first signal that
    # fired and the index of the step that completed its pattern; None when none fired.
    stagnation: str | None = None
    stagnation_step: int | float | None = None
    #: The judgments a model judge recorded beside the stream (not folded from it: see
    #: ``evalkit.eval.judging``), by key; None when none were.
    judgments: Mapping[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict, tuples as lists.

        Shallow on purpose: every value is a scalar or a tuple of strings, and
        ``dataclasses.asdict``'s deep copy was a sixth of an ingest's time.
        """
        out = {name: getattr(self, name) for name in _FIELDS}
        for key in ("problems", "tools_called", "gate_tools", "rejected_tools"):
            out[key] = list(out[key])
        return out


#: RunSummary's fields in declaration order, what ``as_dict`` lists.
_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RunSummary))


def summarize(records: Iterable[Mapping[str, Any]], lines: Iterable[int] | None = None, *,
              source: str | None = None, skipped: int = 0) -> RunSummary:
    """Fold one stream's records (in file order) into a ``RunSummary``.

    ``lines`` are the records' file lines, parallel to ``records`` (1, 2, … when
    None); they only show in the quoted problems.
    """
    s = RunSummary(source=source, skipped=skipped)
    problems: list[str] = []
    tools_called: list[str] = []
    gate_tools: list[str] = []
    rejected_tools: list[str] = []
    # The stagnation watch reads four events of the main line. It is fed here as
    # ``watch.feed(record)`` would feed it, but with a tool result keyed by its
    # canonical text instead of that text's hash: the fold only compares keys, and
    # the two are equal exactly together.
    watch = signals.Watch()
    feed, main_line = watch.feed_parts, signals.main_line
    numbered = zip(records, count(1) if lines is None else lines, strict=False)
    seen = 0
    # Record order (see ``out_of_order``): the line of the mission_finished that closed
    # the mission (None while one is open) and the last step index of the mission.
    closed_at: Any = None
    last_step: Any = None
    for record, line in numbered:
        seen += 1
        found = conforms(record)
        event = record.get("event")
        if seen == 1 or closed_at is not None or event == "step_started":
            wrong, closed_at, last_step = out_of_order(record, event, seen == 1, closed_at,
                                                       last_step, line)
            if wrong is not None:
                found = [*found, wrong]
        elif event == "mission_finished":
            closed_at = line
        elif event == "mission_started":
            last_step = None
        if found:
            s.nonconforming += 1
            if len(problems) < PROBLEMS_QUOTED:
                problems.extend(f"line {line}: {p}" for p in found[: PROBLEMS_QUOTED - len(problems)])
        if event == "tool_call":
            tools_called.append(text(record.get("tool")))
            if main_line(record):
                feed(event)
        elif event == "tool_result":
            if record.get("ok") is False:
                s.refusals += 1
            if main_line(record):
                feed(event, result=call_text(record))
        elif event == "step_started":
            s.steps_started += 1
            if "plan" in record:
                s.staged = True
            if record.get("injected"):
                s.injected += 1
            if main_line(record):
                feed(event, index=record.get("index"), review=record.get("review"))
        elif event == "reply_rejected":
            s.reply_rejected += 1
            if "tool" in record and record["tool"] is not None:
                rejected_tools.append(text(record["tool"]))
            if main_line(record):
                feed(event)
        elif event == "gate_requested":
            gate_tools.append(text(record.get("tool")))
        elif event == "answer":
            s.answered = True
            s.answer = text(record.get("text"))
        elif event == "grounding":
            _grounding(s, record)
        elif event == "mission_finished":
            _finish(s, record)
        elif event == "mission_started":
            _start(s, record)
    s.records = seen
    s.stagnation, s.stagnation_step = first_firing(watch.firings)
    s.problems = tuple(problems)
    s.tools_called = tuple(tools_called)
    s.gate_tools = tuple(gate_tools)
    s.rejected_tools = tuple(rejected_tools)
    return s


#: What may follow a ``mission_finished``: a new mission, or a resume going on (its first
#: step_started carries ``resumed``; one that ends before its first step writes only its
#: own mission_finished).
AFTER_FINISHED = frozenset({"mission_started", "mission_finished"})


def out_of_order(record: Mapping[str, Any], event: Any, first: bool, closed_at: Any,
                 last_step: Any, line: Any) -> tuple[str | None, Any, Any]:
    """The record-order rule, the one place it lives (CONTRACT.md, "Order").

    A stream begins with ``mission_started``; after a ``mission_finished`` comes only a
    new ``mission_started`` (two missions appended: the later one is read), a
    ``step_started`` carrying ``resumed`` (a resume writes no mission_started) or the
    ``mission_finished`` of a resume that ended before its first step; a mission's
    ``step_started`` indexes increase, across its resumes too. Returns the problem (or
    None) and the order state after this record: (problem, closed_at, last_step).
    """
    wrong = None
    if first and event != "mission_started":
        wrong = f"the stream begins with {_named(event)}; mission_started comes first"
    elif closed_at is not None and event not in AFTER_FINISHED:
        if event == "step_started" and record.get("resumed"):
            closed_at = None  # a resume goes on
        else:
            wrong = (f"{_named(event)} after the mission_finished of line {closed_at}: only "
                     "a new mission_started or a resumed step_started may follow it")
    if event == "mission_started":
        return wrong, None, None
    if event == "mission_finished":
        return wrong, line, last_step
    if event == "step_started":
        index = record.get("index")
        if type(index) in (int, float):
            if wrong is None and last_step is not None and index <= last_step:
                wrong = f"step_started index {index} after index {last_step}: steps increase"
            last_step = index if last_step is None else max(index, last_step)
    return wrong, closed_at, last_step


def _named(event: Any) -> str:
    return event if isinstance(event, str) else f"a record without an event ({event!r})"


def call_text(record: Mapping[str, Any]) -> str:
    """``signals.canonical(record)``, written by orjson when that gives the same text.

    The stdlib encoder is most of the cost of folding a tool result; orjson
    writes the same bytes for plain JSON values (see ``_same_in_orjson``), and
    anything else takes the stdlib path, so the result never differs.
    """
    key = signals.call_key(record)
    if _same_in_orjson(key):
        try:
            return orjson.dumps(key, option=orjson.OPT_SORT_KEYS).decode()
        except orjson.JSONEncodeError:  # an int past 64 bits, a lone surrogate
            pass
    return signals.canonical(record)


#: Types orjson and the stdlib encoder write alike, whatever the value (an int past
#: 64 bits makes orjson raise instead, which sends the record the stdlib way).
_ALIKE: frozenset[type] = frozenset({str, int, bool, type(None)})
_INF = float("inf")


def _same_in_orjson(value: Any) -> bool:
    """Whether orjson writes ``value`` as sorted compact JSON exactly as the stdlib
    encoder does: exact JSON types, string keys, and floats outside the band
    (below 1e-4) where the two spell exponents differently. NaN and infinities
    fail the float test; what orjson refuses outright it raises on. (Plain loops:
    this runs for every tool result, and ``all(map(...))`` costs several times more.)"""
    kind = type(value)
    if kind in _ALIKE:
        return True
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or (type(item) not in _ALIKE and not _same_in_orjson(item)):
                return False
        return True
    if kind is list:
        for item in value:
            if type(item) not in _ALIKE and not _same_in_orjson(item):
                return False
        return True
    if kind is float:
        return value == 0.0 or 1e-4 <= abs(value) < _INF
    return False


def _start(s: RunSummary, record: Mapping[str, Any]) -> None:
    s.started = True
    s.run_id = text(record.get("run_id"))
    s.protocol = text(record.get("protocol"))
    s.profile = text(record.get("profile"))
    s.sandbox = text(record.get("sandbox"))


def _grounding(s: RunSummary, record: Mapping[str, Any]) -> None:
    s.grounding_records += 1
    if record.get("repairing") is not True:
        s.grounding_verdict = True
        s.grounding_ran = flag(record.get("ran"))
        s.grounded = flag(record.get("grounded"))
        s.verified = flag(record.get("verified"))
        s.repairs = number(record.get("repairs"))


def first_firing(firings: list[signals.Firing]) -> tuple[str | None, int | float | None]:
    """(signal, step) of the first stagnation signal that fired, normalised; (None, None)."""
    if not firings:
        return None, None
    return text(firings[0].signal), number(firings[0].step)


def _finish(s: RunSummary, record: Mapping[str, Any]) -> None:
    s.finished = True
    s.outcome = text(record.get("outcome"))
    s.reason = text(record.get("reason"))
    s.steps = number(record.get("steps"))
    s.max_steps = number(record.get("max_steps"))
    s.elapsed_s = number(record.get("elapsed_s"))
    s.budget = record.get("budget")  # {which, limit, spent}, as recorded
    usage = record.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    s.prompt_tokens = number(usage.get("prompt_tokens"))
    s.completion_tokens = number(usage.get("completion_tokens"))
    s.total_tokens = number(usage.get("total_tokens"))
    s.model_calls = number(usage.get("calls"))
    s.cost = number(usage.get("cost"))

