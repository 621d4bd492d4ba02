"""``evalkit ingest``: run directories -> a Parquet dataset DuckDB can read.

A dataset must say exactly what the JSONL reader says; ``evalkit.store.dataset``
holds the reference meaning of every column. Two paths get there:

* The fast path reads every line with orjson, the reader's own parser, and
  takes the records whose line is exactly the text ``orjson.dumps`` writes
  back for them (what the run store writes). For those nothing is in doubt:
  the columns are the reference functions' values, computed column by column,
  and the ``record`` text is the line (an envelope's record cut out of it).
  Blank, torn and non-object lines are counted as the reader counts them.
* Every other record line (other spacing or number spellings, duplicate keys,
  NaN…) goes to DuckDB SQL, which splits lines, validates JSON, unwraps
  envelopes and extracts typed columns. The few lines where DuckDB's JSON
  parser and orjson could disagree — NaN/Infinity literals, trailing commas,
  overflowing or 64-bit-plus numbers, duplicate keys, non-object lines — and
  the few records whose columns need Python's own formatting (non-conforming
  records, non-string values in text and JSON-text fields) are flagged in SQL with cheap
  tests and recomputed in Python by ``evalkit.store.dataset``. This path
  decides the ``record`` text of such lines (the line, its cut-out record, or
  DuckDB's or orjson's serialisation), so it stays the one that reads them.

Work goes in batches of run directories so memory stays bounded. Large sets
are converted by several processes (this one among them), a batch at a time;
this process writes every batch's tables, in batch order, as row groups of
one Parquet file per table, so the files are what one process would write.
The other processes are plain ``python -c`` children fed over a pipe, which
never import the caller's main module (a script need not guard its call).
A caller may add tables derived from each batch (a ``Derivation``:
``evalkit.eval.tables`` adds the per-run summaries scoring reads), computed
while the batch is in memory, so nothing is read twice and this module needs
to know nothing of scoring. The dataset is written to a temporary folder and
renamed into place, so a reader never sees half of one.
"""

from __future__ import annotations

import functools
import gc
import os
import pickle
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass
from itertools import count, islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from evalkit.contract import FIELDS
from evalkit.errors import EvalkitError
from evalkit.gcpause import collector_paused
from evalkit.store import dataset as ds
from evalkit.store import leftovers
from evalkit.store.layout import EVENTS_FILE, META_FILE, MODEL_FILE, TOOLS_FILE

if TYPE_CHECKING:  # imported by ``connect``: most ingests never need DuckDB (see _Connection)
    import duckdb

#: Bytes of JSONL converted at once by one process: big enough that per-batch
#: costs vanish, small enough that what a batch builds stays in warm memory
#: (converting went 3% faster per byte than at 48 MB, and peak memory is lower).
BATCH_BYTES = 24 * 2**20
BATCH_FILES = 4000
_CHUNK_FILES = 16


@functools.cache
def _py_space() -> str:
    """What ``str.strip()`` removes: a line of only these is blank, as in the reader.
    (Built on first use: the walk over every code point costs a worker's start 60 ms.)"""
    return "".join(chr(c) for c in range(0x110000) if chr(c).isspace())


_JSON_SPACE = " \t\r"

#: Text that may make DuckDB (yyjson) and orjson read a line differently:
#: NaN/Infinity literals, trailing commas, exponents of 3+ digits (overflow to
#: infinity) and runs of 19+ digits (integers past 64 bits, which orjson
#: reads as floats). A match sends the line to Python; inside strings it is
#: a harmless false positive.
SUSPECT = (
    r"[:,\[][ \t\r]*-?(?i:nan|inf|infinity)[ \t\r]*(?:[,\]}]|$)"
    r"|,[ \t\r]*[\]}]|[eE][+-]?[0-9]{3}|[0-9]{19}"
)

_MACROS = r"""
CREATE OR REPLACE TEMP MACRO j_isnum(v) AS
    coalesce(left(v, 1) BETWEEN '0' AND '9' OR left(v, 1) = '-', false);
CREATE OR REPLACE TEMP MACRO j_str(v) AS
    CASE WHEN left(v, 1) = '"' THEN json_extract_string(v, '$') END;
CREATE OR REPLACE TEMP MACRO j_odd(v) AS
    coalesce(v <> 'null' AND left(v, 1) <> '"', false);
CREATE OR REPLACE TEMP MACRO j_num(v) AS
    CASE WHEN j_isnum(v) THEN TRY_CAST(v AS DOUBLE) END;
CREATE OR REPLACE TEMP MACRO j_int(v) AS
    CASE WHEN NOT j_isnum(v) THEN NULL
         WHEN NOT (contains(v, '.') OR contains(v, 'e') OR contains(v, 'E'))
              THEN TRY_CAST(v AS BIGINT)
         WHEN TRY_CAST(v AS DOUBLE) = trunc(TRY_CAST(v AS DOUBLE))
              AND abs(TRY_CAST(v AS DOUBLE)) < 9223372036854775808.0
              THEN CAST(TRY_CAST(v AS DOUBLE) AS BIGINT) END;
CREATE OR REPLACE TEMP MACRO j_bool(v) AS
    CASE v WHEN 'true' THEN true WHEN 'false' THEN false END;
CREATE OR REPLACE TEMP MACRO j_truthy(v) AS
    CASE WHEN v IS NULL OR list_contains(['null', 'false', '""', '[]', '{}'], v) THEN false
         WHEN j_isnum(v) THEN coalesce(TRY_CAST(v AS DOUBLE) <> 0, true)
         ELSE true END;
CREATE OR REPLACE TEMP MACRO has_dup(k) AS
    coalesce(len(k) <> len(list_distinct(k)), false);
"""


def _lines_sql(source: str) -> str:
    """Lines of every file in ``source`` (fid, line, text), split as ``reader.parse_text`` does,
    with ``blank``, ``t`` (JSON-space-trimmed) and ``suspect``."""
    return f"""
    raw AS (
        SELECT fid, generate_subscripts(parts, 1) AS line, unnest(parts) AS text, len(parts) AS n
        FROM (SELECT fid, string_split(content, chr(10)) AS parts FROM {source})
    ),
    l AS (
        SELECT fid, line, text,
               CASE WHEN starts_with(text, '{{') THEN false
                    ELSE trim(text, '{_py_space()}') = '' END AS blank,
               CASE WHEN starts_with(text, '{{') AND ends_with(text, '}}') THEN text
                    ELSE trim(text, '{_JSON_SPACE}') END AS t
        FROM raw WHERE NOT (line = n AND text = '')
    )"""


# --- events -----------------------------------------------------------------

#: Paths read from each record in one parse (json_extract with a list of paths).
_EVENT_PATHS = (
    "event", "branch", "index", "tool", "call", "ok", "injected", "repairing", "ran",
    "grounded", "verified", "repairs", "outcome", "reason", "steps", "max_steps",
    "elapsed_s", "budget", "usage", "text", "run_id", "protocol", "profile", "sandbox",
    "schema_version", "objective",
)
_USAGE = ("prompt_tokens", "completion_tokens", "total_tokens", "calls", "cost")
#: Fields read as text: a value that is neither a string nor null needs Python's JSON.
_TEXT_FIELDS = ("event", "branch", "tool", "outcome", "reason", "text", "run_id",
                "protocol", "profile", "sandbox", "objective")


def _x(name: str) -> str:
    return f"x[{_EVENT_PATHS.index(name) + 1}]"


def _event_column_sql() -> str:
    kinds = {"branch": "str", "index": "int", "tool": "str", "call": "int", "ok": "bool",
             "repairing": "bool", "ran": "bool", "grounded": "bool", "verified": "bool",
             "repairs": "num", "outcome": "str", "reason": "str", "steps": "num",
             "max_steps": "num", "elapsed_s": "num", "text": "str", "run_id": "str",
             "protocol": "str", "profile": "str", "sandbox": "str", "objective": "str"}
    exprs = {name: f"j_{kind}({_x(name)})" for name, kind in kinds.items()}
    exprs["event"] = "ev"
    exprs["has_plan"] = "list_contains(keys, 'plan')"
    exprs["injected_truthy"] = f"j_truthy({_x('injected')})"
    exprs["budget_which"] = "j_str(bw)"
    exprs.update({name: f"j_num(ux[{i}])" for i, name in enumerate(_USAGE, start=1)})
    return ",\n        ".join(f'{exprs[name]} AS "{name}"' for name, _ in ds.EVENT_FIELDS)


