"""The conformance rules, generated from ``evalkit.contract`` wherever the contract says them.

One rule per entry of the contract's tables — each required field (``FIELDS``), each
field's type (``TYPES``), each event that carries an outcome (``OUTCOMES``), each reason
word (``REASONS``), each order rule (``ORDER_RULES``), each exit promise
(``EXIT_RULES``), each usage key (``USAGE``), each closed value set (``VALUE_SETS``) — then the few the contract says in prose
(indexes, tool calls and results in pairs, a gate decision acted on, a tool error). A
rule's id is stable: ``field.<event>.<field>``, ``order.<id>``, ``exit.<id>``, … so a CI
log and a test can name it. Rules judge the stream, never the answers.

Each check returns a ``Finding``: pass, fail with the first offending record
(``key/events.jsonl:LINE``), or skip with why (the battery never produced what the rule
is about).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from evalkit import contract as c
from evalkit.eval.conform.battery import Ran
from evalkit.eval.summary import AFTER_FINISHED, out_of_order

PASS, FAIL, SKIP = "pass", "fail", "skip"


@dataclass(frozen=True)
class Finding:
    status: str
    where: str | None = None
    detail: str | None = None


Battery = list[Ran]
Check = Callable[[Battery], Finding]


@dataclass(frozen=True)
class Rule:
    id: str
    #: What the rule holds an agent to, in one line.
    says: str
    check: Check


def ok() -> Finding:
    return Finding(PASS)


def fail(ran: Ran, line: int | None, detail: str) -> Finding:
    return Finding(FAIL, ran.where(line), detail)


def skip(why: str) -> Finding:
    return Finding(SKIP, None, why)


def needs_records(check: Check) -> Check:
    """A rule about records says nothing when no mission wrote one: skipped, not passed."""
    def guarded(battery: Battery) -> Finding:
        if not any(ran.records or ran.undecoded for ran in battery):
            return skip("no record arrived on the sink from any mission")
        return check(battery)
    return guarded


def records(battery: Battery, event: str | None = None) -> Iterator[tuple[Ran, int, dict[str, Any]]]:
    """Every decoded mapping of the battery (of one event), with its mission and line."""
    for ran in battery:
        for line, record in ran.records:
            if isinstance(record, dict) and (event is None or record.get("event") == event):
                yield ran, line, record


def _each(event: str, problem: Callable[[dict[str, Any]], str | None]) -> Check:
    """A check of every record of ``event``: the first whose ``problem`` is not None fails."""
    def check(battery: Battery) -> Finding:
        seen = False
        for ran, line, record in records(battery, event):
            seen = True
            found = problem(record)
            if found is not None:
                return fail(ran, line, found)
        return ok() if seen else skip(f"no {event} record in the battery")
    return check


def _types_text(types: tuple[str, ...]) -> str:
    return " or ".join(types)


def _typed(value: Any, types: tuple[str, ...]) -> bool:
    kind = c.json_type(value)
    return kind in types or (kind == "integer" and "number" in types)


# -- from the contract's tables --------------------------------------------------------------


def field_rules() -> list[Rule]:
    rules = []
    for event in c.EVENTS:
        for name in c.FIELDS[event]:
            rules.append(Rule(f"field.{event}.{name}", f"every {event} carries {name}",
                              _each(event, lambda r, n=name: None if n in r
                                    else f"{r.get('event')} without '{n}'")))
    return rules


def type_rules() -> list[Rule]:
    rules = []
    for event in c.EVENTS:
        for name, types in c.TYPES[event].items():
            def problem(r: dict[str, Any], n: str = name, t: tuple[str, ...] = types
                        ) -> str | None:
                if n not in r or _typed(r[n], t):
                    return None
                return f"{n} is {c.json_type(r[n])} {_preview(r[n])}; the contract says " \
                       f"{_types_text(t)}"
            rules.append(Rule(f"type.{event}.{name}",
                              f"{event}.{name} is {_types_text(types)}", _each(event, problem)))
    return rules


def outcome_rules() -> list[Rule]:
    words = ", ".join(c.OUTCOMES)
    return [Rule(f"outcome.{event}", f"{event}.outcome is one of {words}",
                 _each(event, lambda r: None if "outcome" not in r or r["outcome"] in c.OUTCOMES
                       else f"outcome {r['outcome']!r} is not one of {words}"))
            for event in c.EVENTS if "outcome" in c.FIELDS[event]]


def reason_rules() -> list[Rule]:
    def never_an_outcome(word: str) -> Check:
        def check(battery: Battery) -> Finding:
            for ran, line, record in records(battery):
                if record.get("outcome") == word:
                    return fail(ran, line, f"{word!r} written as an outcome; it is a reason")
            return ok()
        return check
    return [Rule(f"reason.{word}", f"{word!r} is a mission_finished reason, never an outcome",
                 needs_records(never_an_outcome(word))) for word in c.REASONS]


def _values_at(record: Any, path: list[str]) -> Iterator[Any]:
    """The values a ``VALUE_SETS`` path names inside one record (``x[]`` walks a list)."""
    if not path:
        yield record
        return
    head, rest = path[0], path[1:]
    many = head.endswith("[]")
    name = head.removesuffix("[]")
    if not isinstance(record, dict) or name not in record:
        return
    items = record[name] if many else [record[name]]
    for item in items if isinstance(items, list) else []:
        yield from _values_at(item, rest)


def value_rules() -> list[Rule]:
    rules = []
    for path, words in c.VALUE_SETS.items():
        event, *inner = path.split(".")
        listed = ", ".join(words)

        def problem(r: dict[str, Any], inner: list[str] = inner, words: tuple[str, ...] = words,
                    path: str = path, listed: str = listed) -> str | None:
            for value in _values_at(r, inner):
                if value not in words:
                    return f"{path} is {_preview(value)}, not one of {listed}"
            return None
        rules.append(Rule(f"value.{path}", f"{path} is one of {listed}", _each(event, problem)))
    return rules


def usage_rules() -> list[Rule]:
    rules = []
    for key, types in c.USAGE.items():
        def check(battery: Battery, k: str = key, t: tuple[str, ...] = types) -> Finding:
            seen = False
            for ran, line, record in records(battery):
                if "usage" not in record:
                    continue
                usage = record["usage"]
                if not isinstance(usage, dict):
                    return fail(ran, line, f"usage is {c.json_type(usage)}, not an object")
                if k not in usage:
                    continue
                seen = True
                value = usage[k]
                if not _typed(value, t) or (isinstance(value, (int, float)) and value < 0):
                    return fail(ran, line, f"usage.{k} is {_preview(value)}; the contract says "
                                f"{_types_text(t)} (absent, never null, when not reported)")
            return ok() if seen else skip(f"no usage carries {k}")
        rules.append(Rule(f"usage.{key}", f"usage.{key}, when present, is {_types_text(types)}",
                          check))
    return rules


# -- order: the scorer's own rule (summary.out_of_order), told apart by ORDER_RULES id ------


def _order_problems(ran: Ran) -> Iterator[tuple[str, int, str]]:
    """(order rule id, line, problem) for every record of one stream out of order."""
    closed_at: Any = None
    last_step: Any = None
    first = True
    started = 0
    for line, record in ran.records:
        if not isinstance(record, dict):
            continue
        event = record.get("event")
        if event == "mission_started":
            started += 1
            if started > 1:
                yield "new_mission", line, ("a second mission_started: one spawn runs one "
                                            "mission, so the first was cut off")
        was_closed = closed_at is not None
        wrong, closed_at, last_step = out_of_order(record, event, first, closed_at, last_step,
                                                   line)
        if wrong is not None:
            if first:
                rule = "first"
            elif was_closed and event not in AFTER_FINISHED and not (
                    event == "step_started" and record.get("resumed")):
                rule = "after_finished"
            else:
                rule = "steps_increase"
            yield rule, line, wrong
        first = False


def _order_check(rule_id: str) -> Check:
    def check(battery: Battery) -> Finding:
        for ran in battery:
            for found, line, problem in _order_problems(ran):
                if found == rule_id:
                    return fail(ran, line, problem)
        return ok()
    return needs_records(check)


ORDER_CHECKS: dict[str, Check] = {rule_id: _order_check(rule_id) for rule_id in
                                  ("first", "after_finished", "new_mission", "steps_increase")}


def order_rules() -> list[Rule]:
    return [Rule(f"order.{rule_id}", sentence,
                 ORDER_CHECKS.get(rule_id, _unchecked("the kit has no check for it yet")))
            for rule_id, sentence in c.ORDER_RULES.items()]


def _unchecked(why: str) -> Check:
    return lambda battery: skip(why)


def _preview(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
