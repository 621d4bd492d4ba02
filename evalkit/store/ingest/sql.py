"""The SQL path: DuckDB reads the lines the fast path leaves (other spellings,
duplicate keys, NaN…) and flags those whose columns only Python may decide.

DuckDB is imported only when a line first needs it (``LazyConnection``): the
run store writes no such lines.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from evalkit.contract import FIELDS
from evalkit.store import dataset as ds

if TYPE_CHECKING:  # imported by ``connect``: most ingests never need DuckDB (see LazyConnection)
    import duckdb


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
USAGE = ("prompt_tokens", "completion_tokens", "total_tokens", "calls", "cost")
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
    exprs.update({name: f"j_num(ux[{i}])" for i, name in enumerate(USAGE, start=1)})
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
    usage_paths = "[" + ", ".join(f"'$.{p}'" for p in USAGE) + "]"
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
def sql_for(kind: str) -> str:
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


def connect(threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the JSON macros the ingest SQL uses."""
    import duckdb

    con = duckdb.connect(config={"threads": threads} if threads else {})
    con.execute("SET enable_progress_bar = false")
    con.execute(_MACROS)
    return con


class LazyConnection:
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
