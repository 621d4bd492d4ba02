"""One batch of run directories -> its tables, ready to append.

Each file is read as ``score --runs`` reads a stream (``reader.file_bytes``,
``reader.parse_bytes``), so the dataset counts blank, torn and non-object
lines as the scorer does and keeps the records it reads; every column is the
value ``evalkit.store.dataset``'s reference function gives for the record. A
batch is converted wherever ``evalkit.parallel`` runs it, this process or a
worker; what comes back is plain Arrow tables.

What a line alone cannot say is added here, from the files beside it, and only
where they say it (a time is never guessed): which copy a stream is (``source``),
the times of a captured stream's records (from the run store's copy of the same
run), when a tool call began (its ``tool_call`` record), and the agent process's
wall time (the harness's ``command.json``).
"""

from __future__ import annotations

import json
import os
from collections import deque
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson
import pyarrow as pa

from evalkit.errors import EvalkitError
from evalkit.store import dataset as ds
from evalkit.store.layout import (
    CAPTURE_FILE,
    EVENTS_FILE,
    JUDGE_DIR,
    JUDGE_FILE,
    META_FILE,
    MODEL_FILE,
    TOOLS_FILE,
    as_text,
    is_run_id,
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
    """The rows of one table across a batch: the key columns ingest gives (where each row
    was read), then the columns the reference functions give."""

    def __init__(self, schema: pa.Schema, keys: tuple[str, ...]) -> None:
        self.schema = schema
        self.keys = keys
        self.names = [name for name in schema.names if name not in keys]
        self.values = itemgetter(*self.names)
        self.given: dict[str, list[Any]] = {name: [] for name in keys}
        self.rows: list[tuple[Any, ...]] = []

    def add(self, given: dict[str, Any], lines: list[int], rows: list[dict[str, Any]]) -> None:
        """``rows`` read from one file, ``lines`` their file lines, ``given`` the other keys."""
        for name, values in self.given.items():
            values.extend(lines if name == "line" else [given[name]] * len(rows))
        self.rows.extend(map(self.values, rows))

    def table(self) -> pa.Table:
        columns = list(zip(*self.rows, strict=True)) if self.rows else [()] * len(self.names)
        data = {**dict(zip(self.names, columns, strict=True)), **self.given}
        arrays = [pa.array(data[field.name], field.type) for field in self.schema]
        return pa.Table.from_arrays(arrays, schema=self.schema)


_EVENT_KEYS = ("run", "events_path", "line", "source")
_CALL_KEYS = ("run", "path", "line")


def _json_object(data: bytes | None) -> dict[str, Any] | None:
    """A small JSON file's object (meta.json, command.json); None when it is not one."""
    if data is None:
        return None
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _run_row(run: str, events_path: str, source: str, read: StreamRead,
             rows: list[dict[str, Any]], meta: dict[str, Any] | None,
             capture: dict[str, Any] | None) -> dict[str, Any]:
    """One run's row: its line counts; run_id, objective and start from its last
    mission_started record (else run_id and objective from meta.json); whether it has a
    mission_finished record, and the outcome, end and wall time of the last (two starts:
    two missions appended to one file, and the later one is the run, as the summaries
    read it); the process's wall time from the harness's command.json."""
    started: tuple[Any, Any, Any] = (None, None, None)
    finished, outcome, end, wall = False, None, None, None
    for row in rows:
        event = row["event"]
        if event == "mission_started":
            started = (row["run_id"], row["objective"], row["ts"])
        elif event == "mission_finished":
            finished, outcome, end, wall = True, row["outcome"], row["ts"], row["elapsed_s"]
    run_id, objective, start = started
    inner = meta.get("meta") if meta is not None else None
    if run_id is None and meta is not None:
        run_id = ds.text(meta.get("run_id"))
    if objective is None and isinstance(inner, dict):
        objective = ds.text(inner.get("objective"))
    return {"run": run, "events_path": events_path, "source": source,
            "records": len(read.records), "blank": read.blank, "torn": read.torn,
            "non_object": read.non_object, "run_id": run_id, "objective": objective,
            "finished": finished, "outcome": outcome, "ts": start, "end_ts": end,
            "wall_s": wall,
            "process_s": ds.real(capture.get("wall_s")) if capture is not None else None,
            "meta": ds.dumps(meta) if meta is not None else None}


def _in_run(run: str, name: str) -> str:
    """File ``name`` of the run directory ``run`` (relative to root), relative to root."""
    return name if run == "." else f"{run}/{name}"


#: How far ahead in the store's copy the next record of a capture is looked for.
_AHEAD = 64


class _Copies:
    """The run store's copies of captured streams, read to date the capture's records.

    A capture is bare records; the store's copy of the same run (``command.json``'s
    ``runs`` folder, the capture's run id) wraps each in an envelope with its time.
    A copy read here is kept until the walk reaches it in this batch, so it is parsed
    once (the walk lists a mission folder before the runs inside it).
    """

    def __init__(self) -> None:
        self.read: dict[str, tuple[bytes, StreamRead]] = {}

    def take(self, stream: str) -> tuple[bytes, StreamRead] | None:
        return self.read.pop(os.path.normpath(stream), None)

    def stamp(self, base: str, capture: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        """Give each capture row the time of the same record in the store's copy: records
        matched text for text, in order, so a record the copy lacks gets none."""
        copy = self._copy(base, capture, rows)
        if copy is None:
            return
        envelopes = copy.envelopes
        texts = [ds.dumps(record) for record in copy.records]
        at = 0
        for row in rows:
            for i in range(at, min(at + _AHEAD, len(texts))):
                if texts[i] == row["record"]:
                    row["ts"] = ds.when((envelopes.get(i) or {}).get("at"))
                    at = i + 1
                    break

    def _copy(self, base: str, capture: dict[str, Any], rows: list[dict[str, Any]]
              ) -> StreamRead | None:
        folder = capture.get("runs")
        run_id = next((row["run_id"] for row in reversed(rows)
                       if row["event"] == "mission_started"), None)
        if not isinstance(folder, str) or not isinstance(run_id, str) or not is_run_id(run_id):
            return None
        if os.path.isabs(folder) or ".." in folder.replace("\\", "/").split("/"):
            return None
        stream = os.path.normpath(os.path.join(base, folder, run_id, EVENTS_FILE))
        data = file_bytes(stream)
        if data is None:
            return None
        read = parse_bytes(Path(stream), data)
        self.read[stream] = (data, read)
        return read


def convert(root: Path, dirs: list[str], derive: Derivation | None = None,
            checker: Checker | None = None) -> Converted:
    """Read and convert the run directories ``dirs`` (paths as ``folders.walk`` gives them);
    ``checker`` checks each stream against its seal from the bytes read to convert it."""
    top = os.fspath(root)
    events = _Table(ds.EVENTS_SCHEMA, _EVENT_KEYS)
    calls = _Calls()
    runs: list[dict[str, Any]] = []
    folded: list[Any] = []
    seals: list[tuple[str, str, str | None]] = []
    event_columns = ds.event_columns
    copies = _Copies()
    nbytes = 0
    for base in dirs:
        # As text that Parquet takes; the files are read by their own names (``base``).
        run = as_text(base[len(top):].lstrip(os.sep).replace(os.sep, "/") or ".")
        bare = not os.path.isdir(base)  # an events file directly in the root (``walk``)
        stream = base if bare else os.path.join(base, EVENTS_FILE)
        kept = copies.take(stream)
        data = kept[0] if kept is not None else file_bytes(stream)
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
        read = kept[1] if kept is not None else parse_bytes(Path(stream), data)
        envelopes = read.envelopes
        rows = [event_columns(record, envelopes.get(i))
                for i, record in enumerate(read.records)]
        meta = capture = meta_bytes = None
        if not bare:
            meta_bytes = file_bytes(os.path.join(base, META_FILE))
            meta = _json_object(meta_bytes)
            capture = _json_object(file_bytes(os.path.join(base, CAPTURE_FILE)))
        source = "store" if meta_bytes is not None else "capture"
        if source == "capture" and capture is not None:
            copies.stamp(base, capture, rows)
        events.add({"run": run, "events_path": events_path, "source": source}, read.lines, rows)
        if derive is not None:
            folded.append(derive.fold(events_path, read.records, read.lines, read.skipped)
                          if judgments is None else
                          derive.fold(events_path, read.records, read.lines, read.skipped,
                                      judgments=judgments))
        if not bare:
            nbytes += calls.add(run, base, read.records, rows)
        runs.append(_run_row(run, events_path, source, read, rows, meta, capture))
    events_table = events.table()
    runs_table = pa.Table.from_pylist(runs, schema=ds.RUNS_SCHEMA)
    tables = [("runs", runs_table), ("events", events_table)]
    if derive is not None:
        tables += derive(events_table, runs_table, folded)
    tables += calls.tables()
    return Converted(len(runs), len(events_table), nbytes, tables, seals)


class _Calls:
    """The model and tool recordings of a batch's run directories, and their catalogues."""

    def __init__(self) -> None:
        self.model = _Table(ds.MODEL_SCHEMA, _CALL_KEYS)
        self.tools = _Table(ds.TOOL_SCHEMA, _CALL_KEYS)
        self.catalogue = _Table(ds.CATALOGUE_SCHEMA, _CALL_KEYS)

    def tables(self) -> list[tuple[str, pa.Table]]:
        return [("model_calls", self.model.table()), ("tool_calls", self.tools.table()),
                ("tool_catalogue", self.catalogue.table())]

    def add(self, run: str, base: str, records: list[dict[str, Any]],
            rows: list[dict[str, Any]]) -> int:
        """Add a run directory's recordings (``records``/``rows``: its events, read and as
        rows); the bytes they hold.

        Such a line is one call as its object says, envelope-shaped or not: the reader's
        records, with what it unwrapped put back."""
        nbytes = 0
        found = _lines(base, MODEL_FILE)
        if found is not None:
            nbytes += found[0]
            lines, objects = found[1]
            self.model.add({"run": run, "path": _in_run(run, MODEL_FILE)}, lines,
                           [ds.model_columns(o) for o in objects])
        found = _lines(base, TOOLS_FILE)
        if found is not None:
            nbytes += found[0]
            given = {"run": run, "path": _in_run(run, TOOLS_FILE)}
            call_lines, call_rows, dispatched, listed_lines, listed = [], [], [], [], []
            for line, o in zip(*found[1], strict=True):
                if ds.is_catalogue(o):
                    entries = ds.catalogue_rows(o)
                    listed_lines += [line] * len(entries)
                    listed += entries
                else:
                    call_lines.append(line)
                    call_rows.append(ds.tool_columns(o))
                    dispatched.append(o)
            _start_from_events(call_rows, dispatched, records, rows)
            self.tools.add(given, call_lines, call_rows)
            self.catalogue.add(given, listed_lines, listed)
        return nbytes


def _lines(base: str, name: str) -> tuple[int, tuple[list[int], list[dict[str, Any]]]] | None:
    """A run's model or tool recording: its size, and its lines' numbers and objects."""
    data = file_bytes(os.path.join(base, name))
    if data is None:
        return None
    read = parse_bytes(Path(base, name), data)
    envelopes = read.envelopes
    return len(data), (read.lines, [envelopes.get(i, record)
                                     for i, record in enumerate(read.records)])


def _start_from_events(calls: list[dict[str, Any]], lines: list[dict[str, Any]],
                       records: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    """A tool call's start, where its line (``lines``, parallel to ``calls``) has none: the
    time of its ``tool_call`` record (written just before the dispatch), matched by tool
    and arguments (whatever their keys' order: tools.jsonl sorts them) in order."""
    waiting: dict[tuple[Any, str], deque[Any]] = {}
    for record, row in zip(records, rows, strict=True):
        if row["event"] == "tool_call" and row["tool"] is not None:
            key = (row["tool"], _sorted_json(record.get("arguments")))
            waiting.setdefault(key, deque()).append(row["ts"])
    for call, line in zip(calls, lines, strict=True):
        queue = waiting.get((call["tool"], _sorted_json(line.get("arguments"))))
        if queue and call["start_ts"] is None:
            call["start_ts"] = queue.popleft()
            call["duration_ms"] = ds.millis(call["start_ts"], call["ts"])
        elif queue:
            queue.popleft()


def _sorted_json(value: Any) -> str:
    """``value`` as JSON text with sorted keys: the same arguments give the same text."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except orjson.JSONEncodeError:  # an integer past 64 bits, or nested past orjson's depth
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