def _nonconforming_sql() -> str:
    """True when ``contract.conforms`` would find a problem (the strings come from Python)."""
    known = ", ".join(f"'{event}'" for event in FIELDS)
    required = " ".join(f"WHEN '{event}' THEN {list(fields)!r}" for event, fields in FIELDS.items())
    sv = _x("schema_version")
    return f"""(list_contains(keys, 'schema_version')
                AND NOT coalesce(j_isnum({sv}) AND TRY_CAST({sv} AS DOUBLE) = 1, false))
            OR ev IS NULL OR NOT list_contains([{known}], ev)
            OR NOT list_has_all(keys, CASE ev {required} END)"""


def _events_sql() -> str:
    """One batch of events files -> one row per line, typed, with ``kind`` and ``rare``.

    Envelopes as the run store writes them (``{"seq":…,"at":…,"record":{…}}``)
    take a fast path: the record is cut out of the line as text (no
    re-serialising) and the short head parsed on its own; the cut is only
    trusted when head and record are both valid JSON, which proves the line
    is exactly that object. Everything else takes the general path.
    """
    paths = "[" + ", ".join(f"'$.{p}'" for p in _EVENT_PATHS) + "]"
    usage_paths = "[" + ", ".join(f"'$.{p}'" for p in _USAGE) + "]"
    odd_text = " OR ".join(f"j_odd({_x(f)})" for f in _TEXT_FIELDS)
    usage, budget = _x("usage"), _x("budget")
    return f"""
    WITH {_lines_sql('files')},
    a AS (
        SELECT *, CASE WHEN NOT blank AND starts_with(t, '{{') AND ends_with(t, '}}')
                       THEN strpos(t, ',"record":') ELSE 0 END AS p
        FROM l
    ),
    b AS (
        SELECT *,
            CASE WHEN p > 0 THEN t[:p - 1] || '}}' END AS head,
            CASE WHEN p > 0 THEN t[p + 10:-2] END AS cand
        FROM a
    ),
    c AS (
        SELECT *, coalesce(starts_with(cand, '{{') AND json_valid(cand) AND json_valid(head), false)
                  AS split_ok
        FROM b
    ),
    d AS (
        SELECT *,
            CASE WHEN blank THEN false WHEN split_ok THEN true ELSE json_valid(t) END AS valid,
            CASE WHEN split_ok THEN json_keys(head)
                 WHEN NOT blank AND starts_with(t, '{{') AND json_valid(t) THEN json_keys(t)
            END AS tkeys
        FROM c
    ),
    e AS (
        SELECT *,
            CASE WHEN tkeys IS NULL OR NOT list_contains(tkeys, 'seq')
                      OR list_contains(tkeys, 'event') THEN false
                 WHEN split_ok THEN true
                 ELSE coalesce(json_type(t, '$.record') = 'OBJECT', false) END AS envelope
        FROM d
    ),
    f AS (
        SELECT *,
            CASE WHEN NOT envelope THEN t WHEN split_ok THEN cand
                 ELSE json_extract(t, '$.record')::VARCHAR END AS rec,
            CASE WHEN NOT envelope THEN NULL
                 WHEN split_ok THEN json_extract(head, ['$.seq', '$.at'])
                 ELSE json_extract(t, ['$.seq', '$.at']) END AS sa,
            CASE WHEN split_ok THEN has_dup(tkeys) OR list_contains(tkeys, 'record')
                 ELSE has_dup(tkeys) END AS env_dup
        FROM e
    ),
    g AS (
        SELECT *,
            CASE WHEN tkeys IS NULL THEN NULL
                 WHEN envelope OR split_ok THEN json_keys(rec) ELSE tkeys END AS keys,
            CASE WHEN tkeys IS NOT NULL THEN json_extract(rec, {paths}) END AS x
        FROM f
    ),
    h AS (
        SELECT *,
            j_str({_x('event')}) AS ev,
            CASE WHEN left({usage}, 1) = '{{' THEN json_extract({usage}, {usage_paths}) END AS ux,
            left({usage}, 1) = '{{' AND has_dup(json_keys({usage})) AS usage_dup,
            CASE WHEN left({budget}, 1) = '{{' THEN json_extract({budget}, '$.which')
                 ELSE {budget} END AS bw,
            left({budget}, 1) = '{{' AND has_dup(json_keys({budget})) AS budget_dup
        FROM g
    ),
    k AS (
        SELECT *,
            CASE WHEN blank THEN 'blank' WHEN NOT valid THEN 'torn'
                 WHEN tkeys IS NULL THEN 'non_object' ELSE 'record' END AS line_kind,
            NOT blank AND (tkeys IS NULL OR env_dup OR has_dup(keys)
                OR coalesce(usage_dup, false) OR coalesce(budget_dup, false)
                OR {_nonconforming_sql()}
                OR j_odd(bw) OR {odd_text} OR j_odd(sa[2])
                OR regexp_matches(t, '{SUSPECT}')) AS rare
        FROM h
    )
    SELECT fid, line, line_kind, rare, CASE WHEN rare THEN text END AS raw,
        j_int(sa[1]) AS seq,
        j_str(sa[2]) AS at,
        {_event_column_sql()},
        []::VARCHAR[] AS problems,
        rec AS record
    FROM k
    """


# --- model.jsonl and tools.jsonl ---------------------------------------------

def _plain_sql(columns: dict[str, tuple[str, str]], objects: tuple[str, ...]) -> str:
    """Lines of a plain JSONL recording (no envelopes) -> typed columns.

    ``columns`` maps name -> (path, kind) with kind str/int/num/json; ``objects``
    are the paths descended into, checked for duplicate keys like the top level.
    """
    names = list(columns)
    paths = [columns[n][0] for n in names] + list(objects)
    x = {p: f"x[{i}]" for i, p in enumerate(paths, start=1)}
    select = []
    for name in names:
        path, kind = columns[name]
        if kind == "json":
            # ::VARCHAR, or the CASE's type is JSON and a string value, unwrapped
            # by j_str, is cast back to JSON: {"arguments":"x"} failed to ingest.
            v = x[path]
            select.append(f"CASE WHEN left({v}, 1) = '\"' THEN j_str({v}) "
                          f"WHEN {v} <> 'null' THEN {v}::VARCHAR END AS \"{name}\"")
        else:
            select.append(f'j_{kind}({x[path]}) AS "{name}"')
    # A text column holding another JSON value is formatted by Python (orjson): DuckDB
    # writes some values otherwise (1e+16 as 10000000000000000.0, \u001F for \u001f).
    odd = " OR ".join(f"j_odd({x[columns[n][0]]})" for n in names
                      if columns[n][1] in ("str", "json"))
    dups = " OR ".join(f"coalesce(left({x[p]}, 1) = '{{' AND has_dup(json_keys({x[p]})), false)"
                       for p in objects)
    path_list = "[" + ", ".join(f"'{p}'" for p in paths) + "]"
    return f"""
    WITH {_lines_sql('files')},
    m AS (SELECT *, NOT blank AND starts_with(t, '{{') AND json_valid(t) AS obj FROM l),
    n AS (
        SELECT *, CASE WHEN obj THEN json_keys(t) END AS keys,
                  CASE WHEN obj THEN json_extract(t, {path_list}) END AS x
        FROM m
    ),
    o AS (
        SELECT *, CASE WHEN obj THEN 'record' WHEN blank THEN 'blank' ELSE 'other' END AS line_kind,
            NOT blank AND (NOT obj OR has_dup(keys) OR {odd} OR {dups}
                OR regexp_matches(t, '{SUSPECT}')) AS rare
        FROM n
    )
    SELECT fid, line, line_kind, rare, CASE WHEN rare THEN text END AS raw,
        {", ".join(select)},
        t AS record
    FROM o
    """


