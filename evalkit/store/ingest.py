"""``evalkit ingest``: run directories -> a Parquet dataset DuckDB can read.

Why SQL and not a Python loop: parsing JSON line by line in Python costs
more than everything else a scorer does. Here Python only reads bytes and
decodes them exactly like ``reader.read_events_file``; DuckDB splits lines,
validates JSON, unwraps envelopes and extracts typed columns, many files at a
time, on every core. The few lines where DuckDB's JSON parser and orjson (the
reader's parser) could disagree — NaN/Infinity literals, trailing commas,
overflowing or 64-bit-plus numbers, duplicate keys, non-object lines — and
the few records whose columns need Python's own formatting (non-conforming
records, non-string values in text fields) are flagged in SQL with cheap
tests and recomputed in Python by ``evalkit.store.dataset`` — the reference
meaning of every column. So a dataset says what the reader says, by
construction, and pays for Python only on rows that are rare in practice.

Work goes in batches of files so memory stays bounded; each batch is
appended to the four Parquet files as row groups. A caller may add tables
derived from each batch (a ``Derivation``: ``evalkit.eval.tables`` adds the
per-run summaries scoring reads), computed while the batch is in memory, so
nothing is parsed twice and this module needs to know nothing of scoring. The dataset is written to a
temporary folder and renamed into place, so a reader never sees half of one.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import duckdb
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from evalkit.contract import FIELDS
from evalkit.errors import EvalkitError
from evalkit.store import dataset as ds
from evalkit.store.layout import EVENTS_FILE, META_FILE, MODEL_FILE, TOOLS_FILE

#: Bytes of JSONL handed to DuckDB at once: big enough to keep both cores
#: busy, small enough that peak memory stays a few hundred MB.
BATCH_BYTES = 48 * 2**20
BATCH_FILES = 4000
_CHUNK_FILES = 16

#: What ``str.strip()`` removes: a line of only these is blank, as in the reader.
_PY_SPACE = "".join(chr(c) for c in range(0x110000) if chr(c).isspace())
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
                    ELSE trim(text, '{_PY_SPACE}') = '' END AS blank,
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
            v = x[path]
            select.append(f"CASE WHEN left({v}, 1) = '\"' THEN j_str({v}) "
                          f"WHEN {v} <> 'null' THEN {v} END AS \"{name}\"")
        else:
            select.append(f'j_{kind}({x[path]}) AS "{name}"')
    odd = " OR ".join(f"j_odd({x[columns[n][0]]})" for n in names if columns[n][1] == "str")
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


_MODEL_SQL = _plain_sql(
    {"call": ("$.call", "int"), "at": ("$.at", "str"), "kind": ("$.kind", "str"),
     "content": ("$.reply.content", "str"),
     "prompt_tokens": ("$.reply.usage.prompt_tokens", "num"),
     "completion_tokens": ("$.reply.usage.completion_tokens", "num"),
     "total_tokens": ("$.reply.usage.total_tokens", "num")},
    ("$.reply", "$.reply.usage"),
)
_TOOL_SQL = _plain_sql(
    {"call": ("$.call", "int"), "at": ("$.at", "str"), "tool": ("$.tool", "str"),
     "arguments": ("$.arguments", "json"), "exit_code": ("$.result.exit_code", "int"),
     "catalogue": ("$.catalogue", "json")},
    ("$.result",),
)


# --- driving it ----------------------------------------------------------------

class Derivation(Protocol):
    """Extra tables computed from each batch: its ``events`` and ``runs`` tables, and
    ``texts``, each events file's text as the reader decodes it (parallel to ``runs``).

    ``schemas`` names the tables and their shapes; ``manifest`` is merged into
    the dataset's manifest (say what version of the derivation wrote them).
    It must be picklable: large ingests run it in worker processes.
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
    root = Path(root)
    skip_real = os.path.realpath(skip) if skip is not None else None
    temp_prefix = f".{skip.name}." if skip is not None else None
    found: list[Path] = []
    stack = [os.fspath(root)]
    while stack:
        here = stack.pop()
        try:
            entries = list(os.scandir(here))
        except OSError:
            continue
        for entry in entries:
            if entry.name == EVENTS_FILE and entry.is_file():
                found.append(Path(here))
            elif entry.is_dir(follow_symlinks=False):
                if skip is not None and (
                    entry.name == skip.name or entry.name.startswith(temp_prefix)
                ) and os.path.realpath(os.path.dirname(entry.path)) == os.path.dirname(skip_real):
                    continue
                stack.append(entry.path)
    prefix = len(os.fspath(root).rstrip(os.sep)) + 1
    # Component-wise order, as sorted(Path) gives, without building Path parts.
    return sorted(found, key=lambda p: os.fspath(p)[prefix:].split(os.sep))


