"""Every column of the dataset's run tables: its name, type and meaning, declared once.

``evalkit.store.dataset`` builds the Parquet schemas from these declarations and
computes the values; docs/TABLES.md is rendered from them
(``evalkit.tables_doc``), and ``evalkit sql`` reads the columns marked ``json``
as DuckDB ``JSON`` (Parquet keeps them as text: pandas and polars then read a
string, which every JSON library takes). Nothing else names a column's type.

Why these types (tables schema 2): a time is ``TIMESTAMP WITH TIME ZONE`` in UTC,
so DuckDB, pandas and polars compare and subtract it without parsing; a count is
a 64-bit integer and a measured quantity a double; a record whose shape is fixed
is a list or struct, and only free-form payloads stay JSON text.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

#: Bump when a column is renamed, removed or changes type (the manifest's ``schema``).
SCHEMA = 2

STR, INT, FLOAT, BOOL = pa.string(), pa.int64(), pa.float64(), pa.bool_()
LINE = pa.int32()
TS = pa.timestamp("us", tz="UTC")
TEXTS = pa.list_(pa.string())
#: An MCP tool's annotations (the hints its server set), as the catalogue line holds them.
HINTS = pa.struct([("readOnlyHint", BOOL), ("destructiveHint", BOOL), ("idempotentHint", BOOL),
                   ("openWorldHint", BOOL)])


@dataclass(frozen=True)
class Column:
    """One column: ``json`` marks text holding a JSON value (DuckDB ``JSON`` in `evalkit sql`)."""

    name: str
    type: pa.DataType
    meaning: str
    json: bool = False


def schema(columns: tuple[Column, ...]) -> pa.Schema:
    """The Parquet schema of a table declared as ``columns``."""
    return pa.schema([(c.name, c.type) for c in columns])


_RUN = Column("run", STR, "the run directory, relative to the ingested folder (`.` for the "
              "folder itself; an events file directly in it: its name)")
_LINE = Column("line", LINE, "the 1-based line of the file the row was read from")
_SOURCE = Column("source", STR, "`store`: the run store's own copy (its folder holds meta.json); "
                 "`capture`: any other stream, such as the one `evalkit run` captured from the "
                 "agent. A run recorded by `evalkit run` is in the tables once as each")
_RECORD = Column("record", STR, "the whole record as compact JSON (orjson's text of what the "
                 "reader read), so nothing is lost", json=True)

#: The typed columns of ``events`` read from the record, in order.
EVENT_FIELDS: tuple[Column, ...] = (
    Column("event", STR, "the record's `event`"),
    Column("branch", STR, "the swarm lane the record belongs to (null: the main line)"),
    Column("index", INT, "the step index"),
    Column("tool", STR, "the tool named (`tool_call`, `tool_result`, `gate_requested`, ...)"),
    Column("call", INT, "the record's `call` ordinal"),
    Column("ok", BOOL, "`tool_result.ok`"),
    Column("has_plan", BOOL, "whether the record carries a `plan` (a staged step)"),
    Column("injected_truthy", BOOL, "whether the record's `injected` is set and not empty"),
    Column("repairing", BOOL, "`grounding.repairing`"),
    Column("ran", BOOL, "`grounding.ran`"),
    Column("grounded", BOOL, "`grounding.grounded`"),
    Column("verified", BOOL, "`grounding.verified`"),
    Column("repairs", INT, "`grounding.repairs`"),
    Column("outcome", STR, "the outcome (`answer`, `mission_finished`)"),
    Column("reason", STR, "the record's `reason`"),
    Column("steps", INT, "`mission_finished.steps`"),
    Column("max_steps", INT, "the step bound"),
    Column("elapsed_s", FLOAT, "`mission_finished.elapsed_s`: seconds the runtime measured"),
    Column("budget_which", STR, "which budget ran out (`budget.which`)"),
    Column("prompt_tokens", INT, "`usage.prompt_tokens`"),
    Column("completion_tokens", INT, "`usage.completion_tokens`"),
    Column("total_tokens", INT, "`usage.total_tokens`"),
    Column("calls", INT, "`usage.calls`: model calls counted"),
    Column("cost", FLOAT, "`usage.cost`"),
    Column("text", STR, "the record's `text` (the answer, a delta)"),
    Column("run_id", STR, "the runtime's run id (`mission_started`)"),
    Column("protocol", STR, "`mission_started.protocol`"),
    Column("profile", STR, "`mission_started.profile`"),
    Column("sandbox", STR, "`mission_started.sandbox`"),
    Column("objective", STR, "`mission_started.objective`"),
)

EVENTS: tuple[Column, ...] = (
    _RUN, Column("events_path", STR, "the events file, relative to the ingested folder"), _LINE,
    _SOURCE,
    Column("seq", INT, "the envelope's `seq` (null for a bare record)"),
    Column("ts", TS, "when the record was written: its envelope's `at`; for a capture's "
           "record, the `at` of the same record in the run store's copy beside it (found by "
           "the capture's run id, matched record for record); null where neither says"),
    *EVENT_FIELDS,
    Column("problems", TEXTS, "why the record does not conform to the stream contract (empty: "
           "it does)"),
    _RECORD,
)

RUNS: tuple[Column, ...] = (
    _RUN, Column("events_path", STR, "the run's events file, relative to the ingested folder"),
    _SOURCE,
    Column("records", INT, "records the reader read"),
    Column("blank", INT, "blank lines skipped"), Column("torn", INT, "lines that were not JSON"),
    Column("non_object", INT, "JSON lines that were not objects"),
    Column("run_id", STR, "the run id of the last `mission_started` (else meta.json's)"),
    Column("objective", STR, "the objective of the last `mission_started` (else meta.json's)"),
    Column("finished", BOOL, "whether a `mission_finished` was recorded"),
    Column("outcome", STR, "the outcome of the last `mission_finished`"),
    Column("ts", TS, "when the run started: the `ts` of its last `mission_started`"),
    Column("end_ts", TS, "when it finished: the `ts` of its last `mission_finished`"),
    Column("wall_s", FLOAT, "the wall time the runtime measured (`mission_finished.elapsed_s`)"),
    Column("process_s", FLOAT, "the agent process's wall time, as the harness measured it "
           "spawning it (`command.json`'s `wall_s` beside a captured stream); null elsewhere"),
    Column("meta", STR, "meta.json as compact JSON (null when there is none, or it is not JSON)",
           json=True),
)

_CALL_KEYS = (_RUN, Column("path", STR, "the recording file, relative to the ingested folder"),
              _LINE, Column("call", INT, "the call's 1-based ordinal in its recording"))
_CALL_TIMES = (
    Column("ts", TS, "when the call was recorded, right after it returned: its end"),
    Column("start_ts", TS, "when the call began, where recorded: the line's `started`; for a "
           "tool call without one, the `ts` of its `tool_call` record in the same run "
           "directory's events (matched by tool and arguments, in order); else null"),
    Column("duration_ms", FLOAT, "`ts - start_ts` in milliseconds (null when either is)"),
)

MODEL_CALLS: tuple[Column, ...] = (
    *_CALL_KEYS, *_CALL_TIMES,
    Column("kind", STR, "`mission` (a turn of the loop) or `plain` (a side call)"),
    Column("content", STR, "the reply's text"),
    Column("error", STR, "why the call failed (the reply's `error`), null when it did not"),
    Column("prompt_tokens", INT, "the reply's `usage.prompt_tokens`"),
    Column("completion_tokens", INT, "the reply's `usage.completion_tokens`"),
    Column("total_tokens", INT, "the reply's `usage.total_tokens`"),
    Column("tool_calls", STR, "the tool calls the reply asked for", json=True),
    Column("request", STR, "what was sent: `messages` and `extra`", json=True),
    _RECORD,
)

TOOL_CALLS: tuple[Column, ...] = (
    *_CALL_KEYS, *_CALL_TIMES,
    Column("tool", STR, "the tool dispatched"),
    Column("arguments", STR, "the arguments it was given", json=True),
    Column("exit_code", INT, "the result's exit code (null: nothing ran)"),
    Column("stdout", STR, "the result's stdout"),
    Column("stderr", STR, "the result's stderr"),
    Column("structured", STR, "the result's structured value", json=True),
    _RECORD,
)

TOOL_CATALOGUE: tuple[Column, ...] = (
    _RUN, Column("path", STR, "the tools recording, relative to the ingested folder"), _LINE,
    Column("ts", TS, "when the catalogue was recorded"),
    Column("position", LINE, "the tool's 0-based place in the catalogue"),
    Column("name", STR, "the tool's name"),
    Column("description", STR, "its description"),
    Column("plane", STR, "`builtin` or the MCP namespace"),
    Column("code", BOOL, "whether it runs code on the host (a shell, an interpreter)"),
    Column("scopes", TEXTS, "the scopes a call needs"),
    Column("annotations", HINTS, "the MCP hints its server set"),
    Column("parameters", STR, "its arguments' JSON schema", json=True),
    Column("descriptor", STR, "the whole descriptor", json=True),
)

#: The run tables, by name, in the order they are listed.
TABLES: dict[str, tuple[Column, ...]] = {
    "runs": RUNS, "events": EVENTS, "model_calls": MODEL_CALLS, "tool_calls": TOOL_CALLS,
    "tool_catalogue": TOOL_CATALOGUE,
}


def duckdb_type(type: pa.DataType, json: bool = False) -> str:
    """The type DuckDB gives a column of Arrow type ``type`` (``json``: as `evalkit sql`
    reads it), as ``DESCRIBE`` spells it: the doc and the type tests read this."""
    if json:
        return "JSON"
    if pa.types.is_timestamp(type):
        return "TIMESTAMP WITH TIME ZONE" if type.tz else "TIMESTAMP"
    if pa.types.is_list(type):
        return f"{duckdb_type(type.value_type)}[]"
    if pa.types.is_struct(type):
        inner = ", ".join(f"{f.name} {duckdb_type(f.type)}" for f in type)
        return f"STRUCT({inner})"
    return _DUCKDB[type]


_DUCKDB: dict[pa.DataType, str] = {STR: "VARCHAR", INT: "BIGINT", LINE: "INTEGER", FLOAT: "DOUBLE",
                                   BOOL: "BOOLEAN"}