@functools.cache
def _sql(kind: str) -> str:
    """The SQL reading one kind of file (``events``, ``model`` or ``tools``), built once
    per process, when a line first needs it."""
    if kind == "events":
        return _events_sql()
    if kind == "model":
        return _plain_sql(
            {"call": ("$.call", "int"), "at": ("$.at", "str"), "kind": ("$.kind", "str"),
             "content": ("$.reply.content", "str"),
             "prompt_tokens": ("$.reply.usage.prompt_tokens", "num"),
             "completion_tokens": ("$.reply.usage.completion_tokens", "num"),
             "total_tokens": ("$.reply.usage.total_tokens", "num")},
            ("$.reply", "$.reply.usage"),
        )
    return _plain_sql(
        {"call": ("$.call", "int"), "at": ("$.at", "str"), "tool": ("$.tool", "str"),
         "arguments": ("$.arguments", "json"), "exit_code": ("$.result.exit_code", "int"),
         "catalogue": ("$.catalogue", "json")},
        ("$.result",),
    )


# --- the fast path: lines that are orjson's own text ------------------------------

#: Top-level fields of an events record the columns read (each record is visited once).
_EVENT_TOP = (
    "event", "branch", "index", "tool", "call", "ok", "injected", "repairing", "ran",
    "grounded", "verified", "repairs", "outcome", "reason", "steps", "max_steps",
    "elapsed_s", "budget", "usage", "text", "run_id", "protocol", "profile", "sandbox",
    "objective",
)

#: What an events row keeps of the envelope (``dataset.event_columns`` reads these two).
_ENVELOPE_KEYS = ("seq", "at")

_Convert = Callable[[Any], Any]
#: (column, path of object keys, reference function): the value at the path (objects
#: descended into, anything else read as null) through ``text``/``integer``/``real``/
#: ``flag``, exactly as ``dataset.event_columns``/``model_columns``/``tool_columns`` read it.
_Spec = tuple[tuple[str, tuple[str, ...], _Convert], ...]

_EVENT_SPEC: _Spec = (
    *((name, (name,), ds.text) for name in (
        "event", "branch", "tool", "outcome", "reason", "text", "run_id", "protocol",
        "profile", "sandbox", "objective")),
    *((name, (name,), ds.integer) for name in ("index", "call")),
    *((name, (name,), ds.flag) for name in ("ok", "repairing", "ran", "grounded", "verified")),
    *((name, (name,), ds.real) for name in ("repairs", "steps", "max_steps", "elapsed_s")),
    *((name, ("usage", name), ds.real) for name in _USAGE),
)
_MODEL_SPEC: _Spec = (
    ("call", ("call",), ds.integer), ("at", ("at",), ds.text), ("kind", ("kind",), ds.text),
    ("content", ("reply", "content"), ds.text),
    *((name, ("reply", "usage", name), ds.real)
      for name in ("prompt_tokens", "completion_tokens", "total_tokens")),
)
_TOOL_SPEC: _Spec = (
    ("call", ("call",), ds.integer), ("at", ("at",), ds.text), ("tool", ("tool",), ds.text),
    # text(None) is None: a missing key and a null read alike, as in tool_columns.
    ("arguments", ("arguments",), ds.text), ("exit_code", ("result", "exit_code"), ds.integer),
    ("catalogue", ("catalogue",), ds.text),
)


@dataclass
class _Parsed:
    """The lines of one kind of file across a batch, as the fast path read them.

    ``rows`` hold, per record it took, the values of the table's top-level keys (and,
    for events, whether ``plan`` is there, ``contract.conforms`` and the envelope's
    ``seq`` and ``at``);
    ``slow`` are the record lines it left to the SQL path, as (fid, line, text).
    """

    fid: list[int]
    line: list[int]
    rows: list[tuple[Any, ...]]
    texts: list[str]
    slow: list[tuple[int, int, str]]
    counts: dict[str, np.ndarray]


def _parse(contents: list[str | None], keys: tuple[str, ...], events: bool) -> _Parsed:
    """Read every line as ``reader.parse_text`` does (orjson: blank, torn, non-object or a
    record, envelopes unwrapped) and keep the records whose text is exactly what
    ``orjson.dumps`` writes for them.

    For such a line nothing is left to decide: the SQL path keeps this very text as
    ``record`` (the line, or the envelope's record cut out of it) whether or not it
    flags the line rare, a rare row's text being ``orjson.dumps`` of its record; and
    the columns are computed from the parsed record by the reference functions
    themselves. Every other record line (spaces, other number spellings, duplicate
    keys, NaN…) goes to the SQL path, which decides it as before.
    """
    loads, dumps = orjson.loads, orjson.dumps
    refused, unwritable = orjson.JSONDecodeError, orjson.JSONEncodeError
    conforms = ds.conforms
    fids: list[int] = []
    numbers: list[int] = []
    rows: list[tuple[Any, ...]] = []
    texts: list[str] = []
    slow: list[tuple[int, int, str]] = []
    n = len(contents)
    counts = {kind: [0] * n for kind in _KINDS}
    records, blank, torn, non_object = (counts[k] for k in _KINDS)
    add_row, add_text, add_number = rows.append, texts.append, numbers.append
    for fid, content in enumerate(contents):
        if content is None:
            continue
        pieces = content.split("\n")
        if not pieces[-1]:
            pieces.pop()  # the newline that ends the last line starts no new line
        taken = len(rows)
        for number, line in enumerate(pieces, 1):
            try:
                value = loads(line)
            except refused:
                if line.strip():
                    torn[fid] += 1
                else:
                    blank[fid] += 1
                continue
            if type(value) is not dict:
                non_object[fid] += 1
                continue
            envelope = None
            try:
                fast = dumps(value).decode() == line
            except unwritable:  # nested deeper than orjson writes
                fast = False
            text = line
            if fast and events and "seq" in value and "event" not in value \
                    and type(value.get("record")) is dict:  # reader.unwrap
                envelope, value = value, value["record"]
                # The SQL cuts the record out at the first ,"record": and keeps that
                # text. Here that is the record's own text when the record comes last
                # and nothing before it could hold another ,"record": (no object or
                # list: in a string the quote would be escaped).
                cut = line.find(',"record":')
                fast = (cut > 0 and next(reversed(envelope)) == "record"
                        and line.find("{", 1, cut) < 0 and line.find("[", 1, cut) < 0)
                text = line[cut + 10:-1]
            if not fast:
                slow.append((fid, number, line))
                continue
            add_number(number)
            add_text(text)
            if events:  # only the values: the records themselves can go at once
                add_row((*map(value.get, keys), "plan" in value, conforms(value),
                         *(map(envelope.get, _ENVELOPE_KEYS) if envelope is not None
                           else (None, None))))
            else:
                add_row(tuple(map(value.get, keys)))
        taken = len(rows) - taken
        records[fid] += taken
        fids.extend([fid] * taken)
    return _Parsed(fids, numbers, rows, texts, slow,
                   {kind: np.array(c, dtype=np.int64) for kind, c in counts.items()})


def _each(convert: _Convert, values: Iterable[Any]) -> list[Any]:
    """``convert`` over values (every reference function reads null as null)."""
    return [None if v is None else convert(v) for v in values]


_NONE = type(None)
#: The kinds of value Arrow converts to exactly what each reference function gives
#: (Not -0.0 for ``real``, which reads it as 0.0; integers past 64 bits Arrow refuses.)
_AS_IS: dict[_Convert, set[type]] = {
    ds.integer: {int, _NONE}, ds.flag: {bool, _NONE},
    ds.real: {int, float, _NONE},
}


