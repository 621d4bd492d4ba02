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

import codecs
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.eval.strict_json import loads as _loads
from evalkit.eval.suite import Mission, Suite, SuiteError, _Builder, _Tree
from evalkit.eval.suite import default_name as suite_default_name

#: Where each part may be: the parses below decide whether it is.
_MISSIONS = re.compile(rb'"missions"[ \t\n\r]*:[ \t\n\r]*\[')
_BETWEEN = re.compile(rb"(\})[ \t\n\r]*,[ \t\n\r]*(\{)")
_CLOSE = re.compile(rb"\}[ \t\n\r]*\]")
#: An object opening after white space: matched in place, since slicing and
#: stripping a 600 MB suite to look at its first byte copies all of it.
_OPENS = re.compile(rb"[ \t\n\r]*\{")
#: What JSON counts as white space (str.strip would take more).
_SPACE = b" \t\n\r"


@dataclass(frozen=True)
class Pieces:
    """Where a suite's text is cut: ``fields`` are its top-level fields but missions,
    ``spans`` the [start, end) of each run of mission objects, in file order."""

    path: Path
    #: The file's bytes (after any BOM): kept as bytes, since a str of a non-ASCII
    #: suite takes up to four times the room, and each piece is decoded as it is parsed.
    data: bytes
    fields: dict[str, Any]
    spans: tuple[tuple[int, int], ...]
    #: The suite's name if it gives none (``suite.default_name`` of what was given).
    default_name: str


def cut(path: Path, data: bytes, parts: int, default_name: str | None = None) -> Pieces | None:
    """The suite file's bytes cut into at most ``parts`` runs of missions, or None.

    ``default_name`` names a suite that gives no name (``suite.default_name`` of the
    path given, when that was a folder; by default, of ``path``)."""
    data = data.removeprefix(codecs.BOM_UTF8)
    if not _OPENS.match(data) or b"\0" in data:
        return None
    opened = _MISSIONS.search(data)
    if opened is None:
        return None
    head = _loads(data[:opened.end()] + b"]}")
    if not isinstance(head, dict) or list(head)[-1:] != ["missions"] or head["missions"] != []:
        return None
    start = opened.end()
    closing = _CLOSE.search(data, start)
    if closing is None or not _OPENS.match(data, start, closing.start()):
        return None
    end = closing.start() + 1  # just past the last mission's "}"
    fields = _tail(data[closing.end():])
    if fields is None or "missions" in fields or fields.keys() & head.keys():
        return None
    del head["missions"]
    return Pieces(path, data, {**head, **fields}, tuple(_split(data, start, end, parts)),
                  default_name if default_name is not None else suite_default_name(path))


def _split(data: bytes, start: int, end: int, parts: int) -> list[tuple[int, int]]:
    """[start, end) cut into at most ``parts`` runs of whole mission objects, near-even."""
    spans, begin = [], start
    for k in range(1, parts):
        target = start + (end - start) * k // parts
        found = _BETWEEN.search(data, max(target, begin), end)
        if found is None:
            break
        spans.append((begin, found.end(1)))
        begin = found.start(2)
    spans.append((begin, end))
    return spans


def _tail(rest: bytes) -> dict[str, Any] | None:
    """The top-level fields after the missions list (the bytes after its "]")."""
    rest = rest.lstrip(_SPACE)
    if rest.startswith(b","):
        found = _loads(b"{" + rest[1:])
        return found if isinstance(found, dict) else None
    return {} if rest.rstrip(_SPACE) == b"}" else None


class Odd(Exception):
    """Something about a piece that only the whole-suite loader can word."""


#: Suite text parsed at once by ``missions``: about a hundred missions.
CHUNK_CHARS = 2**16


def missions(pieces: Pieces, index: int, chunk_chars: int = CHUNK_CHARS
             ) -> Iterator[tuple[Mission, ...]]:
    """Piece ``index``'s missions, about a hundred at a time (raises ``Odd``).

    Parsed and built a chunk at a time, and each chunk is judged and rendered
    before the next is parsed, so what one chunk makes (its parsed JSON,
    missions, summaries, verdicts, their JSON) is small enough to stay in the
    CPU's caches and its memory is reused rather than grown. At 100,000
    missions, chunks of 64 KB took a third less CPU than chunks of 2 MB
    (about 3,000 missions): every object of a verdict is touched several times,
    and with the larger chunk each touch was a trip to main memory.
    """
    start, end = pieces.spans[index]
    parts = max(1, (end - start) // chunk_chars)
    for begin, stop in _split(pieces.data, start, end, parts):
        raw = _loads(b"[" + pieces.data[begin:stop] + b"]")
        if not isinstance(raw, list):
            raise Odd
        builder = _Builder(pieces.path, _Tree(), pieces.default_name)
        built = builder.missions(raw)
        if builder.problems:
            raise Odd
        yield built


def build_fields(pieces: Pieces) -> Suite | None:
    """The suite's own fields, without missions (for its name and the suite-wide rules)."""
    try:
        builder = _Builder(pieces.path, _Tree(), pieces.default_name)
        return builder.suite({**pieces.fields, "missions": []})
    except SuiteError:
        return None


__all__ = ["Odd", "Pieces", "build_fields", "cut", "missions"]
