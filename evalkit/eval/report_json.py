"""``report.json``'s bytes, written a run of verdicts at a time.

A score report is its head (every field but the verdicts) and the list of
verdicts, indented. Runs of verdicts encoded apart, by the processes that
judged them, are joined into the bytes one encoding of the whole report
gives, so no process has to hold every verdict as an object to write it.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from evalkit.store.replace import Part


def encode_verdicts(verdicts: list[dict[str, Any]]) -> bytes:
    """Verdicts as they sit inside the report's list: indented, comma-separated.

    They are encoded inside a ``{"verdicts": [...]}`` of their own, so the
    indentation is already the report's, and cut out. orjson writes them (a
    100,000-mission report is some 150 MB); a value it cannot write (an integer
    past 64 bits) sends the run to the standard library.
    """
    if not verdicts:
        return b""
    try:
        text = orjson.dumps({"verdicts": verdicts}, option=orjson.OPT_INDENT_2)
    except TypeError:
        text = json.dumps({"verdicts": verdicts}, indent=2, ensure_ascii=False,
                          allow_nan=False).encode()
    return text[len(_VERDICTS_OPEN):-len(_VERDICTS_CLOSE)]


_VERDICTS_OPEN, _VERDICTS_CLOSE = b'{\n  "verdicts": [\n', b"\n  ]\n}"


def decode_verdicts(run: bytes) -> list[dict[str, Any]]:
    """The verdicts ``encode_verdicts`` wrote, as they were (the standard library reads
    back exactly whatever either encoder wrote, integers past 64 bits included)."""
    return json.loads(b"[" + run + b"]") if run else []


def json_parts(head: dict[str, Any], runs: list[Part]) -> list[Part]:
    """The report: ``head`` followed by the runs of encoded verdicts, as parts to write
    one after another."""
    try:
        text = orjson.dumps(head, option=orjson.OPT_INDENT_2)
    except TypeError:
        text = json.dumps(head, indent=2, ensure_ascii=False, allow_nan=False).encode()
    opening = text[:-2] + b",\n  " if head else b"{\n  "
    body = [run for run in runs if run]
    if not body:
        return [opening, b'"verdicts": []\n}\n']
    parts: list[Part] = [opening, b'"verdicts": [\n']
    for i, run in enumerate(body):
        parts += [b",\n", run] if i else [run]
    return [*parts, b"\n  ]\n}\n"]


__all__ = ["decode_verdicts", "encode_verdicts", "json_parts"]
