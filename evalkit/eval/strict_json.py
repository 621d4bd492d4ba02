"""JSON as the suite loaders read it: strict UTF-8, and no mapping may repeat a key.

A repeated key is a mistake in a suite, which the whole-suite loader words
(the YAML path finds it); these readers only refuse such a document. Large
suites are machine-written JSON, and parsing and building their missions is
a fifth of scoring a 100,000-mission suite, so orjson reads them wherever it
gives exactly what ``json.loads`` would; elsewhere ``json`` does.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: bytes) -> Any | None:
    """The document in ``data``, or None: not JSON, not strict UTF-8, or a key repeated."""
    found = _fast(data)
    if found is not _UNSURE:
        return found
    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=_pairs)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None


class _Repeated(ValueError):
    """A mapping repeats a key."""


def _pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(items)
    if len(out) != len(items):
        raise _Repeated
    return out


_UNSURE: Any = object()
#: Each byte of a number's digits as "0", every other byte as a space.
_DIGITS = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))


def _fast(data: bytes) -> Any:
    """``json.loads`` of ``data`` by orjson, a third of its cost, or _UNSURE.

    Where the two could differ, the answer is _UNSURE and json decides: a
    number of 19 digits or more (orjson reads a huge integer as a float),
    anything orjson refuses (NaN, 1e400, a lone surrogate escape, deep
    nesting), and a repeated key, which orjson passes over silently. A
    repeated key is seen by counting strings: each key is one, so the document
    holds more strings than what was parsed from it whenever a key was
    dropped. Both are counted by their quotes, the parse's in orjson's
    rendering of it.
    """
    if b"0" * 19 in data.translate(_DIGITS):
        return _UNSURE
    try:
        found = orjson.loads(data)
    except orjson.JSONDecodeError:
        return _UNSURE
    return found if _strings(data) == _strings(orjson.dumps(found)) else _UNSURE


def _strings(text: bytes) -> int:
    """Twice the strings in a valid JSON text: its quotes, less those escaped in a string."""
    if b"\\" not in text:
        return text.count(b'"')
    # Outside strings JSON has no backslashes; inside, each escape is a pair read from
    # the left, so with every escaped backslash gone, a quote after one is escaped.
    text = text.replace(b"\\\\", b"")
    return text.count(b'"') - text.count(b'\\"')


__all__ = ["loads"]
