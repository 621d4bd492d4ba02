"""The Parquet dataset's shape, and the reference meaning of every column.

A dataset is derived from JSONL and must say exactly what the JSONL reader
says. The plain Python functions here build a row from a record the way
``evalkit.store.reader`` and ``evalkit.eval.summary`` read it: lines parsed
by orjson, envelopes unwrapped by ``reader.unwrap``, values read through
``evalkit.store.values`` (``text``, ``number``, ``flag``). ``evalkit.store.ingest``
computes every row with these very functions.

The columns themselves (names, types, meanings) are declared in
``evalkit.store.columns``. A count is a 64-bit integer column: a value that is
not a whole number within 64 bits reads as null there, and a consumer needing it
exactly reads ``record``. A time is read from an ISO 8601 text that names its
zone (``when``): one without a zone would be a guess, so it reads as null.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pyarrow as pa

from evalkit.contract import conforms
from evalkit.store import columns
from evalkit.store.reader import loads, unwrap
from evalkit.store.values import flag, number, text

FORMAT = "evalkit-dataset"
MANIFEST = "dataset.json"
#: The manifest's list of names directly under the ingested folder that hold no
#: events file where ``score --runs`` would look (so both paths word a mission alike).
WITHOUT_STREAM = "without_stream"
#: The manifest's files directly under the ingested folder that hold no record at all
#: (a README, a stream of nothing but torn lines), each with the lines ``score --runs``
#: would skip reading it: what it makes of a mission named by one is an empty stream.
WITHOUT_RECORDS = "without_records"
#: The manifest's streams that failed their seal when ingested (events path relative to
#: the ingested folder -> the verdict's reason), and how many streams got each word
#: (``evalkit.store.seal``): scoring from the dataset judges them as ``--runs`` does.
ALTERED = "altered"
SEALS = "seals"
DEFAULT_NAME = "dataset.parquet"
#: The manifest's key for the tables' schema (``columns.SCHEMA``); a manifest without
#: it is schema 1, whose ``version`` said the same.
SCHEMA_KEY = "schema"
SCHEMA = columns.SCHEMA
TABLES = tuple(columns.TABLES)

EVENTS_SCHEMA = columns.schema(columns.EVENTS)
RUNS_SCHEMA = columns.schema(columns.RUNS)
MODEL_SCHEMA = columns.schema(columns.MODEL_CALLS)
TOOL_SCHEMA = columns.schema(columns.TOOL_CALLS)
CATALOGUE_SCHEMA = columns.schema(columns.TOOL_CATALOGUE)

SCHEMAS: dict[str, pa.Schema] = {name: columns.schema(cols)
                                 for name, cols in columns.TABLES.items()}


def json_columns(table: str) -> list[str]:
    """The columns of a run table holding JSON text (DuckDB ``JSON`` in `evalkit sql`)."""
    return [c.name for c in columns.TABLES.get(table, ()) if c.json]


def classify(line: str) -> tuple[str, dict[str, Any] | None, dict[str, Any] | None]:
    """One line -> (kind, record, envelope), as ``reader.parse_line`` reads it.

    kind is ``blank``, ``torn``, ``non_object`` or ``record``; envelope is the
    outer object when the line was one, else None.
    """
    if not line.strip():
        return "blank", None, None
    try:
        value = loads(line)
    except ValueError:
        return "torn", None, None
    if not isinstance(value, dict):
        return "non_object", None, None
    record = unwrap(value)
    return "record", record, (value if record is not value else None)


def integer(value: Any) -> int | None:
    """A field read as a 64-bit integer: ``number`` when it is integral and fits, else null."""
    if value is None:  # most fields of most records are absent: answered first
        return None
    found = number(value)
    if isinstance(found, int) and -(2**63) <= found < 2**63:
        return found
    return None


def real(value: Any) -> float | None:
    """A field read as a DOUBLE column value (``number``, then float)."""
    if value is None:
        return None
    found = number(value)
    return None if found is None else float(found)


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def dumps(value: Any) -> str:
    """Compact JSON text, as the ``record`` column keeps it: orjson's, which for a line
    the run store wrote is the line itself (or the record cut out of its envelope).
    A record nested deeper than orjson writes (the reader reads deeper) is written by
    the standard library in the same compact form."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def when(value: Any) -> datetime | None:
    """A field read as a time: ISO 8601 text naming its zone (the run store writes
    ``2026-12-04T21:05:17.828Z``), in UTC; anything else, a zoneless time included, null."""
    if type(value) is not str:
        return None
    try:
        found = datetime.fromisoformat(value)
        return found.astimezone(UTC) if found.tzinfo is not None else None
    except (ValueError, OverflowError):
        return None


def millis(start: datetime | None, end: datetime | None) -> float | None:
    """Milliseconds from ``start`` to ``end``; null when either is unknown."""
    if start is None or end is None:
        return None
    return (end - start) / _MS


_MS = timedelta(milliseconds=1)


def json_text(mapping: Mapping[str, Any], key: str) -> str | None:
    """``mapping[key]`` as compact JSON text; null when absent or JSON null."""
    value = mapping.get(key)
    return None if value is None else dumps(value)


