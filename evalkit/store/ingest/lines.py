"""The lines of one kind of file across a batch, as rows of typed columns.

The fast path takes the records whose line is exactly orjson's own text and
computes their columns with ``evalkit.store.dataset``'s reference functions;
the rest go through the SQL of ``evalkit.store.ingest.sql``, whose rare rows
are recomputed in Python here. Both meet in ``lines_table``, in line order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
import pyarrow as pa

from evalkit.store import dataset as ds
from evalkit.store.ingest.sql import USAGE, sql_for
from evalkit.store.reader import unwrap

if TYPE_CHECKING:
    import duckdb


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
    *((name, ("usage", name), ds.real) for name in USAGE),
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


#: Handed each file's records as the reader reads them: (fid, records, their lines, lines
#: skipped), in file order, while they are still in memory.
Fold = Callable[[int, list[dict[str, Any]], list[int], int], None]


def _parse(contents: list[str | None], keys: tuple[str, ...], events: bool,
           fold: Fold | None = None) -> _Parsed:
    """Read every line as ``reader.parse_text`` does (orjson: blank, torn, non-object or a
    record, envelopes unwrapped) and keep the records whose text is exactly what
    ``orjson.dumps`` writes for them.

    For such a line nothing is left to decide: the SQL path keeps this very text as
    ``record`` (the line, or the envelope's record cut out of it) whether or not it
    flags the line rare, a rare row's text being ``orjson.dumps`` of its record; and
    the columns are computed from the parsed record by the reference functions
    themselves. Every other record line (spaces, other number spellings, duplicate
    keys, NaN…) goes to the SQL path, which decides it as before.

    ``fold``, if given, is handed every file's records as ``reader.parse_text`` reads
    them (envelopes unwrapped, whatever their spelling), so a derivation folds them
    from this one parse rather than reading the text again.
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
    records, non_object = counts["record"], counts["non_object"]
    add_row, add_text, add_number = rows.append, texts.append, numbers.append
    for fid, content in enumerate(contents):
        if content is None:
            if fold is not None:
                fold(fid, [], [], 0)
            continue
        pieces = content.split("\n")
        if not pieces[-1]:
            pieces.pop()  # the newline that ends the last line starts no new line
        taken = len(rows)
        read: list[dict[str, Any]] = []
        read_lines: list[int] = []
        for number, line in enumerate(pieces, 1):
            try:
                value = loads(line)
            except refused:
                # The reader's reading of what orjson refuses.
                kind, record, _ = ds.classify(line)
                if kind == "record":  # JSON all the same (a lone surrogate escape, 1e400)
                    slow.append((fid, number, line))
                    if fold is not None:
                        read.append(record)  # type: ignore[arg-type]
                        read_lines.append(number)
                else:
                    counts[kind][fid] += 1
                continue
            if type(value) is not dict:
                non_object[fid] += 1
                continue
            if fold is not None:
                read.append(unwrap(value))
                read_lines.append(number)
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
        if fold is not None:
            fold(fid, read, read_lines,
                 counts["blank"][fid] + counts["torn"][fid] + non_object[fid])
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


def lines_table(con: duckdb.DuckDBPyConnection, contents: list[str | None], kind: str,
                fold: Fold | None = None) -> tuple[pa.Table, dict[str, np.ndarray]]:
    """The record rows (with ``fid`` and ``line``) and per-file line counts of one kind of
    file (``events``, ``model`` or ``tools``): the fast path's rows and the SQL's, in order.
    ``fold`` is handed each file's records as the reader reads them (see ``_parse``)."""
    row, fields, spec = _KIND_WAYS[kind]
    events = kind == "events"
    parsed = _parse(contents, _EVENT_TOP if events else _top_keys(spec), events, fold)
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
        slow, slow_counts = _records(_query(con, sql_for(kind), [t for _, _, t in parsed.slow]),
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


_KINDS = ("record", "blank", "torn", "non_object")


#: Files handed to DuckDB's threads at a time.
_CHUNK_FILES = 16


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


def events_table(con: duckdb.DuckDBPyConnection, contents: list[str | None],
                 fold: Fold | None = None) -> tuple[pa.Table, dict[str, np.ndarray]]:
    """Event rows (with ``fid``) and per-file line counts for a list of events-file texts
    (``fold``: see ``_parse``)."""
    return lines_table(con, contents, "events", fold)
