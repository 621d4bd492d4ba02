"""The four checks: an answer read against the tool results of its own run.

``validate(answer, grammar, evidence, tools=...)`` is pure: the answer text,
the grammar, what the tools returned (``Evidence``, one per ``tool_result``)
and the names of the tools offered (tool names are never claims). It returns
a ``Report`` (one row per check, in ``CHECKS`` order).

What is read as a claim: the answer's prose — fenced code blocks are not
claims (a ```claims block is read by the claims check alone); tool names and
the grammar's ``ignore`` literals are masked first; identifiers are masked
before figures are looked for, and so are clock/date-shaped spans and list
markers (``1.`` at a line start).

What counts as evidence, per check:

- identifiers: every result's output and error, and the arguments of a
  failed call of a tool that is not a code tool (what it was asked about is
  what the typed error is about). A code-tool result whose identifiers all
  appear in its own arguments grounds none (the echo rule).
- figures: every result's output and error (timestamps masked), never the
  arguments; only results of ``figures_from`` tools when it is set; a
  code-tool result whose figures all appear in its own arguments grounds none.
- claims: the JSON documents among the outputs, by path; echo results
  excluded; numeric values only from ``figures_from`` tools when set.
- planes: the tools dispatched in the run (any ``tool_result``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from evalkit.grounding import text as tx
from evalkit.grounding.grammar import CHECKS, Grammar
from evalkit.grounding.report import Report, Row
from evalkit.patterns import Pattern


@dataclass(frozen=True)
class Evidence:
    """One tool result of the run, as the stream carries it."""

    tool: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    ok: bool = True
    output: str = ""
    error: str | None = None
    #: The tool is a shell or interpreter on this host (``ToolDescriptor.code``).
    code: bool = False
    handle: str | None = None

    def texts(self) -> list[str]:
        return [t for t in (self.output, self.error) if isinstance(t, str) and t]

    def arguments_text(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False, sort_keys=True, default=str)


def evidence_from_records(records: Iterable[Mapping[str, Any]], *,
                          code_tools: Collection[str] = ()) -> list[Evidence]:
    """Evidence from a stream's ``tool_result`` records (``code_tools``: names of code tools)."""
    out = []
    for record in records:
        if record.get("event") != "tool_result":
            continue
        arguments = record.get("arguments")
        output, error = record.get("output"), record.get("error")
        tool = str(record.get("tool") or "")
        out.append(Evidence(
            tool=tool, arguments=arguments if isinstance(arguments, Mapping) else {},
            ok=record.get("ok") is True,
            output=output if isinstance(output, str) else tx.compact(output or ""),
            error=error if isinstance(error, str) else None,
            code=tool in code_tools, handle=record.get("handle")))
    return out


def names_tool(entry: str, tool: str) -> bool:
    """A grammar's tool entry names ``tool`` exactly, or ``tool`` without its namespace."""
    return entry == tool or ("." in tool and tool.split(".", 1)[1] == entry)


# --- the answer side -------------------------------------------------------------------------

@dataclass
class _Answer:
    prose: str
    blocks: list[tuple[str, str]]


def _read_answer(answer: str, grammar: Grammar, tools: Collection[str]) -> _Answer:
    prose, blocks = tx.split_fences(answer or "")
    names = set(tools) | {t.split(".", 1)[1] for t in tools if "." in t}
    for pattern in (tx.literal_pattern(names), tx.literal_pattern(grammar.ignore)):
        if pattern is not None:
            prose = tx.mask_pattern(prose, pattern)
    return _Answer(prose, blocks)


def _ignored(token: str, grammar: Grammar) -> bool:
    if token in grammar.ignore:
        return True
    value = tx.value_of(token)
    return value is not None and any(tx.value_of(i) == value for i in grammar.ignore
                                     if tx.decimal_of(i) is not None)


