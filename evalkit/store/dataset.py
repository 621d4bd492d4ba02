"""The Parquet dataset's shape, and the reference meaning of every column.

A dataset is derived from JSONL and must say exactly what the JSONL reader
says. The plain Python functions here build a row from a record the way
``evalkit.store.reader`` and ``evalkit.eval.summary`` read it: lines parsed
by orjson, envelopes unwrapped by ``reader.unwrap``, values read through
``evalkit.store.values`` (``text``, ``number``, ``flag``). ``evalkit.store.ingest``
computes every row with these very functions.

Numbers are stored as DOUBLE (a column has one type); integers beyond 2**53
lose precision there, so a consumer needing them exactly reads ``record``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson
import pyarrow as pa

from evalkit.contract import conforms
from evalkit.store.reader import loads, unwrap
from evalkit.store.values import flag, number, text

FORMAT = "evalkit-dataset"
VERSION = 1
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
TABLES = ("runs", "events", "model_calls", "tool_calls")

_S, _I, _F, _B = pa.string(), pa.int64(), pa.float64(), pa.bool_()

#: Typed columns of ``events`` read from the record (name, type), in order.
EVENT_FIELDS: tuple[tuple[str, pa.DataType], ...] = (
    ("event", _S), ("branch", _S), ("index", _I), ("tool", _S), ("call", _I),
    ("ok", _B), ("has_plan", _B), ("injected_truthy", _B),
    ("repairing", _B), ("ran", _B), ("grounded", _B), ("verified", _B), ("repairs", _F),
    ("outcome", _S), ("reason", _S), ("steps", _F), ("max_steps", _F), ("elapsed_s", _F),
    ("budget_which", _S), ("prompt_tokens", _F), ("completion_tokens", _F),
    ("total_tokens", _F), ("calls", _F), ("cost", _F),
    ("text", _S), ("run_id", _S), ("protocol", _S), ("profile", _S), ("sandbox", _S),
    ("objective", _S),
)

_KEYS = (("run", _S), ("events_path", _S), ("line", pa.int32()))

EVENTS_SCHEMA = pa.schema(
    [*_KEYS, ("seq", _I), ("at", _S), *EVENT_FIELDS,
     ("problems", pa.list_(_S)), ("record", _S)]
)

RUNS_SCHEMA = pa.schema([
    ("run", _S), ("events_path", _S), ("records", _I), ("blank", _I), ("torn", _I),
    ("non_object", _I), ("run_id", _S), ("objective", _S), ("finished", _B), ("outcome", _S),
    ("meta", _S),
])

MODEL_FIELDS: tuple[tuple[str, pa.DataType], ...] = (
    ("call", _I), ("at", _S), ("kind", _S), ("content", _S),
    ("prompt_tokens", _F), ("completion_tokens", _F), ("total_tokens", _F),
)
MODEL_SCHEMA = pa.schema([("run", _S), ("path", _S), ("line", pa.int32()), *MODEL_FIELDS,
                          ("record", _S)])

TOOL_FIELDS: tuple[tuple[str, pa.DataType], ...] = (
    ("call", _I), ("at", _S), ("tool", _S), ("arguments", _S), ("exit_code", _I),
    ("catalogue", _S),
)
TOOL_SCHEMA = pa.schema([("run", _S), ("path", _S), ("line", pa.int32()), *TOOL_FIELDS,
                         ("record", _S)])

SCHEMAS: dict[str, pa.Schema] = {
    "runs": RUNS_SCHEMA, "events": EVENTS_SCHEMA,
    "model_calls": MODEL_SCHEMA, "tool_calls": TOOL_SCHEMA,
}


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


#: The ``events`` columns read from the record's field of the same name, and how each is
#: read. Every reader reads null as null, so a field the record lacks is a null column.
_EVENT_FIELDS: dict[str, Any] = {
    "event": text, "branch": text, "index": integer, "tool": text, "call": integer,
    "ok": flag, "repairing": flag, "ran": flag, "grounded": flag, "verified": flag,
    "repairs": real, "outcome": text, "reason": text, "steps": real, "max_steps": real,
    "elapsed_s": real, "text": text, "run_id": text, "protocol": text, "profile": text,
    "sandbox": text, "objective": text,
}
#: The columns read from the record's ``usage`` object, each as ``real``.
_USAGE_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens", "calls", "cost")
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
    row["at"] = text(env.get("at"))
    row["has_plan"] = "plan" in record
    row["injected_truthy"] = bool(record.get("injected"))
    budget = record.get("budget")
    row["budget_which"] = text(budget.get("which")) if isinstance(budget, dict) else text(budget)
    usage = record.get("usage")
    if isinstance(usage, dict):
        for name in _USAGE_FIELDS:
            row[name] = real(usage.get(name))
    row["problems"] = conforms(record)
    row["record"] = dumps(record)
    return row


def model_columns(record: Mapping[str, Any]) -> dict[str, Any]:
    """The typed ``model_calls`` columns of one model.jsonl line."""
    reply = _dict(record.get("reply"))
    usage = _dict(reply.get("usage"))
    return {
        "call": integer(record.get("call")),
        "at": text(record.get("at")),
        "kind": text(record.get("kind")),
        "content": text(reply.get("content")),
        "prompt_tokens": real(usage.get("prompt_tokens")),
        "completion_tokens": real(usage.get("completion_tokens")),
        "total_tokens": real(usage.get("total_tokens")),
        "record": dumps(record),
    }


def tool_columns(record: Mapping[str, Any]) -> dict[str, Any]:
    """The typed ``tool_calls`` columns of one tools.jsonl line."""
    result = _dict(record.get("result"))
    return {
        "call": integer(record.get("call")),
        "at": text(record.get("at")),
        "tool": text(record.get("tool")),
        "arguments": text(record["arguments"]) if "arguments" in record else None,
        "exit_code": integer(result.get("exit_code")),
        "catalogue": text(record["catalogue"]) if "catalogue" in record else None,
        "record": dumps(record),
    }