#: The ``events`` columns read from the record's field of the same name, and how each is
#: read. Every reader reads null as null, so a field the record lacks is a null column.
_EVENT_FIELDS: dict[str, Any] = {
    "event": text, "branch": text, "index": integer, "tool": text, "call": integer,
    "ok": flag, "repairing": flag, "ran": flag, "grounded": flag, "verified": flag,
    "repairs": integer, "outcome": text, "reason": text, "steps": integer,
    "max_steps": integer, "elapsed_s": real, "text": text, "run_id": text, "protocol": text,
    "profile": text, "sandbox": text, "objective": text,
}
#: The columns read from the record's ``usage`` object, and how each is read.
_USAGE_FIELDS: dict[str, Any] = {
    "prompt_tokens": integer, "completion_tokens": integer, "total_tokens": integer,
    "calls": integer, "cost": real,
}
_NULL_ROW = (*_EVENT_FIELDS, *_USAGE_FIELDS)


def event_columns(record: Mapping[str, Any], envelope: Mapping[str, Any] | None) -> dict[str, Any]:
    """The typed ``events`` columns of one record (``envelope``: the line's, if any).

    Only the fields the record has are read (a record has a handful of the thirty):
    ingest computes this for every record it stores."""
    row: dict[str, Any] = dict.fromkeys(_NULL_ROW)
    for name in _EVENT_FIELDS.keys() & record.keys():
        row[name] = _EVENT_FIELDS[name](record[name])
    env = envelope or {}
    row["seq"] = integer(env.get("seq"))
    row["ts"] = when(env.get("at"))
    row["has_plan"] = "plan" in record
    row["injected_truthy"] = bool(record.get("injected"))
    budget = record.get("budget")
    row["budget_which"] = text(budget.get("which")) if isinstance(budget, dict) else text(budget)
    usage = record.get("usage")
    if isinstance(usage, dict):
        for name, read in _USAGE_FIELDS.items():
            row[name] = read(usage.get(name))
    row["problems"] = conforms(record)
    row["record"] = dumps(record)
    return row


def _times(record: Mapping[str, Any]) -> dict[str, Any]:
    """A call line's times: ``at`` (written once the call returned) and ``started``."""
    end, start = when(record.get("at")), when(record.get("started"))
    return {"ts": end, "start_ts": start, "duration_ms": millis(start, end)}


def model_columns(record: Mapping[str, Any]) -> dict[str, Any]:
    """The typed ``model_calls`` columns of one model.jsonl line."""
    reply = _dict(record.get("reply"))
    usage = _dict(reply.get("usage"))
    return {
        "call": integer(record.get("call")),
        **_times(record),
        "kind": text(record.get("kind")),
        "content": text(reply.get("content")),
        "error": text(reply.get("error")),
        "prompt_tokens": integer(usage.get("prompt_tokens")),
        "completion_tokens": integer(usage.get("completion_tokens")),
        "total_tokens": integer(usage.get("total_tokens")),
        "tool_calls": json_text(reply, "tool_calls"),
        "request": json_text(record, "request"),
        "record": dumps(record),
    }


def is_catalogue(record: Mapping[str, Any]) -> bool:
    """Whether a tools.jsonl line is the catalogue (``tool_catalogue``), not a call."""
    return "catalogue" in record


def tool_columns(record: Mapping[str, Any]) -> dict[str, Any]:
    """The typed ``tool_calls`` columns of one tools.jsonl line that is a call."""
    result = _dict(record.get("result"))
    return {
        "call": integer(record.get("call")),
        **_times(record),
        "tool": text(record.get("tool")),
        "arguments": json_text(record, "arguments"),
        "exit_code": integer(result.get("exit_code")),
        "stdout": text(result.get("stdout")),
        "stderr": text(result.get("stderr")),
        "structured": json_text(result, "structured"),
        "record": dumps(record),
    }


_HINTS = tuple(field.name for field in columns.HINTS)


def catalogue_rows(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``tool_catalogue`` rows of a catalogue line: one per descriptor (a catalogue
    that is not a list is one row holding it, so nothing is lost)."""
    ts = when(record.get("at"))
    found = record.get("catalogue")
    if not isinstance(found, list):
        return [{"ts": ts, "position": None, **dict.fromkeys(_DESCRIPTOR),
                 "descriptor": json_text(record, "catalogue")}]
    return [{"ts": ts, "position": i, **_descriptor(item)} for i, item in enumerate(found)]


_DESCRIPTOR = ("name", "description", "plane", "code", "scopes", "annotations", "parameters")


def _descriptor(item: Any) -> dict[str, Any]:
    d = _dict(item)
    scopes, hints = d.get("scopes"), d.get("annotations")
    return {
        "name": text(d.get("name")), "description": text(d.get("description")),
        "plane": text(d.get("plane")), "code": flag(d.get("code")),
        "scopes": [text(s) for s in scopes] if isinstance(scopes, list) else None,
        "annotations": ({h: flag(hints.get(h)) for h in _HINTS}
                        if isinstance(hints, dict) else None),
        "parameters": json_text(d, "parameters"),
        "descriptor": dumps(item),
    }