def _read_text(path: str, *, required: bool = False) -> tuple[str | None, int]:
    """(a file's text decoded as ``reader.read_events_file`` decodes it, its size in bytes);
    (None, 0) when it is absent."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        return data.decode("utf-8", "replace"), len(data)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        if required:
            raise EvalkitError(f"cannot read {path}: it vanished during ingest") from None
        return None, 0
    except OSError as exc:
        raise EvalkitError(f"cannot read {path}: {exc.strerror or exc}") from None


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


def _load(root: Path, dirs: list[Path]) -> _Batch:
    runs, events, models, tools, metas = [], [], [], [], []
    nbytes = 0
    for path in dirs:
        runs.append(path.relative_to(root).as_posix())
        base = os.fspath(path)
        texts = [_read_text(os.path.join(base, EVENTS_FILE), required=True)] + [
            _read_text(os.path.join(base, name)) for name in (MODEL_FILE, TOOLS_FILE, META_FILE)
        ]
        nbytes += sum(size for _, size in texts[:3])
        for bucket, (value, _) in zip((events, models, tools, metas), texts, strict=True):
            bucket.append(value)
    return _Batch(runs, events, models, tools, metas, nbytes)


def _batches(root: Path, dirs: list[Path], batch_bytes: int) -> Iterator[_Batch]:
    """Batches of about ``batch_bytes`` of text, the next one read while this one is worked on."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        start, size = 0, 64
        pending = pool.submit(_load, root, dirs[start:start + size]) if dirs else None
        while pending is not None:
            batch = pending.result()
            start += size
            per_run = max(1, batch.nbytes // max(1, len(batch.runs)))
            size = max(16, min(BATCH_FILES, batch_bytes // per_run))
            pending = pool.submit(_load, root, dirs[start:start + size]) if start < len(dirs) else None
            yield batch


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


class _Writers:
    """One Parquet writer per table, appended to batch by batch."""

    def __init__(self, folder: Path, schemas: dict[str, pa.Schema]) -> None:
        self.writers = {
            name: pq.ParquetWriter(
                folder / f"{name}.parquet", schema, compression="zstd", compression_level=1,
                use_dictionary=[f.name for f in schema if f.name in _DICTIONARY],
            )
            for name, schema in schemas.items()
        }

    def write(self, name: str, table: pa.Table) -> None:
        if len(table):
            self.writers[name].write_table(table, row_group_size=256 * 1024)

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()


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


_RUNS_SQL = """
SELECT fid,
    arg_min_null(run_id, line) FILTER (WHERE event = 'mission_started') AS run_id,
    arg_min_null(objective, line) FILTER (WHERE event = 'mission_started') AS objective,
    bool_or(event = 'mission_finished') AS finished,
    arg_max_null(outcome, line) FILTER (WHERE event = 'mission_finished') AS outcome
FROM batch_events GROUP BY fid
"""


def _runs_table(con: duckdb.DuckDBPyConnection, events: pa.Table, batch: _Batch,
                rels: list[str], counts: dict[str, np.ndarray]) -> pa.Table:
    con.register("batch_events", events)
    try:
        found = {row[0]: row[1:] for row in con.execute(_RUNS_SQL).fetchall()}
    finally:
        con.unregister("batch_events")
    rows = []
    metas = batch.metas
    for fid, run in enumerate(batch.runs):
        run_id, objective, finished, outcome = found.get(fid, (None, None, False, None))
        meta_id, meta_objective = _meta_fields(metas[fid])
        rows.append({
            "run": run, "events_path": rels[fid],
            "records": int(counts["record"][fid]), "blank": int(counts["blank"][fid]),
            "torn": int(counts["torn"][fid]), "non_object": int(counts["non_object"][fid]),
            "run_id": run_id if run_id is not None else meta_id,
            "objective": objective if objective is not None else meta_objective,
            "finished": bool(finished), "outcome": outcome, "meta": metas[fid],
        })
    return pa.Table.from_pylist(rows, schema=ds.RUNS_SCHEMA)


def connect(threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the JSON macros the ingest SQL uses."""
    con = duckdb.connect(config={"threads": threads} if threads else {})
    con.execute("SET enable_progress_bar = false")
    con.execute(_MACROS)
    return con


_EVENT_FIELDS = [f for f in ds.EVENTS_SCHEMA if f.name not in ("run", "events_path", "line")]
_MODEL_FIELDS = [f for f in ds.MODEL_SCHEMA if f.name not in ("run", "path", "line")]
_TOOL_FIELDS = [f for f in ds.TOOL_SCHEMA if f.name not in ("run", "path", "line")]


def events_table(con: duckdb.DuckDBPyConnection, contents: list[str | None]
                 ) -> tuple[pa.Table, dict[str, np.ndarray]]:
    """Event rows (with ``fid``) and per-file line counts for a list of events-file texts."""
    result = _query(con, _EVENTS_SQL, contents)
    return _records(result, _event_row, _EVENT_FIELDS, len(contents))


def _ingest_batch(con: duckdb.DuckDBPyConnection, batch: _Batch,
                  derive: Derivation | None = None) -> tuple[int, list[tuple[str, pa.Table]]]:
    """Convert one batch: (its number of events, the tables to append)."""
    out: list[tuple[str, pa.Table]] = []

    def write(name: str, table: pa.Table) -> None:
        out.append((name, table))

    rels = batch.rel(EVENTS_FILE)
    events, counts = events_table(con, batch.events)
    runs = _runs_table(con, events, batch, rels, counts)
    events = _with_keys(events, ds.EVENTS_SCHEMA, {"run": batch.runs, "events_path": rels})
    write("runs", runs)
    write("events", events)
    if derive is not None:
        out.extend(derive(con, events, runs, batch.events))
    for name, sql, contents, row, fields, schema, file in (
        ("model_calls", _MODEL_SQL, batch.models, _plain_row(ds.model_columns), _MODEL_FIELDS,
         ds.MODEL_SCHEMA, MODEL_FILE),
        ("tool_calls", _TOOL_SQL, batch.tools, _plain_row(ds.tool_columns), _TOOL_FIELDS,
         ds.TOOL_SCHEMA, TOOLS_FILE),
    ):
        if any(c is not None for c in contents):
            table, _ = _records(_query(con, sql, contents), row, fields, len(contents))
            write(name, _with_keys(table, schema, {"run": batch.runs, "path": batch.rel(file)}))
    return len(events), out


def _replace(tmp: Path, out: Path) -> None:
    """Put the finished dataset in place; the old one goes only once the new one is there."""
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)


#: Runs a worker process must have before ingest fans out (start-up is not free).
RUNS_PER_WORKER = 2000


def ingest(root: Path, out: Path | None = None, *, threads: int | None = None,
           batch_bytes: int = BATCH_BYTES, workers: int | None = None,
           derive: Derivation | None = None) -> IngestResult:
    """Turn every run directory under ``root`` into a Parquet dataset folder at ``out``.

    Default ``out`` is ``root/dataset.parquet``. Re-ingesting the same runs
    gives the same dataset (no timestamps inside), written to a temporary
    folder and renamed into place. Large sets are split into contiguous
    shares converted by worker processes (DuckDB keeps one core busy per
    query here) and merged in order, so the rows come out as one process
    would write them. ``derive`` adds tables computed from each batch.
    """
    started = time.perf_counter()
    root = Path(root)
    if not root.is_dir():
        raise EvalkitError(f"cannot ingest {root}: it is not a directory")
    out = Path(out) if out is not None else root / ds.DEFAULT_NAME
    dirs = discover(root, skip=out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    if workers is None:
        workers = max(1, min(len(os.sched_getaffinity(0)), len(dirs) // RUNS_PER_WORKER))
    try:
        if workers <= 1:
            n_runs, n_events, n_bytes = _ingest_into(root, dirs, tmp, threads, batch_bytes,
                                                     derive)
        else:
            n_runs, n_events, n_bytes = _ingest_parallel(root, dirs, tmp, threads, batch_bytes,
                                                         workers, derive)
        names = [*ds.TABLES, *(derive.schemas if derive is not None else ())]
        manifest = {"format": ds.FORMAT, "version": ds.VERSION, "runs": n_runs,
                    "events": n_events, "bytes": n_bytes,
                    "tables": {name: f"{name}.parquet" for name in names},
                    **(derive.manifest if derive is not None else {})}
        (tmp / ds.MANIFEST).write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
        _replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return IngestResult(out=out, runs=n_runs, events=n_events, bytes=n_bytes,
                        seconds=time.perf_counter() - started)


def _schemas(derive: Derivation | None) -> dict[str, pa.Schema]:
    return {**ds.SCHEMAS, **(derive.schemas if derive is not None else {})}


def _ingest_into(root: Path, dirs: list[Path], folder: Path, threads: int | None,
                 batch_bytes: int, derive: Derivation | None = None) -> tuple[int, int, int]:
    """Convert ``dirs`` into the tables of ``folder``: (runs, events, bytes read)."""
    n_runs = n_events = n_bytes = 0
    con = connect(threads)
    writers = _Writers(folder, _schemas(derive))
    try:
        # Parquet encoding runs beside the next batch's SQL (both release the GIL).
        with ThreadPoolExecutor(max_workers=1) as writer:
            pending: list[Future[None]] = []
            for batch in _batches(root, dirs, batch_bytes):
                events, tables = _ingest_batch(con, batch, derive)
                n_events += events
                n_runs += len(batch.runs)
                n_bytes += batch.nbytes
                for done in pending:
                    done.result()
                pending = [writer.submit(writers.write, n, t) for n, t in tables]
            for done in pending:
                done.result()
    finally:
        writers.close()
        con.close()
    return n_runs, n_events, n_bytes


def _ingest_share(args: tuple[Path, list[Path], Path, int | None, int, Derivation | None]
                  ) -> tuple[int, int, int]:
    return _ingest_into(*args)


def _ingest_parallel(root: Path, dirs: list[Path], folder: Path, threads: int | None,
                     batch_bytes: int, workers: int, derive: Derivation | None = None
                     ) -> tuple[int, int, int]:
    """Contiguous shares in worker processes, then their tables appended in order."""
    import multiprocessing

    size = -(-len(dirs) // workers)
    parts = [folder / f".part-{i}" for i in range(workers)]
    for part in parts:
        part.mkdir()
    shares = [(root, dirs[i * size:(i + 1) * size], parts[i], 1, batch_bytes, derive)
              for i in range(workers)]
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        counts = pool.map(_ingest_share, shares)
    schemas = _schemas(derive)
    writers = _Writers(folder, schemas)
    try:
        for part in parts:
            for name in schemas:
                for batch in pq.ParquetFile(part / f"{name}.parquet").iter_batches(
                        batch_size=64 * 1024):
                    writers.write(name, pa.Table.from_batches([batch]))
    finally:
        writers.close()
        for part in parts:
            shutil.rmtree(part, ignore_errors=True)
    return tuple(sum(c[i] for c in counts) for i in range(3))  # type: ignore[return-value]


_EVENTS_SQL = _events_sql()
