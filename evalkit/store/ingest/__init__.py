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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

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
           derive: Derivation | None = None) -> IngestResult:
    """Turn every run directory under ``root`` (and events file directly in it) into a
    Parquet dataset folder at ``out``.

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
        with collector_paused():  # parsed lines form no cycles; its passes were a seventh of the CPU
            n_runs, n_events, n_bytes = convert_runs(root, streams.note(walk(root, skip=out)), tmp,
                                                 threads, batch_bytes, workers, derive)
        if not n_runs and earlier:
            raise EvalkitError(f"found no run directory (one holding {EVENTS_FILE}) under {root}; "
                               f"the dataset at {out} ({earlier} runs) is left as it was")
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


__all__ = ["BATCH_BYTES", "Derivation", "IngestResult", "connect", "discover",
           "events_table", "ingest", "read_text"]
