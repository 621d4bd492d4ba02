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
to know nothing of scoring; and tables made once from other files of the tree
that the walk passes by name (a ``Gathering``: ``evalkit.report.verdict_table``
adds the verdicts of the score reports kept beside the runs). The dataset is
written to a temporary folder and renamed into place, so a reader never sees
half of one.

Where each part lives:

* ``folders``: finding run directories (a lazy walk) and reading their files;
* ``lines``: the fast path, and the rows the SQL path gives back;
* ``sql``: the SQL path and the DuckDB connection it runs on;
* ``batch``: one batch of run directories -> its tables (and a ``Derivation``'s);
* ``schedule``: handing batches to processes and writing them in order;
* ``workers``: the worker processes;
* ``writers``: the Parquet files, row group by row group.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from evalkit.errors import EvalkitError
from evalkit.gcpause import collector_paused
from evalkit.store import dataset as ds
from evalkit.store import leftovers
from evalkit.store.ingest.batch import Derivation
from evalkit.store.ingest.folders import Streams, discover, read_text, walk
from evalkit.store.ingest.lines import events_table
from evalkit.store.ingest.schedule import BATCH_BYTES, convert_runs
from evalkit.store.ingest.sql import connect
from evalkit.store.layout import EVENTS_FILE, as_text


class Gathering(Protocol):
    """Tables made once from files of the tree other than the runs' own.

    The walk keeps every file whose name is in ``names`` (in whatever folder it
    lists, the dataset's own aside); once the runs are converted, the gathering is
    called with the root and those paths, in path order, and returns its tables,
    each of the shape ``schemas`` gives, written beside the others. ``manifest``
    is merged into the dataset's manifest.
    """

    names: frozenset[str]
    schemas: dict[str, pa.Schema]
    manifest: dict[str, Any]

    def __call__(self, root: Path, files: list[str]) -> list[tuple[str, pa.Table]]: ...


@dataclass
class IngestResult:
    """What one ingest did: where the dataset is, how much went in, how long it took."""

    out: Path
    runs: int
    events: int
    bytes: int
    seconds: float
    #: Rows of each table a ``Gathering`` added.
    gathered: dict[str, int] = field(default_factory=dict)

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds else 0.0


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


def ingest(root: Path, out: Path | None = None, *, threads: int | None = None,
           batch_bytes: int = BATCH_BYTES, workers: int | None = None,
           derive: Derivation | None = None, gather: Gathering | None = None,
           verify: bool = True) -> IngestResult:
    """Turn every run directory under ``root`` (and events file directly in it) into a
    Parquet dataset folder at ``out``.

    Default ``out`` is ``root/dataset.parquet``. Re-ingesting the same runs
    gives the same dataset (no timestamps inside), written to a temporary
    folder and renamed into place. ``workers`` is how many processes convert
    batches, this one included (default: one per core, for every
    ``RUNS_PER_WORKER`` runs); however many there are, the tables come out as
    one process would write them. ``derive`` adds tables computed from each batch,
    ``gather`` tables made from other files of the tree. Each stream is checked
    against its seal as the walk finds it (``verify``); the manifest names those
    altered after they were closed, which scoring from the dataset then refuses.
    """
    started = time.perf_counter()
    root = Path(root)
    if not root.is_dir():
        raise EvalkitError(f"cannot ingest {root}: it is not a directory")
    out = Path(out) if out is not None else root / ds.DEFAULT_NAME
    where = os.fspath(out.absolute())
    if as_text(where) != where:
        raise EvalkitError(f"cannot write a dataset at {as_text(os.fspath(out))}: Parquet and "
                           "DuckDB take only paths that are UTF-8; choose another --out")
    earlier = _check_out(root, out)
    tmp = _sibling(out, "tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    except OSError as exc:
        raise EvalkitError(f"cannot write a dataset at {out}: {exc.strerror or exc}") from None
    try:
        streams = Streams(root)
        sealed = Sealed(root) if verify else None
        kept: list[str] = []
        runs = walk(root, skip=out, keep=gather.names if gather is not None else frozenset(),
                    kept=kept)
        runs = streams.note(runs) if sealed is None else sealed.note(streams.note(runs))
        with collector_paused():  # parsed lines form no cycles; its passes were a seventh of the CPU
            n_runs, n_events, n_bytes = convert_runs(root, runs, tmp,
                                                     threads, batch_bytes, workers, derive)
        if not n_runs and earlier:
            raise EvalkitError(f"found no run directory (one holding {EVENTS_FILE}) under {root}; "
                               f"the dataset at {out} ({earlier} runs) is left as it was")
        gathered = _gather(gather, root, sorted(kept), tmp)
        names = [*ds.TABLES, *(derive.schemas if derive is not None else ()),
                 *(gather.schemas if gather is not None else ())]
        without_stream, without_records = streams.unkept(skip=out)
        manifest = {"format": ds.FORMAT, "version": ds.VERSION, "runs": n_runs,
                    "events": n_events, "bytes": n_bytes,
                    "tables": {name: f"{name}.parquet" for name in names},
                    ds.WITHOUT_STREAM: without_stream,
                    ds.WITHOUT_RECORDS: without_records,
                    **(sealed.manifest() if sealed is not None else {}),
                    **(derive.manifest if derive is not None else {}),
                    **(gather.manifest if gather is not None else {})}
        (tmp / ds.MANIFEST).write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
        _replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return IngestResult(out=out, runs=n_runs, events=n_events, bytes=n_bytes,
                        seconds=time.perf_counter() - started, gathered=gathered)


class Sealed:
    """Each stream the walk finds, checked against its seal (``evalkit.store.seal``)."""

    def __init__(self, root: Path) -> None:
        from evalkit.store.seal import Checker

        self.root = os.fspath(root)
        self.checker = Checker.for_scoring([root])
        self.altered: dict[str, str] = {}
        self.counts: dict[str, int] = {}

    def note(self, runs: Iterator[str]) -> Iterator[str]:
        from evalkit.store.reader import file_bytes

        for run in runs:
            path = run if os.path.isfile(run) else os.path.join(run, EVENTS_FILE)
            try:
                data = file_bytes(Path(path))
            except EvalkitError:
                data = None
            if data is not None:
                check = self.checker.stream(Path(path), data)
                self.counts[check.word] = self.counts.get(check.word, 0) + 1
                if check.tampered:
                    rel = as_text(os.path.relpath(path, self.root).replace(os.sep, "/"))
                    self.altered[rel] = check.reason()
            yield run

    def manifest(self) -> dict[str, Any]:
        return {ds.ALTERED: dict(sorted(self.altered.items())), ds.SEALS: self.counts}


def _gather(gather: Gathering | None, root: Path, files: list[str], folder: Path
            ) -> dict[str, int]:
    """Write a gathering's tables into ``folder``; their rows by name."""
    if gather is None:
        return {}
    made = dict(gather(root, files))
    rows = {}
    for name, schema in gather.schemas.items():
        table = made.get(name, schema.empty_table())
        if not table.schema.equals(schema):
            raise TypeError(f"the gathered table {name} is not of its declared shape")
        pq.write_table(table, folder / f"{name}.parquet", compression="zstd",
                       compression_level=1)
        rows[name] = len(table)
    return rows


def _check_out(root: Path, out: Path) -> int:
    """Ingest replaces an earlier dataset (or fills an empty folder), never anything else;
    returns how many runs the earlier dataset holds (0: none there).

    An earlier dataset is a folder holding an evalkit manifest and nothing but the files
    it names: replacing the folder takes everything in it, so a folder where someone
    keeps anything else is refused. Nor is the root replaced, or a folder holding it:
    ingesting a dataset into itself would find no run and replace it with nothing.
    """
    def refused(why: str) -> EvalkitError:
        return EvalkitError(f"cannot write a dataset at {out}: {why}")

    try:
        if not os.path.lexists(out):
            return 0
        real_root, real_out = os.path.realpath(root), os.path.realpath(out)
        if real_root == real_out or real_root.startswith(os.path.join(real_out, "")):
            raise refused(f"it holds the runs being ingested ({root}); give a path beside them")
        if not out.is_dir():
            raise refused("it exists and is not an evalkit dataset; give a new path "
                          "(ingest replaces only an earlier dataset)")
        present = {entry.name for entry in os.scandir(out)}
        if not present:
            return 0
        manifest = _manifest(out / ds.MANIFEST)
        if manifest is None:
            raise refused("it exists and is not an evalkit dataset; give a new path "
                          "(ingest replaces only an earlier dataset)")
        foreign = sorted(present - {ds.MANIFEST, *manifest["tables"].values()})
        if foreign:
            shown = ", ".join(foreign[:3]) + (", …" if len(foreign) > 3 else "")
            raise refused(f"besides an earlier dataset it holds {shown}, which replacing it "
                          "would delete; move them or give a new path")
    except OSError as exc:
        raise refused(exc.strerror or str(exc)) from None
    runs = manifest.get("runs")
    return runs if type(runs) is int and runs > 0 else 0


def _manifest(path: Path) -> dict[str, Any] | None:
    """An evalkit dataset's manifest, or None when ``path`` is not one."""
    try:
        found = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(found, dict) or found.get("format") != ds.FORMAT:
        return None
    tables = found.get("tables")
    if not isinstance(tables, dict) or not all(isinstance(f, str) for f in tables.values()):
        return None
    return found


__all__ = ["BATCH_BYTES", "Derivation", "Gathering", "IngestResult", "connect", "discover",
           "events_table", "ingest", "read_text"]
