"""One batch of run directories -> its tables, ready to append.

Each file is read as ``score --runs`` reads a stream (``reader.file_bytes``,
``reader.parse_bytes``), so the dataset counts blank, torn and non-object
lines as the scorer does and keeps the records it reads; every column is the
value ``evalkit.store.dataset``'s reference function gives for the record. A
batch is converted wherever ``evalkit.parallel`` runs it, this process or a
worker; what comes back is plain Arrow tables.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson
import pyarrow as pa

from evalkit.errors import EvalkitError
from evalkit.store import dataset as ds
from evalkit.store.layout import (
    EVENTS_FILE,
    JUDGE_DIR,
    JUDGE_FILE,
    META_FILE,
    MODEL_FILE,
    TOOLS_FILE,
    as_text,
)
from evalkit.store.reader import StreamRead, file_bytes, parse_bytes

if TYPE_CHECKING:
    from evalkit.store.seal import Checker


class Derivation(Protocol):
    """Extra tables computed from each batch: its ``events`` and ``runs`` tables, and
    ``folded``, what ``fold`` made of each events file (parallel to ``runs``).

    ``fold`` is handed each events file's records as the reader read them (their
    file lines, and how many lines were skipped) while ingest has them parsed: the
    one parse of the batch serves both, and nothing is read twice. ``schemas``
    names the tables and their shapes; ``manifest`` is merged into the dataset's
    manifest (say what version of the derivation wrote them). Large ingests run it
    in forked worker processes, so whatever it keeps on itself stays there: what it
    makes must come back as its tables.
    """

    schemas: dict[str, pa.Schema]
    manifest: dict[str, Any]

    def fold(self, events_path: str, records: list[dict[str, Any]], lines: list[int],
             skipped: int, *, judgments: bytes | None = None) -> Any:
        """One stream's fold; ``judgments`` (the bytes of a model judge's judgments beside
        it) is passed only for a run that has some."""

    def __call__(self, events: pa.Table, runs: pa.Table, folded: list[Any]
                 ) -> list[tuple[str, pa.Table]]: ...


@dataclass
class Converted:
    """One batch, converted: its counts and the tables to append, by name (or the Arrow
    file a worker process left each in)."""

    runs: int
    events: int
    nbytes: int
    tables: list[tuple[str, pa.Table | str]]
    #: Each stream checked against its seal: (events path, the check's word, why it
    #: counts as altered, or None).
    seals: list[tuple[str, str, str | None]]


class _Table:
    """The rows of one table across a batch: key columns, then the reference's columns."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.names = schema.names[3:]  # after run, path and line: what the reference gives
        self.values = itemgetter(*self.names)
        self.run: list[str] = []
        self.path: list[str] = []
        self.line: list[int] = []
        self.rows: list[tuple[Any, ...]] = []

    def add(self, run: str, path: str, read: StreamRead, rows: list[dict[str, Any]]) -> None:
        self.run.extend([run] * len(rows))
        self.path.extend([path] * len(rows))
        self.line.extend(read.lines)
        self.rows.extend(map(self.values, rows))

    def table(self) -> pa.Table:
        columns = list(zip(*self.rows, strict=True)) if self.rows else [()] * len(self.names)
        arrays = [pa.array(self.run, pa.string()), pa.array(self.path, pa.string()),
                  pa.array(self.line, pa.int32())]
        arrays += [pa.array(values, self.schema.field(name).type)
                   for name, values in zip(self.names, columns, strict=True)]
        return pa.Table.from_arrays(arrays, schema=self.schema)


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


def _run_row(run: str, events_path: str, read: StreamRead, rows: list[dict[str, Any]],
             meta: str | None) -> dict[str, Any]:
    """One run's row: its line counts; run_id and objective from its last mission_started
    record (else from meta.json); whether it has a mission_finished record and the
    outcome of the last (two starts: two missions appended to one file, and the later
    one is the run, as the summaries read it)."""
    started: tuple[str | None, str | None] | None = None
    finished, outcome = False, None
    for row in rows:
        event = row["event"]
        if event == "mission_started":
            started = (row["run_id"], row["objective"])
        elif event == "mission_finished":
            finished, outcome = True, row["outcome"]
    run_id, objective = started or (None, None)
    meta_id, meta_objective = _meta_fields(meta)
    return {"run": run, "events_path": events_path, "records": len(read.records),
            "blank": read.blank, "torn": read.torn, "non_object": read.non_object,
            "run_id": run_id if run_id is not None else meta_id,
            "objective": objective if objective is not None else meta_objective,
            "finished": finished, "outcome": outcome, "meta": meta}