def _column(convert: _Convert, values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    """``convert`` over ``values``, as an Arrow array.

    Where every value is of a kind Arrow converts to what ``convert`` gives (a
    string or null for ``text``, say: nearly always), Arrow converts them itself; a
    Python call per value costs several times that.
    """
    if convert is ds.text:  # Arrow takes strings and nulls, and refuses anything else
        with suppress(pa.ArrowTypeError, pa.ArrowInvalid):
            return pa.array(values, type_)
    elif set(map(type, values)) <= _AS_IS[convert] and not (convert is ds.real and 0 in values):
        with suppress(OverflowError, pa.ArrowInvalid):  # integers past 64 bits: Python says
            return pa.array(values, type_)
    return pa.array(_each(convert, values), type_)


def _spec_columns(spec: _Spec, top: dict[str, Sequence[Any]], types: dict[str, pa.DataType]
                  ) -> dict[str, pa.Array]:
    """The columns of ``spec`` from the top-level values, descending into objects."""
    found: dict[tuple[str, ...], Sequence[Any]] = {(k,): v for k, v in top.items()}
    out = {}
    for name, path, convert in spec:
        for depth in range(2, len(path) + 1):
            if path[:depth] not in found:
                found[path[:depth]] = [v.get(path[depth - 1]) if type(v) is dict else None
                                       for v in found[path[:depth - 1]]]
        out[name] = _column(convert, found[path], types[name])
    return out


def _event_columns(parsed: _Parsed, types: dict[str, pa.DataType]) -> dict[str, pa.Array]:
    """The typed events columns of the fast path's records: ``dataset.event_columns``,
    column by column (a test holds the two equal)."""
    n = len(parsed.rows)
    values = list(zip(*parsed.rows, strict=True)) if n else [()] * (len(_EVENT_TOP) + 4)
    top = dict(zip(_EVENT_TOP, values[:len(_EVENT_TOP)], strict=True))
    has_plan, problems, seq, at = values[len(_EVENT_TOP):]
    columns = _spec_columns(_EVENT_SPEC, top, types)
    columns["seq"] = _column(ds.integer, seq, types["seq"])
    columns["at"] = _column(ds.text, at, types["at"])
    columns["has_plan"] = pa.array(has_plan, types["has_plan"])
    columns["injected_truthy"] = pa.array([bool(v) for v in top["injected"]],
                                          types["injected_truthy"])
    columns["budget_which"] = pa.array([
        None if b is None else ds.text(b.get("which")) if type(b) is dict else ds.text(b)
        for b in top["budget"]], types["budget_which"])
    if any(problems):
        columns["problems"] = pa.array(problems, types["problems"])
    else:  # the usual batch: every record conforms
        columns["problems"] = pa.ListArray.from_arrays(
            pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], pa.string()),
            type=types["problems"])
    return columns


def _plain_columns(parsed: _Parsed, spec: _Spec, types: dict[str, pa.DataType]
                   ) -> dict[str, pa.Array]:
    keys = _top_keys(spec)
    values = list(zip(*parsed.rows, strict=True)) if parsed.rows else [()] * len(keys)
    return _spec_columns(spec, dict(zip(keys, values, strict=True)), types)


def _top_keys(spec: _Spec) -> tuple[str, ...]:
    return tuple(dict.fromkeys(path[0] for _, path, _ in spec))


def _lines_table(con: duckdb.DuckDBPyConnection, contents: list[str | None], kind: str
                 ) -> tuple[pa.Table, dict[str, np.ndarray]]:
    """The record rows (with ``fid`` and ``line``) and per-file line counts of one kind of
    file (``events``, ``model`` or ``tools``): the fast path's rows and the SQL's, in order."""
    row, fields, spec = _KIND_WAYS[kind]
    events = kind == "events"
    parsed = _parse(contents, _EVENT_TOP if events else _top_keys(spec), events)
    schema = pa.schema([pa.field("fid", pa.int32()), pa.field("line", pa.int32()), *fields])
    types = {f.name: f.type for f in schema}
    columns = (_event_columns(parsed, types) if events
               else _plain_columns(parsed, spec, types))
    columns["fid"] = pa.array(parsed.fid, pa.int32())
    columns["line"] = pa.array(parsed.line, pa.int32())
    columns["record"] = pa.array(parsed.texts, pa.string())
    table = pa.table([columns[f.name] for f in schema], schema=schema)
    counts = parsed.counts
    if parsed.slow:
        # Each slow line goes in as a file of its own; its row and count go back to its file.
        slow, slow_counts = _records(_query(con, _sql(kind), [t for _, _, t in parsed.slow]),
                                     row, fields, len(parsed.slow))
        where = slow.column("fid").to_numpy()
        fid = np.array([f for f, _, _ in parsed.slow], dtype=np.int32)
        line = np.array([n for _, n, _ in parsed.slow], dtype=np.int32)
        slow = slow.set_column(0, "fid", pa.array(fid[where])).set_column(
            1, "line", pa.array(line[where]))
        table = pa.concat_tables([table, slow]).sort_by([("fid", "ascending"),
                                                         ("line", "ascending")])
        for k in _KINDS:
            np.add.at(counts[k], fid, slow_counts[k])
    return table, counts


# --- driving it ----------------------------------------------------------------

class Derivation(Protocol):
    """Extra tables computed from each batch: its ``events`` and ``runs`` tables, and
    ``texts``, each events file's text as the reader decodes it (parallel to ``runs``).

    ``con`` is the batch's DuckDB connection, opened when first used.
    ``schemas`` names the tables and their shapes; ``manifest`` is merged into
    the dataset's manifest (say what version of the derivation wrote them).
    It must be picklable: large ingests run it in worker processes, which import
    its class by name (one defined in the caller's main script they cannot find:
    ingest then converts everything in the caller's process).
    """

    schemas: dict[str, pa.Schema]
    manifest: dict[str, Any]

    def __call__(self, con: duckdb.DuckDBPyConnection, events: pa.Table, runs: pa.Table,
                 texts: list[str]) -> list[tuple[str, pa.Table]]: ...


@dataclass
class IngestResult:
    """What one ingest did: where the dataset is, how much went in, how long it took."""

    out: Path
    runs: int
    events: int
    bytes: int
    seconds: float

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds else 0.0


def discover(root: Path, skip: Path | None = None) -> list[Path]:
    """Every run directory under ``root`` (one holding events.jsonl), in path order.

    ``skip`` (a dataset folder) and its temporary siblings are not descended into.
    """
    return [Path(run) for run in _walk(root, skip)]


class _Own:
    """The dataset being written (``skip``) and its temporary siblings: neither runs nor
    mission folders, wherever ingest looks."""

    def __init__(self, skip: Path | None) -> None:
        self.name = skip.name if skip is not None else None
        self.parent = os.path.dirname(os.path.realpath(skip)) if skip is not None else None

    def holds(self, folder: str, name: str) -> bool:
        """Whether ``name`` in ``folder`` is the dataset or one of its temporary siblings."""
        return (self.name is not None
                and (name == self.name or name.startswith(f".{self.name}."))
                and os.path.realpath(folder) == self.parent)


def _walk(root: Path, skip: Path | None = None) -> Iterator[str]:
    """``discover``, lazily: each run directory as it is found, in component-wise path
    order (sorted(Path) order: a directory's subdirectories by name, a run before
    the runs inside it). Ingest converts the first runs while the rest are still to
    be found: listing 100k run directories takes seconds here, all of it system calls.
    """
    own = _Own(skip)
    stack: list[Iterator[str]] = [iter([os.fspath(root)])]
    while stack:
        here = next(stack[-1], None)
        if here is None:
            stack.pop()
            continue
        try:
            with os.scandir(here) as listing:
                entries = list(listing)
        except OSError:
            continue
        run = False
        below = []
        for entry in entries:
            if entry.name == EVENTS_FILE and entry.is_file():
                run = True
            elif entry.is_dir(follow_symlinks=False) and not own.holds(here, entry.name):
                below.append(entry.name)
        if run:
            yield here
        if below:
            below.sort()
            stack.append(iter([os.path.join(here, name) for name in below]))