def _ordered(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


# --- the checks ------------------------------------------------------------------------------

def _identifiers(answer: _Answer, grammar: Grammar, evidence: Sequence[Evidence]) -> Row:
    pattern = grammar.identifier_re
    if pattern is None:
        return Row.unconfigured("identifiers", "no identifier_pattern in the grammar")
    claimed = _ordered(m.group(0) for m in pattern.finditer(answer.prose)
                       if m.group(0) and not _ignored(m.group(0), grammar))
    found: set[str] = set()
    for item in evidence:
        own = set(m.group(0) for m in pattern.finditer(item.arguments_text()))
        given = set()
        for text in item.texts():
            given.update(m.group(0) for m in pattern.finditer(text))
        if item.code and given and given <= own:
            continue  # the echo rule
        found |= given
        if not item.ok and not item.code:
            found |= own
    missing = [token for token in claimed if token not in found]
    return Row.judged("identifiers", grammar, claimed, missing, noun="identifier",
                      where="in the tool results of this run")


def _figure_tokens(answer: _Answer, grammar: Grammar) -> list[tuple[str, Decimal]]:
    prose = answer.prose
    if grammar.identifier_re is not None:
        prose = tx.mask_pattern(prose, grammar.identifier_re)
    prose = tx.mask_pattern(tx.mask_clocks(prose), tx.LIST_MARKER)
    if grammar.number_re is not None:
        tokens = _pattern_figures(grammar.number_re, prose)
    else:
        tokens = list(tx.numbers_in(prose))
    return [(w, v) for w, v in tokens if not _ignored(w, grammar)]


def _pattern_figures(pattern: Pattern, text: str) -> list[tuple[str, Decimal]]:
    """(as written, value) of each ``number_pattern`` match: its first group when it has one."""
    out = []
    for match in pattern.finditer(text):
        groups = [g for g in match.groups() if g]
        written = (groups[0] if groups else match.group(0)).strip()
        value = tx.value_of(written)
        if written and value is not None:
            out.append((written, value))
    return out


def _measures(item: Evidence, grammar: Grammar) -> bool:
    """Whether ``item`` may ground a figure at all (``figures_from``)."""
    return grammar.figures_from is None or any(names_tool(e, item.tool)
                                               for e in grammar.figures_from)


def _echo(item: Evidence, values: set[Decimal]) -> bool:
    """A code-tool result that holds no figure its own arguments did not already hold."""
    if not item.code:
        return False
    own = {v for _, v in tx.numbers_in(tx.mask_clocks(item.arguments_text()))}
    return values <= own


def _figures(answer: _Answer, grammar: Grammar, evidence: Sequence[Evidence]) -> Row:
    if not grammar.configures("figures"):
        return Row.unconfigured("figures", "no number_pattern or figures_from in the grammar")
    tokens = _figure_tokens(answer, grammar)
    found: set[Decimal] = set()
    for item in evidence:
        if not _measures(item, grammar):
            continue
        values: set[Decimal] = set()
        for text in item.texts():
            values |= tx.evidence_values(text)
            if grammar.number_re is not None:  # what the answer's own pattern reads, read here too
                values.update(v for _, v in _pattern_figures(grammar.number_re,
                                                             tx.mask_clocks(text)))
        if not _echo(item, values):
            found |= values
    claimed = _ordered(w for w, _ in tokens)
    missing = _ordered(w for w, v in tokens if v not in found)
    scope = (f"in the results of {', '.join(grammar.figures_from)}" if grammar.figures_from
             else "in the tool results of this run")
    return Row.judged("figures", grammar, claimed, missing, noun="figure", where=scope)


def _claims(answer: _Answer, grammar: Grammar, evidence: Sequence[Evidence]) -> Row:
    if not grammar.claim_table:
        return Row.unconfigured("claims", "claim_table is not on in the grammar")
    blocks = [body for info, body in answer.blocks if info == "claims"]
    claims: list[Mapping[str, Any]] = []
    problems: list[str] = []
    for body in blocks:
        try:
            table = json.loads(body)
        except ValueError as exc:
            problems.append(f"claims block: not JSON ({exc.msg})")
            continue
        if isinstance(table, Mapping):
            table = [table]
        if not isinstance(table, list):
            problems.append("claims block: not a list of {path, value}")
            continue
        for entry in table:
            if isinstance(entry, Mapping) and isinstance(entry.get("path"), str) \
                    and "value" in entry:
                claims.append(entry)
            else:
                problems.append(f"claims block: {tx.compact(entry)} is not {{path, value}}")
    documents = []
    for item in evidence:
        document = tx.parse_json(item.output)
        if document is None or (item.code and _echo(item, set(tx.json_numbers(document)))):
            continue
        documents.append((item, document))
    tokens = [f"{c['path']} = {tx.compact(c['value'])}" for c in claims]
    missing = [token for claim, token in zip(claims, tokens, strict=True)
               if not _claim_holds(claim, documents, grammar)]
    row = Row.judged("claims", grammar, tokens + problems, missing + problems, noun="claim",
                     where="at its path in the JSON tool results")
    return row


def _claim_holds(claim: Mapping[str, Any], documents: Sequence[tuple[Evidence, Any]],
                 grammar: Grammar) -> bool:
    wanted = claim["value"]
    number = tx.decimal_of(wanted)
    for item, document in documents:
        if claim.get("handle") not in (None, item.handle):
            continue
        if claim.get("tool") is not None and not names_tool(str(claim["tool"]), item.tool):
            continue
        if number is not None and not _measures(item, grammar):
            continue
        try:
            got = _lookup(document, claim["path"])
        except LookupError:
            continue
        if number is not None:
            if tx.decimal_of(got) is not None and abs(tx.decimal_of(got)) == abs(number):
                return True
        elif got == wanted:
            return True
    return False


def _lookup(document: Any, path: str) -> Any:
    """``a.b[2].c`` / ``$.a.b.2.c`` / ``a["x.y"]`` into a JSON document; LookupError on a miss."""
    rest = path.strip()
    rest = rest[1:] if rest.startswith("$") else rest
    value = document
    for index, quoted, key in re.findall(r"\[\s*(-?\d+)\s*\]|\[\s*[\"']([^\"']*)[\"']\s*\]"
                                         r"|([^.\[\]]+)", rest):
        part: Any = int(index) if index else (quoted if quoted else key)
        if isinstance(value, list):
            if isinstance(part, str) and part.lstrip("-").isdigit():
                part = int(part)
            if not isinstance(part, int) or not -len(value) <= part < len(value):
                raise LookupError(path)
            value = value[part]
        elif isinstance(value, Mapping):
            if str(part) not in value:
                raise LookupError(path)
            value = value[str(part)]
        else:
            raise LookupError(path)
    return value


def _planes(answer: _Answer, grammar: Grammar, evidence: Sequence[Evidence]) -> Row:
    if not grammar.planes:
        return Row.unconfigured("planes", "no planes in the grammar")
    dispatched = {item.tool for item in evidence}
    claimed: list[str] = []
    missing: list[str] = []
    lowered = answer.prose.lower()
    for plane in grammar.planes:
        used = any(names_tool(entry, tool) for entry in plane.tools for tool in dispatched)
        for phrase in plane.claims:
            pattern = tx.literal_pattern([phrase.lower()])
            if pattern is None:
                continue
            for match in pattern.finditer(lowered):
                written = answer.prose[match.start():match.end()]
                claimed.append(written)
                if not used:
                    missing.append(written)
    return Row.judged("planes", grammar, _ordered(claimed), _ordered(missing),
                      noun="claim of work", where="among the tools dispatched for its plane")


_CHECKS = {"identifiers": _identifiers, "figures": _figures, "claims": _claims,
           "planes": _planes}


def validate(answer: str, grammar: Grammar, evidence: Sequence[Evidence], *,
             tools: Collection[str] = ()) -> Report:
    """Every check of ``grammar`` over ``answer`` against ``evidence``; one row per check."""
    read = _read_answer(answer, grammar, tools)
    return Report([_CHECKS[check](read, grammar, evidence) for check in CHECKS])