def _in_run(run: str, name: str) -> str:
    """File ``name`` of the run directory ``run`` (relative to root), relative to root."""
    return name if run == "." else f"{run}/{name}"


_Columns = Callable[[dict[str, Any]], dict[str, Any]]


def convert(root: Path, dirs: list[str], derive: Derivation | None = None,
            checker: Checker | None = None) -> Converted:
    """Read and convert the run directories ``dirs`` (paths as ``folders.walk`` gives them);
    ``checker`` checks each stream against its seal from the bytes read to convert it."""
    top = os.fspath(root)
    events = _Table(ds.EVENTS_SCHEMA)
    calls = {MODEL_FILE: (_Table(ds.MODEL_SCHEMA), ds.model_columns),
             TOOLS_FILE: (_Table(ds.TOOL_SCHEMA), ds.tool_columns)}
    runs: list[dict[str, Any]] = []
    folded: list[Any] = []
    seals: list[tuple[str, str, str | None]] = []
    event_columns = ds.event_columns
    nbytes = 0
    for base in dirs:
        # As text that Parquet takes; the files are read by their own names (``base``).
        run = as_text(base[len(top):].lstrip(os.sep).replace(os.sep, "/") or ".")
        bare = not os.path.isdir(base)  # an events file directly in the root (``walk``)
        stream = base if bare else os.path.join(base, EVENTS_FILE)
        data = file_bytes(stream)
        if data is None:
            raise EvalkitError(f"cannot read {stream}: it vanished during ingest")
        nbytes += len(data)
        events_path = run if bare else _in_run(run, EVENTS_FILE)
        # A model judge's judgments beside the stream (``evalkit judge``): sealed apart, and
        # read by the fold with the stream, so a dataset scores a judged mission as --runs does.
        judged = os.path.join(os.path.dirname(stream), JUDGE_DIR, JUDGE_FILE)
        judgments = file_bytes(judged)
        if checker is not None:
            check = checker.stream(stream, data)
            if not check.tampered and judgments is not None:
                judge_check = checker.stream(judged, judgments)
                check = judge_check if judge_check.tampered else check
            seals.append((events_path, check.word, check.reason() if check.tampered else None))
        read = parse_bytes(Path(stream), data)
        envelopes = read.envelopes
        rows = [event_columns(record, envelopes.get(i))
                for i, record in enumerate(read.records)]
        events.add(run, events_path, read, rows)
        if derive is not None:
            folded.append(derive.fold(events_path, read.records, read.lines, read.skipped)
                          if judgments is None else
                          derive.fold(events_path, read.records, read.lines, read.skipped,
                                      judgments=judgments))
        meta = None
        if not bare:
            for name, (table, columns) in calls.items():
                nbytes += _calls(table, columns, run, base, name)
            found = file_bytes(os.path.join(base, META_FILE))
            meta = found.decode("utf-8", "replace") if found is not None else None
        runs.append(_run_row(run, events_path, read, rows, meta))
    events_table = events.table()
    runs_table = pa.Table.from_pylist(runs, schema=ds.RUNS_SCHEMA)
    tables = [("runs", runs_table), ("events", events_table)]
    if derive is not None:
        tables += derive(events_table, runs_table, folded)
    tables += [(name, table.table()) for name, (table, _) in
               (("model_calls", calls[MODEL_FILE]), ("tool_calls", calls[TOOLS_FILE]))]
    return Converted(len(runs), len(events_table), nbytes, tables, seals)


def _calls(table: _Table, columns: _Columns, run: str, base: str, name: str) -> int:
    """Add the lines of a run's model or tool recording; its size in bytes (0: none).

    Such a line is one call as its object says, envelope-shaped or not: the reader's
    records, with what it unwrapped put back."""
    data = file_bytes(os.path.join(base, name))
    if data is None:
        return 0
    read = parse_bytes(Path(base, name), data)
    envelopes = read.envelopes
    table.add(run, _in_run(run, name), read,
              [columns(envelopes.get(i, record)) for i, record in enumerate(read.records)])
    return len(data)