def _read(path: str, *, required: bool = False) -> bytes | None:
    """A file's bytes; None when it is absent.

    Plain ``os`` calls: ``open()`` adds a file object and three system calls per
    file (isatty, seek, a second fstat), a fifth of the reading at 4 files a run.
    One read of a byte more than the size usually ends it: falling short by exactly
    that byte shows the end was reached, with no further read to find it.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return _absent(path, required)
    except OSError as exc:
        raise _unreadable(path, exc) from None
    try:
        size = os.fstat(fd).st_size
        chunks = [os.read(fd, size + 1)]
        if len(chunks[0]) == size:  # the byte past the size was not there: end of file
            return chunks[0]
        while chunks[-1]:  # until end of file, however the size changed meanwhile
            chunks.append(os.read(fd, 1 << 20))
        return b"".join(chunks) if len(chunks) > 2 else chunks[0]
    except IsADirectoryError:
        return _absent(path, required)
    except OSError as exc:
        raise _unreadable(path, exc) from None
    finally:
        os.close(fd)


def _absent(path: str, required: bool) -> None:
    if required:
        raise EvalkitError(f"cannot read {path}: it vanished during ingest") from None
    return None


def _unreadable(path: str, exc: OSError) -> EvalkitError:
    return EvalkitError(f"cannot read {path}: {exc.strerror or exc}")


def _read_text(path: str, *, required: bool = False) -> tuple[str | None, int]:
    """(a file's text decoded as ``reader.read_events_file`` decodes it, its size in bytes);
    (None, 0) when it is absent."""
    data = _read(path, required=required)
    if data is None:
        return None, 0
    return data.decode("utf-8", "replace"), len(data)


@dataclass
class _Batch:
    """The files of a run of consecutive run directories, read and decoded."""

    runs: list[str]  # run directory relative to root, POSIX ("." for root itself)
    events: list[str]
    models: list[str | None]
    tools: list[str | None]
    metas: list[str | None]
    nbytes: int

    def rel(self, name: str) -> list[str]:
        return [name if run == "." else f"{run}/{name}" for run in self.runs]


def _load(root: Path, dirs: list[str]) -> _Batch:
    """Read the files of run directories (paths as ``_walk`` gives them)."""
    top = os.fspath(root)
    runs, events, models, tools, metas = [], [], [], [], []
    nbytes = 0
    for base in dirs:
        # Path(base).relative_to(root).as_posix(), for a path that starts with root's.
        runs.append(base[len(top):].lstrip(os.sep).replace(os.sep, "/") or ".")
        texts = [_read_text(os.path.join(base, EVENTS_FILE), required=True)] + [
            _read_text(os.path.join(base, name)) for name in (MODEL_FILE, TOOLS_FILE, META_FILE)
        ]
        nbytes += sum(size for _, size in texts[:3])
        for bucket, (value, _) in zip((events, models, tools, metas), texts, strict=True):
            bucket.append(value)
    return _Batch(runs, events, models, tools, metas, nbytes)


_KINDS = ("record", "blank", "torn", "non_object")


def _query(con: duckdb.DuckDBPyConnection, sql: str, contents: list[str | None]) -> pa.Table:
    """Run one of the line SQLs over the given file contents (None = no such file)."""
    fids = [i for i, c in enumerate(contents) if c is not None]
    files = pa.table({
        "fid": pa.array(fids, pa.int32()),
        "content": pa.array([contents[i] for i in fids], pa.large_string()),
    })
    # DuckDB hands out an Arrow table to its threads batch by batch: small
    # batches let every core work on one set of files.
    files = pa.Table.from_batches(files.to_batches(max_chunksize=_CHUNK_FILES), files.schema)
    con.register("files", files)
    try:
        return con.sql(sql).to_arrow_table()
    finally:
        con.unregister("files")


RowFn = Callable[[str], "tuple[str, dict[str, Any] | None]"]


def _records(result: pa.Table, row: RowFn, fields: list[pa.Field],
             n_files: int) -> tuple[pa.Table, dict[str, np.ndarray]]:
    """The record rows of a line table, rare rows recomputed by ``row`` in Python.

    Returns (table with ``fid``, ``line`` and ``fields``; counts of each kind per fid).
    """
    kind = np.asarray(result.column("line_kind").to_pylist(), dtype=object) if len(result) else \
        np.zeros(0, dtype=object)
    rare = result.column("rare").to_numpy(zero_copy_only=False).astype(bool)
    schema = pa.schema([pa.field("fid", pa.int32()), pa.field("line", pa.int32()), *fields])
    base = result.select(schema.names).cast(schema)
    fixed_rows: list[dict[str, Any]] = []
    fixed_at: list[int] = []
    if rare.any():
        raw, fid, line = (result.column(n) for n in ("raw", "fid", "line"))
        for i in np.flatnonzero(rare).tolist():
            kind[i], columns = row(raw[i].as_py())
            if columns is not None:
                columns["fid"], columns["line"] = fid[i].as_py(), line[i].as_py()
                fixed_rows.append(columns)
                fixed_at.append(i)
    is_record = kind == "record"
    keep = is_record & ~rare
    fids = result.column("fid").to_numpy(zero_copy_only=False)
    counts = {k: np.bincount(fids[kind == k], minlength=n_files) for k in _KINDS}
    if fixed_rows:
        order = np.arange(len(result))
        order[fixed_at] = len(result) + np.arange(len(fixed_at))
        keep[fixed_at] = True
        fixed = pa.Table.from_pylist(fixed_rows, schema=schema)
        table = pa.concat_tables([base, fixed]).take(pa.array(order[keep]))
    else:
        table = base.filter(pa.array(keep))
    return table, counts


def _event_row(raw: str) -> tuple[str, dict[str, Any] | None]:
    kind, record, envelope = ds.classify(raw)
    return kind, (ds.event_columns(record, envelope) if record is not None else None)


def _plain_row(columns: Callable[[dict[str, Any]], dict[str, Any]]) -> RowFn:
    def row(raw: str) -> tuple[str, dict[str, Any] | None]:
        kind, record, envelope = ds.classify(raw)
        if record is None:
            return kind, None
        # model.jsonl/tools.jsonl have no envelopes: the line's object is the row.
        return kind, columns(envelope if envelope is not None else record)
    return row


def _with_keys(table: pa.Table, schema: pa.Schema, keys: dict[str, list[str]]) -> pa.Table:
    """Prefix the per-file key columns (run, paths) and drop ``fid``."""
    fid = table.column("fid")
    columns = {name: pa.array(values, pa.string()).take(fid) for name, values in keys.items()}
    for name in schema.names:
        if name not in columns:
            columns[name] = table.column(name)
    return pa.table([columns[n] for n in schema.names], schema=schema)


#: A row group ends at this many rows or bytes of columns, whichever comes first.
ROW_GROUP_ROWS = 64 * 1024
ROW_GROUP_BYTES = 48 * 2**20


class _Writers:
    """One Parquet writer per table, appended to batch by batch.

    A batch's share of a table can be small (some 650 rows of ``runs``), so
    consecutive batches are gathered into row groups of up to ``ROW_GROUP_ROWS``
    rows or ``ROW_GROUP_BYTES``: readers then find the few large row groups a merge
    of per-process files used to give, not one per batch.
    """

    def __init__(self, folder: Path, schemas: dict[str, pa.Schema]) -> None:
        self.writers = {
            name: pq.ParquetWriter(
                folder / f"{name}.parquet", schema, compression="zstd", compression_level=1,
                use_dictionary=[f.name for f in schema if f.name in _DICTIONARY],
            )
            for name, schema in schemas.items()
        }
        self.gathered: dict[str, list[pa.Table]] = {name: [] for name in schemas}

    def write(self, name: str, table: pa.Table) -> None:
        gathered = self.gathered[name]
        if len(table):
            gathered.append(table)
        if sum(map(len, gathered)) >= ROW_GROUP_ROWS \
                or sum(t.nbytes for t in gathered) >= ROW_GROUP_BYTES:
            self._flush(name)

    def _flush(self, name: str) -> None:
        gathered = self.gathered[name]
        if gathered:
            self.writers[name].write_table(pa.concat_tables(gathered),
                                           row_group_size=ROW_GROUP_ROWS)
            gathered.clear()

    def close(self, *, flush: bool = True) -> None:
        """Write what is gathered (not after a failure) and close the files; once.

        The tables are encoded side by side: this is the ingest's last step, with
        every other process done and their cores free.
        """
        try:
            if flush:
                with ThreadPoolExecutor(max_workers=len(self.writers) or 1) as threads:
                    for done in [threads.submit(self._flush, name) for name in self.writers]:
                        done.result()
        finally:
            for writer in self.writers.values():
                writer.close()
            self.writers = {}


_DICTIONARY = {"run", "events_path", "path", "event", "branch", "tool", "outcome", "reason",
               "budget_which", "protocol", "profile", "sandbox", "kind", "at"}


def _meta_fields(meta: str | None) -> tuple[str | None, str | None]:
    """(run_id, objective) from meta.json text, for runs whose stream does not say."""
    if meta is None:
        return None, None
    try:
        value = orjson.loads(meta)
    except orjson.JSONDecodeError:
        return None, None
    if not isinstance(value, dict):
        return None, None
    inner = value.get("meta")
    objective = inner.get("objective") if isinstance(inner, dict) else None
    return ds.text(value.get("run_id")), ds.text(objective)


def _runs_table(events: pa.Table, batch: _Batch, rels: list[str],
                counts: dict[str, np.ndarray]) -> pa.Table:
    """One row per run: its line counts; run_id and objective from its first
    mission_started record (else from meta.json); whether it has a mission_finished
    record and the outcome of the last. ``events`` rows are in (fid, line) order."""
    started: dict[int, tuple[str | None, str | None]] = {}
    outcome: dict[int, str | None] = {}
    kinds = events.column("event").to_pylist()
    at = [i for i, kind in enumerate(kinds) if kind in ("mission_started", "mission_finished")]
    if at:
        wanted = events.select(["fid", "event", "run_id", "objective", "outcome"]).take(at)
        for fid, event, run_id, objective, out in zip(*wanted.to_pydict().values(),
                                                      strict=True):
            if event == "mission_started":
                started.setdefault(fid, (run_id, objective))
            else:
                outcome[fid] = out
    rows = []
    metas = batch.metas
    for fid, run in enumerate(batch.runs):
        run_id, objective = started.get(fid, (None, None))
        meta_id, meta_objective = _meta_fields(metas[fid])
        rows.append({
            "run": run, "events_path": rels[fid],
            "records": int(counts["record"][fid]), "blank": int(counts["blank"][fid]),
            "torn": int(counts["torn"][fid]), "non_object": int(counts["non_object"][fid]),
            "run_id": run_id if run_id is not None else meta_id,
            "objective": objective if objective is not None else meta_objective,
            "finished": fid in outcome, "outcome": outcome.get(fid), "meta": metas[fid],
        })
    return pa.Table.from_pylist(rows, schema=ds.RUNS_SCHEMA)


def connect(threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the JSON macros the ingest SQL uses."""
    import duckdb

    con = duckdb.connect(config={"threads": threads} if threads else {})
    con.execute("SET enable_progress_bar = false")
    con.execute(_MACROS)
    return con


class _Connection:
    """``connect(threads)``, opened when first used.

    Only lines the fast path leaves to SQL need DuckDB, and the run store writes
    none: importing it and opening a connection (0.1 s of CPU in each process) is
    then saved. Stands in for the connection (attributes are the connection's).
    """

    def __init__(self, threads: int | None = None) -> None:
        self._threads = threads
        self._con: duckdb.DuckDBPyConnection | None = None

    def __getattr__(self, name: str) -> Any:
        if self._con is None:
            self._con = connect(self._threads)
        return getattr(self._con, name)

    def close(self) -> None:
        if self._con is not None:
            self._con.close()


_EVENT_FIELDS = [f for f in ds.EVENTS_SCHEMA if f.name not in ("run", "events_path", "line")]
_MODEL_FIELDS = [f for f in ds.MODEL_SCHEMA if f.name not in ("run", "path", "line")]
_TOOL_FIELDS = [f for f in ds.TOOL_SCHEMA if f.name not in ("run", "path", "line")]

#: How each kind of file is read: the Python row function for the lines the SQL
#: leaves to Python, the columns, and the fast path's column spec.
_KIND_WAYS: dict[str, tuple[RowFn, list[pa.Field], _Spec]] = {
    "events": (_event_row, _EVENT_FIELDS, _EVENT_SPEC),
    "model": (_plain_row(ds.model_columns), _MODEL_FIELDS, _MODEL_SPEC),
    "tools": (_plain_row(ds.tool_columns), _TOOL_FIELDS, _TOOL_SPEC),
}


def events_table(con: duckdb.DuckDBPyConnection, contents: list[str | None]
                 ) -> tuple[pa.Table, dict[str, np.ndarray]]:
    """Event rows (with ``fid``) and per-file line counts for a list of events-file texts."""
    return _lines_table(con, contents, "events")


def _ingest_batch(con: duckdb.DuckDBPyConnection, batch: _Batch,
                  derive: Derivation | None = None) -> tuple[int, list[tuple[str, pa.Table]]]:
    """Convert one batch: (its number of events, the tables to append)."""
    out: list[tuple[str, pa.Table]] = []
    rels = batch.rel(EVENTS_FILE)
    events, counts = events_table(con, batch.events)
    runs = _runs_table(events, batch, rels, counts)
    events = _with_keys(events, ds.EVENTS_SCHEMA, {"run": batch.runs, "events_path": rels})
    out.append(("runs", runs))
    out.append(("events", events))
    if derive is not None:
        out.extend(derive(con, events, runs, batch.events))
    for name, kind, contents, schema, file in (
        ("model_calls", "model", batch.models, ds.MODEL_SCHEMA, MODEL_FILE),
        ("tool_calls", "tools", batch.tools, ds.TOOL_SCHEMA, TOOLS_FILE),
    ):
        if any(c is not None for c in contents):
            table, _ = _lines_table(con, contents, kind)
            out.append((name, _with_keys(table, schema, {"run": batch.runs,
                                                          "path": batch.rel(file)})))
    return len(events), out


def _replace(tmp: Path, out: Path) -> None:
    """Put the finished dataset in place; the old one goes only once the new one is there."""
    if out.exists():
        old = _sibling(out, "old")
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)
    _remove_abandoned(out)


