"""One batch of run directories, converted: its tables, ready to append.

Run in this process or in a worker (``convert_there`` leaves the tables as
Arrow files for this process to map).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import orjson
import pyarrow as pa

from evalkit.store import dataset as ds
from evalkit.store.ingest.folders import Batch, load_batch
from evalkit.store.ingest.lines import events_table, lines_table
from evalkit.store.ingest.sql import LazyConnection
from evalkit.store.layout import MODEL_FILE, TOOLS_FILE

if TYPE_CHECKING:
    import duckdb


class Derivation(Protocol):
    """Extra tables computed from each batch: its ``events`` and ``runs`` tables, and
    ``folded``, what ``fold`` made of each events file (parallel to ``runs``).

    ``fold`` is handed each events file's records as ``reader.parse_text`` reads them
    (their file lines, and how many lines were skipped) while ingest has them parsed:
    the one parse of the batch serves both, and nothing is read twice.
    ``con`` is the batch's DuckDB connection, opened when first used.
    ``schemas`` names the tables and their shapes; ``manifest`` is merged into
    the dataset's manifest (say what version of the derivation wrote them).
    It must be picklable: large ingests run it in worker processes, which import
    its class by name (one defined in the caller's main script they cannot find:
    ingest then converts everything in the caller's process).
    """

    schemas: dict[str, pa.Schema]
    manifest: dict[str, Any]

    def fold(self, events_path: str, records: list[dict[str, Any]], lines: list[int],
             skipped: int) -> Any: ...

    def __call__(self, con: duckdb.DuckDBPyConnection, events: pa.Table, runs: pa.Table,
                 folded: list[Any]) -> list[tuple[str, pa.Table]]: ...


def _with_keys(table: pa.Table, schema: pa.Schema, keys: dict[str, list[str]]) -> pa.Table:
    """Prefix the per-file key columns (run, paths) and drop ``fid``."""
    fid = table.column("fid")
    columns = {name: pa.array(values, pa.string()).take(fid) for name, values in keys.items()}
    for name in schema.names:
        if name not in columns:
            columns[name] = table.column(name)
    return pa.table([columns[n] for n in schema.names], schema=schema)


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


def _runs_table(events: pa.Table, batch: Batch, rels: list[str],
                counts: dict[str, np.ndarray]) -> pa.Table:
    """One row per run: its line counts; run_id and objective from its last
    mission_started record (else from meta.json); whether it has a mission_finished
    record and the outcome of the last (two starts: two missions appended to one
    file, and the later one is the run, as the summaries read it). ``events`` rows
    are in (fid, line) order."""
    started: dict[int, tuple[str | None, str | None]] = {}
    outcome: dict[int, str | None] = {}
    kinds = events.column("event").to_pylist()
    at = [i for i, kind in enumerate(kinds) if kind in ("mission_started", "mission_finished")]
    if at:
        wanted = events.select(["fid", "event", "run_id", "objective", "outcome"]).take(at)
        for fid, event, run_id, objective, out in zip(*wanted.to_pydict().values(),
                                                      strict=True):
            if event == "mission_started":
                started[fid] = (run_id, objective)
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


def _ingest_batch(con: duckdb.DuckDBPyConnection, batch: Batch,
                  derive: Derivation | None = None) -> tuple[int, list[tuple[str, pa.Table]]]:
    """Convert one batch: (its number of events, the tables to append)."""
    out: list[tuple[str, pa.Table]] = []
    rels = batch.events_paths
    folded: list[Any] = [None] * len(rels)
    fold = None
    if derive is not None:
        fold_one = derive.fold

        def fold(fid: int, records: list[dict[str, Any]], lines: list[int], skipped: int
                 ) -> None:
            folded[fid] = fold_one(rels[fid], records, lines, skipped)

    events, counts = events_table(con, batch.events, fold)
    runs = _runs_table(events, batch, rels, counts)
    events = _with_keys(events, ds.EVENTS_SCHEMA, {"run": batch.runs, "events_path": rels})
    out.append(("runs", runs))
    out.append(("events", events))
    if derive is not None:
        out.extend(derive(con, events, runs, folded))
    for name, kind, contents, schema, file in (
        ("model_calls", "model", batch.models, ds.MODEL_SCHEMA, MODEL_FILE),
        ("tool_calls", "tools", batch.tools, ds.TOOL_SCHEMA, TOOLS_FILE),
    ):
        if any(c is not None for c in contents):
            table, _ = lines_table(con, contents, kind)
            out.append((name, _with_keys(table, schema, {"run": batch.runs,
                                                          "path": batch.rel(file)})))
    return len(events), out


@dataclass
class Converted:
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


def convert_here(con: duckdb.DuckDBPyConnection, root: Path, dirs: list[str],
                  derive: Derivation | None) -> Converted:
    batch = load_batch(root, dirs)
    events, tables = _ingest_batch(con, batch, derive)
    return Converted(len(batch.runs), events, batch.nbytes, tables=tables)


def convert_there(con: LazyConnection, root: Path, dirs: list[str], derive: Derivation | None,
                   stem: str) -> Converted:
    """A batch converted in a worker process, its tables left as Arrow files ``stem.N``:
    handing them over costs one copy each way, far less than pickling them through a pipe.
    (``con`` opens DuckDB on first use: a failure there comes back as this batch's error.)"""
    done = convert_here(con, root, dirs, derive)  # type: ignore[arg-type]
    files = []
    for i, (name, table) in enumerate(done.tables or ()):
        path = f"{stem}.{i}"
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        files.append((name, path))
    return Converted(done.runs, done.events, done.nbytes, files=files)
