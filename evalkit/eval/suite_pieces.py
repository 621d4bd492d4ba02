"""Cutting a large JSON suite into pieces that processes parse side by side.

Parsing is the one step of loading a 100,000-mission suite that cannot be
shared out after the fact, so a JSON suite is cut before it is parsed: the
top-level fields around ``missions``, and runs of whole mission objects.
Cut points are found by a cheap pattern (``}, {`` between missions) and
proved by the parses: the head parses only if its ``[`` opened the
top-level ``missions`` list, each piece only if it is a run of complete
values (so it starts and ends between missions, never inside a string), the
tail only if it closes the document. Any doubt (a YAML suite, a repeated
key, a cut that lands inside a string) gives None, and the caller loads the
suite whole, which reports whatever is wrong in its own words.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.eval.suite import Mission, Suite, SuiteError, _Builder, _Tree

#: Where each part may be: the parses below decide whether it is.
_MISSIONS = re.compile(r'"missions"\s*:\s*\[')
_BETWEEN = re.compile(r"(\})\s*,\s*(\{)")
_CLOSE = re.compile(r"\}\s*\]")


@dataclass(frozen=True)
class Pieces:
    """Where a suite's text is cut: ``fields`` are its top-level fields but missions,
    ``spans`` the [start, end) of each run of mission objects, in file order."""

    path: Path
    text: str
    fields: dict[str, Any]
    spans: tuple[tuple[int, int], ...]


class _Repeated(ValueError):
    """A mapping repeats a key: only the whole-suite loader words that."""


def _pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(items)
    if len(out) != len(items):
        raise _Repeated
    return out


def _loads(text: str) -> Any | None:
    try:
        return json.loads(text, object_pairs_hook=_pairs)
    except (ValueError, RecursionError):
        return None


def cut(path: Path, text: str, parts: int) -> Pieces | None:
    """The suite's text cut into at most ``parts`` runs of missions, or None."""
    if not text.lstrip().startswith("{"):
        return None
    opened = _MISSIONS.search(text)
    if opened is None:
        return None
    head = _loads(text[:opened.end()] + "]}")
    if not isinstance(head, dict) or list(head)[-1:] != ["missions"] or head["missions"] != []:
        return None
    start = opened.end()
    closing = _CLOSE.search(text, start)
    if closing is None or not text[start:closing.start()].lstrip().startswith("{"):
        return None
    end = closing.start() + 1  # just past the last mission's "}"
    fields = _tail(text[closing.end():])
    if fields is None or "missions" in fields or fields.keys() & head.keys():
        return None
    del head["missions"]
    return Pieces(path, text, {**head, **fields}, tuple(_split(text, start, end, parts)))


def _split(text: str, start: int, end: int, parts: int) -> list[tuple[int, int]]:
    """[start, end) cut into at most ``parts`` runs of whole mission objects, near-even."""
    spans, begin = [], start
    for k in range(1, parts):
        target = start + (end - start) * k // parts
        found = _BETWEEN.search(text, max(target, begin), end)
        if found is None:
            break
        spans.append((begin, found.end(1)))
        begin = found.start(2)
    spans.append((begin, end))
    return spans


def _tail(rest: str) -> dict[str, Any] | None:
    """The top-level fields after the missions list (the text after its "]")."""
    rest = rest.lstrip()
    if rest.startswith(","):
        found = _loads("{" + rest[1:])
        return found if isinstance(found, dict) else None
    return {} if rest.rstrip() == "}" else None


class Odd(Exception):
    """Something about a piece that only the whole-suite loader can word."""


def missions(pieces: Pieces, index: int, chunk_chars: int = 2**21) -> Iterator[tuple[Mission, ...]]:
    """Piece ``index``'s missions, a few thousand at a time (raises ``Odd``).

    Parsed and built a chunk at a time, so the parsed JSON of one chunk is
    freed before the next is parsed: the memory is reused rather than
    grown, which is time too where page faults are dear.
    """
    start, end = pieces.spans[index]
    parts = max(1, (end - start) // chunk_chars)
    for begin, stop in _split(pieces.text, start, end, parts):
        raw = _loads("[" + pieces.text[begin:stop] + "]")
        if not isinstance(raw, list):
            raise Odd
        builder = _Builder(pieces.path, _Tree())
        built = builder.missions(raw)
        if builder.problems:
            raise Odd
        yield built


def build_fields(pieces: Pieces) -> Suite | None:
    """The suite's own fields, without missions (for its name and the suite-wide rules)."""
    try:
        return _Builder(pieces.path, _Tree()).suite({**pieces.fields, "missions": []})
    except SuiteError:
        return None


__all__ = ["Odd", "Pieces", "build_fields", "cut", "missions"]