def _sibling(out: Path, kind: str) -> Path:
    """This process's temporary sibling of ``out``: ``.NAME.KIND-HOST-PID``."""
    return out.with_name(leftovers.tagged(f".{out.name}.{kind}-"))


def _remove_abandoned(out: Path) -> None:
    """Remove the temporary siblings of ``out`` that an ingest killed here left behind.

    Called once a new dataset is in place, so nothing is removed while it is
    the only copy of the runs' tables.
    """
    leftovers.remove_left_behind(out.parent, (f".{out.name}.tmp-", f".{out.name}.old-"))


#: Runs each process must get before ingest fans out: starting a worker process
#: (Python and its imports, some 0.7 s of CPU) pays off from about there.
RUNS_PER_WORKER = 1000


def ingest(root: Path, out: Path | None = None, *, threads: int | None = None,
           batch_bytes: int = BATCH_BYTES, workers: int | None = None,
           derive: Derivation | None = None) -> IngestResult:
    """Turn every run directory under ``root`` into a Parquet dataset folder at ``out``.

    Default ``out`` is ``root/dataset.parquet``. Re-ingesting the same runs
    gives the same dataset (no timestamps inside), written to a temporary
    folder and renamed into place. ``workers`` is how many processes convert
    batches, this one included (default: one per core, for every
    ``RUNS_PER_WORKER`` runs); however many there are, the tables come out as
    one process would write them. ``derive`` adds tables computed from each batch.
    """
    started = time.perf_counter()
    root = Path(root)
    if not root.is_dir():
        raise EvalkitError(f"cannot ingest {root}: it is not a directory")
    out = Path(out) if out is not None else root / ds.DEFAULT_NAME
    _check_out(out)
    tmp = _sibling(out, "tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    except OSError as exc:
        raise EvalkitError(f"cannot write a dataset at {out}: {exc.strerror or exc}") from None
    try:
        streams = _Streams(root)
        with collector_paused():  # parsed lines form no cycles; its passes were a seventh of the CPU
            n_runs, n_events, n_bytes = _convert(root, streams.note(_walk(root, skip=out)), tmp,
                                                 threads, batch_bytes, workers, derive)
        names = [*ds.TABLES, *(derive.schemas if derive is not None else ())]
        manifest = {"format": ds.FORMAT, "version": ds.VERSION, "runs": n_runs,
                    "events": n_events, "bytes": n_bytes,
                    "tables": {name: f"{name}.parquet" for name in names},
                    ds.WITHOUT_STREAM: streams.without(skip=out),
                    **(derive.manifest if derive is not None else {})}
        (tmp / ds.MANIFEST).write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
        _replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return IngestResult(out=out, runs=n_runs, events=n_events, bytes=n_bytes,
                        seconds=time.perf_counter() - started)


def _check_out(out: Path) -> None:
    """Ingest replaces an earlier dataset (or fills an empty folder), never anything else."""
    try:
        if not os.path.lexists(out):
            return
        if out.is_dir() and ((out / ds.MANIFEST).is_file() or not any(out.iterdir())):
            return
    except OSError as exc:
        raise EvalkitError(f"cannot write a dataset at {out}: {exc.strerror or exc}") from None
    raise EvalkitError(f"cannot write a dataset at {out}: it exists and is not an evalkit "
                       "dataset; give a new path (ingest replaces only an earlier dataset)")


class _Streams:
    """Which names directly under the root hold a stream where ``score --runs`` looks for
    one (its own events file, or one a level or two below), noted as the walk finds runs;
    the others are listed in the manifest, so scoring from the dataset words them alike."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._prefix = os.path.join(os.fspath(root), "")
        self._names: set[str] = set()

    def note(self, runs: Iterator[str]) -> Iterator[str]:
        prefix, names = self._prefix, self._names
        for run in runs:
            if run.startswith(prefix):
                parts = run[len(prefix):].split(os.sep, 3)
                if len(parts) <= 3:
                    names.add(parts[0])
            yield run

    def without(self, skip: Path) -> list[str]:
        """The names of what is under the root and holds no such stream, sorted.

        Files are left out (``score --runs`` reads one as an events file), and so are
        symbolic links (the walk does not follow them), and the dataset itself.
        """
        own, root = _Own(skip), os.fspath(self.root)
        try:
            with os.scandir(root) as listing:
                return sorted(entry.name for entry in listing
                              if entry.name not in self._names and not entry.is_symlink()
                              and not entry.is_file() and not own.holds(root, entry.name))
        except OSError:
            return []


def _schemas(derive: Derivation | None) -> dict[str, pa.Schema]:
    return {**ds.SCHEMAS, **(derive.schemas if derive is not None else {})}


class _Plan:
    """The run directories, found as they are wanted and cut into consecutive batches
    of about ``batch_bytes`` of JSONL.

    ``find`` walks on (from the main thread only: a thread that walks while another
    one holds the GIL waits on it at every directory). Batch sizes follow the bytes per
    run seen so far, the first runs' file sizes to start with. Once every run has been
    found, the last batches shrink to a share of what is left, so that the processes
    finish together rather than one waiting on another's last batch.
    """

    def __init__(self, runs: Iterator[str], batch_bytes: int) -> None:
        self._runs, self.batch_bytes = runs, batch_bytes
        self.found: deque[str] = deque()
        self.done = False
        self.processes = 1
        self.bytes = self.runs = 0

    def find(self, wanted: int) -> None:
        """Walk on until ``wanted`` runs are waiting to be taken, or there are no more."""
        while len(self.found) < wanted and not self.done:
            run = next(self._runs, None)
            if run is None:
                self.done = True
            else:
                self.found.append(run)
        if not self.runs and self.found:
            sample = list(islice(self.found, 32))
            self.bytes = sum(_size(os.path.join(d, name)) for d in sample
                             for name in (EVENTS_FILE, MODEL_FILE, TOOLS_FILE))
            self.runs = len(sample)

    def __bool__(self) -> bool:
        """Runs found and not taken yet (after ``find``: runs left)."""
        return bool(self.found)

    def size(self) -> int:
        """Runs in the next batch."""
        per_run = max(1, self.bytes // max(1, self.runs))
        size = max(16, min(BATCH_FILES, self.batch_bytes // per_run))
        if self.done:
            size = min(size, max(16, -(-len(self.found) // (2 * self.processes))))
        return size

    def take(self) -> list[str]:
        found = self.found
        return [found.popleft() for _ in range(min(self.size(), len(found)))]

    def learn(self, runs: int, nbytes: int) -> None:
        self.runs += runs
        self.bytes += nbytes


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


@dataclass
class _Converted:
    """One batch, converted: its tables, or where a worker process left them (Arrow files)."""

    runs: int
    events: int
    nbytes: int
    tables: list[tuple[str, pa.Table]] | None = None
    files: list[tuple[str, str]] | None = None

    def load(self) -> list[tuple[str, pa.Table]]:
        if self.tables is not None:
            return self.tables
        assert self.files is not None
        # Memory-mapped: the Parquet writer reads the worker's columns where they lie.
        return [(name, pa.ipc.open_file(pa.memory_map(path)).read_all())
                for name, path in self.files]

    def discard(self) -> None:
        for _, path in self.files or ():
            os.unlink(path)


def _convert_here(con: duckdb.DuckDBPyConnection, root: Path, dirs: list[str],
                  derive: Derivation | None) -> _Converted:
    batch = _load(root, dirs)
    events, tables = _ingest_batch(con, batch, derive)
    return _Converted(len(batch.runs), events, batch.nbytes, tables=tables)


def _convert_there(con: _Connection, root: Path, dirs: list[str], derive: Derivation | None,
                   stem: str) -> _Converted:
    """A batch converted in a worker process, its tables left as Arrow files ``stem.N``:
    handing them over costs one copy each way, far less than pickling them through a pipe.
    (``con`` opens DuckDB on first use: a failure there comes back as this batch's error.)"""
    done = _convert_here(con, root, dirs, derive)  # type: ignore[arg-type]
    files = []
    for i, (name, table) in enumerate(done.tables or ()):
        path = f"{stem}.{i}"
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        files.append((name, path))
    return _Converted(done.runs, done.events, done.nbytes, files=files)


# --- worker processes ------------------------------------------------------------

#: What a worker process runs: this process's import path (where it found evalkit and
#: whatever the derivation needs), then ``_serve``. Not multiprocessing's spawn: its
#: child imports the caller's main module again, and a script calling ingest without an
#: ``if __name__ == "__main__":`` guard then ingests again in there, and fails.
_BOOTSTRAP = ("import pickle, sys; sys.path[:] = pickle.load(sys.stdin.buffer); "
              "from evalkit.store.ingest import _serve; _serve()")


def _serve() -> None:
    """A worker process's life: batches (``_convert_there``'s arguments after ``con``)
    read from stdin, each answered on stdout as (True, result) or (False, exception),
    till stdin closes.

    Anything printed goes to stderr (the answers have stdout to themselves); Ctrl-C is
    left to the parent, which stops its workers itself.
    """
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.disable()  # as ingest's collector_paused, for the process's whole life
    _skip_pandas_probe()
    con = _Connection(1)  # one per process, opened by the first batch that needs SQL
    tasks = sys.stdin.buffer
    while True:
        try:
            task = pickle.load(tasks)
        except EOFError:
            return
        try:
            answer: tuple[bool, Any] = (True, _convert_there(con, *task))
        except BaseException as exc:  # the parent raises it
            answer = (False, exc)
        try:
            data = pickle.dumps(answer, pickle.HIGHEST_PROTOCOL)
        except Exception:  # an exception that does not pickle: its words do
            data = pickle.dumps((False, EvalkitError(f"ingest worker: {answer[1]!r}")))
        answers.write(data)
        answers.flush()


def _skip_pandas_probe() -> None:
    """Spare a worker process pyarrow's import of pandas (0.2 s of CPU).

    pyarrow imports pandas on its first conversion, only to recognise pandas objects
    handed to ``pa.array``; ingest hands it none. With pandas unimportable for that first
    conversion pyarrow takes it as absent; it is importable again afterwards, and
    pyarrow's own pandas functions (``to_pandas``…) import it when called. (Only in a
    worker, a process of ingest's own: a derivation there that hands ``pa.array`` a
    pandas object before any of those gets it read as a plain sequence.)
    """
    if "pandas" in sys.modules:
        return
    sys.meta_path.insert(0, _NoPandas)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(_NoPandas)


class _NoPandas:
    """An import finder that refuses pandas (for ``_skip_pandas_probe``)."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        if name == "pandas":
            raise ModuleNotFoundError("not imported by an ingest worker", name=name)


#: A worker's environment, where the caller's says nothing else. Its memory is what
#: costs here (each first touch of a page is a fault, some 5 µs on a VM): freed memory
#: is kept for the next batch, by Arrow's allocator (mimalloc) and by the C library's,
#: rather than handed back to the system and faulted in again. And numpy's BLAS starts
#: no threads: they spin some 0.15 s of CPU at import, and a worker does no algebra.
_WORKER_ENV = {
    "MIMALLOC_PURGE_DELAY": "-1",
    "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
    "MALLOC_TOP_PAD_": str(64 << 20),
    "OPENBLAS_NUM_THREADS": "1",
}


class _Process:
    """A worker process (``_serve``) and the thread that talks to it: batches are sent
    one at a time, in the order given, each answered through its ``Future``."""

    def __init__(self) -> None:
        self._popen = subprocess.Popen([sys.executable, "-c", _BOOTSTRAP],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       env={**_WORKER_ENV, **os.environ})
        assert self._popen.stdin is not None
        with suppress(BrokenPipeError):  # it died at once: its first batch says so
            pickle.dump(sys.path, self._popen.stdin)
            self._popen.stdin.flush()
        self._tasks: queue.SimpleQueue[tuple[tuple[Any, ...], Future[_Converted]] | None] = \
            queue.SimpleQueue()
        self._thread = threading.Thread(target=self._talk, name="evalkit-ingest-worker",
                                        daemon=True)
        self._thread.start()

    def submit(self, *task: Any) -> Future[_Converted]:
        future: Future[_Converted] = Future()
        self._tasks.put((task, future))
        return future

    def _talk(self) -> None:
        stdin, stdout = self._popen.stdin, self._popen.stdout
        assert stdin is not None and stdout is not None
        while (item := self._tasks.get()) is not None:
            task, future = item
            try:
                pickle.dump(task, stdin, pickle.HIGHEST_PROTOCOL)
                stdin.flush()
                ok, value = pickle.load(stdout)
            except (OSError, EOFError, pickle.UnpicklingError):
                code = self._popen.wait()
                future.set_exception(EvalkitError(
                    f"an ingest worker process stopped (exit status {code})"))
                continue  # the batches still to come fail the same way
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    def stop(self) -> None:
        """End the process (a batch it is converting is abandoned) and the thread."""
        self._popen.kill()
        self._tasks.put(None)
        self._thread.join()
        self._popen.wait()
        for pipe in (self._popen.stdin, self._popen.stdout):
            with suppress(OSError):
                pipe.close()  # type: ignore[union-attr]


def _can_fan_out(derive: Derivation | None) -> bool:
    """Whether worker processes can convert: they start from this Python, and must find
    the derivation's class (one defined in the caller's main script they cannot)."""
    return bool(sys.executable) and (derive is None or type(derive).__module__ != "__main__")


class _Here:
    """A batch this process converts (a ``Future``'s ``done``/``result``)."""

    def __init__(self) -> None:
        self.value: _Converted | None = None

    def done(self) -> bool:
        return self.value is not None

    def result(self) -> _Converted:
        assert self.value is not None
        return self.value


#: Batches this process may have converted ahead of the oldest one still being
#: converted by a worker process (their tables wait in memory to be written).
_HELD = 3


def _convert(root: Path, runs: Iterator[str], folder: Path, threads: int | None,
             batch_bytes: int, workers: int | None, derive: Derivation | None = None
             ) -> tuple[int, int, int]:
    """Convert the run directories ``runs`` into the tables of ``folder``: (runs, events,
    bytes read).

    Batches are taken in order by whichever process is free: a worker process
    (there are ``workers - 1``) is handed its next batch the moment it returns
    one, so it never waits on this process, and this process takes the next
    batch itself while the oldest one is still being converted elsewhere. This
    process writes every batch's tables, in batch order; the Parquet encoding
    runs in a thread beside its own converting (both release the GIL).
    """
    plan = _Plan(runs, batch_bytes)
    if not _can_fan_out(derive):
        workers = 1
    elif workers is None:
        cpus = len(os.sched_getaffinity(0))
        plan.find(cpus * RUNS_PER_WORKER)
        workers = min(cpus, len(plan.found) // RUNS_PER_WORKER)
    plan.processes = workers = max(1, workers)
    pending: deque[Future[_Converted] | _Here] = deque()  # batches in order
    lock = threading.Lock()  # plan and pending, shared with the workers' threads
    idle: list[_Process] = []  # worker processes that found no batch to take (the walk lagging)
    totals = [0, 0, 0]
    scratch = folder / ".batches"
    con: Any = _Connection(threads)
    writers = _Writers(folder, _schemas(derive))
    processes: list[_Process] = []
    stopping = False
    numbers = count()

    def hand_out(worker: _Process) -> None:
        """Give a worker process its next batch (called again as each one comes back)."""
        with lock:
            if stopping:
                return
            if not plan:
                idle.append(worker)
                return
            stem = os.fspath(scratch / str(next(numbers)))
            future = worker.submit(root, plan.take(), derive, stem)
            pending.append(future)
        future.add_done_callback(lambda _: hand_out(worker))

    try:
        if workers > 1:
            scratch.mkdir()
            processes = [_Process() for _ in range(workers - 1)]
            idle.extend(processes)
        with ThreadPoolExecutor(max_workers=1) as writer:
            writes: deque[Future[None]] = deque()
            while True:
                # Enough runs found for every process's next batch, then some. (Outside
                # the lock: a worker's batch is taken meanwhile; the deque allows both.)
                plan.find((workers + 1) * plan.size())
                with lock:
                    waiting = idle[:]
                    idle.clear()
                for worker in waiting:
                    hand_out(worker)
                here = None
                with lock:
                    if not pending and not plan:
                        break
                    head = pending[0] if pending else None
                    held = sum(isinstance(p, _Here) for p in pending)
                    if plan and held < _HELD and (head is None or not head.done()):
                        here, taken = _Here(), plan.take()
                        pending.append(here)
                if here is not None:
                    here.value = _convert_here(con, root, taken, derive)
                    continue
                assert head is not None
                done = head.result()  # a worker's batch: waits for it if need be
                with lock:
                    pending.popleft()
                    plan.learn(done.runs, done.nbytes)
                for i, n in enumerate((done.runs, done.events, done.nbytes)):
                    totals[i] += n
                while len(writes) > 1:  # memory stays bounded: one write queued at most
                    writes.popleft().result()
                writes.append(writer.submit(_write, writers, done))
            for write in writes:
                write.result()
        writers.close()
    finally:
        with lock:
            stopping = True
        for process in processes:
            process.stop()
        writers.close(flush=False)  # after a failure: the folder is thrown away
        con.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return totals[0], totals[1], totals[2]


def _write(writers: _Writers, done: _Converted) -> None:
    tables = done.load()
    done.discard()  # a mapped file stays readable once unlinked, till it is unmapped
    for name, table in tables:
        writers.write(name, table)
