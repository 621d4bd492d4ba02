"""``evalkit ingest``: run directories -> a Parquet dataset DuckDB can read.

A dataset must say exactly what the JSONL reader says, so there is one way in:
every file is read by the reader ``score --runs`` uses, and every column is the
value of its reference function in ``evalkit.store.dataset``; DuckDB only reads
the result. The ``record`` text is orjson's serialisation of the record the
reader read (``dataset.dumps``): for a line the run store wrote, that is the
line itself, or the record cut out of its envelope.

Work goes in batches of run directories so memory stays bounded. A large set is
converted by forked worker processes (``evalkit.parallel``, a batch an item),
and this process writes every batch's tables, in batch order, as row groups of
one Parquet file per table, so the files are what one process would write. A
caller may add tables derived from each batch (a ``Derivation``:
``evalkit.eval.tables`` adds the per-run summaries scoring reads), computed while
the batch is in memory, so nothing is read twice and this module needs to know
nothing of scoring; and tables made once from other files of the tree that the
walk passes by name (a ``Gathering``: ``evalkit.report.verdict_table`` adds the
verdicts of the score reports kept beside the runs). The dataset is written to a
temporary folder and renamed into place, so a reader never sees half of one.

Where each part lives: ``folders``, finding run directories (a lazy walk);
``batch``, one batch of them -> its tables (and a ``Derivation``'s);
``writers``, the Parquet files, row group by row group.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain, islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq

from evalkit import parallel
from evalkit.errors import EvalkitError
from evalkit.gcpause import collector_paused
from evalkit.store import dataset as ds
from evalkit.store import leftovers
from evalkit.store.ingest.batch import Converted, Derivation, convert
from evalkit.store.ingest.folders import Streams, discover, walk
from evalkit.store.ingest.writers import Writers
from evalkit.store.layout import EVENTS_FILE, MODEL_FILE, TOOLS_FILE, as_text

if TYPE_CHECKING:
    from evalkit.store.seal import Checker

#: Bytes of JSONL converted at once: big enough that per-batch costs vanish,
#: small enough that what a batch builds stays in warm memory and the workers
#: finish close together.
BATCH_BYTES = 24 * 2**20
#: Runs in a batch at most, however small they are.
BATCH_RUNS = 4000


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


def ingest(root: Path, out: Path | None = None, *,
           batch_bytes: int = BATCH_BYTES, workers: int | None = None,
           derive: Derivation | None = None, gather: Gathering | None = None,
           verify: bool = True) -> IngestResult:
    """Turn every run directory under ``root`` (and events file directly in it) into a
    Parquet dataset folder at ``out``.

    Default ``out`` is ``root/dataset.parquet``. Re-ingesting the same runs
    gives the same dataset (no timestamps inside), written to a temporary
    folder and renamed into place. ``workers`` is how many processes convert
    batches (default: one per core, as long as there is a batch for each; 1: this
    process alone); however many there are, the tables come out as one process
    would write them. ``derive`` adds tables computed from each batch,
    ``gather`` tables made from other files of the tree. Each stream is checked
    against its seal as it is converted (``verify``); the manifest names those
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
        runs = streams.note(runs)
        with collector_paused():  # parsed lines form no cycles; its passes were a seventh of the CPU
            n_runs, n_events, n_bytes = _convert_runs(root, runs, tmp, batch_bytes,
                                                      workers, derive, sealed)
        if not n_runs and earlier:
            raise EvalkitError(f"found no run directory (one holding {EVENTS_FILE}) under {root}; "
                               f"the dataset at {out} ({earlier} runs) is left as it was")
        gathered = _gather(gather, root, sorted(kept), tmp)
        names = [*ds.TABLES, *(derive.schemas if derive is not None else ()),
                 *(gather.schemas if gather is not None else ())]
        without_stream, without_records = streams.unkept(skip=out)
        manifest = {"format": ds.FORMAT, ds.SCHEMA_KEY: ds.SCHEMA, "runs": n_runs,
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


def _batches(runs: Iterator[str], batch_bytes: int) -> Iterator[list[str]]:
    """Consecutive run directories, about ``batch_bytes`` of JSONL at a time."""
    batch: list[str] = []
    size = 0
    for run in runs:
        batch.append(run)
        size += _size(run)
        if size >= batch_bytes or len(batch) >= BATCH_RUNS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _size(run: str) -> int:
    """The bytes of JSONL a run directory (or an events file in the root) holds."""
    size = 0
    for path in (f"{run}/{EVENTS_FILE}", f"{run}/{MODEL_FILE}", f"{run}/{TOOLS_FILE}"):
        try:
            size += os.stat(path).st_size
        except NotADirectoryError:  # ``run`` is an events file
            return _stat_size(run)
        except OSError:
            pass
    return size


def _stat_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


@dataclass
class _Job:
    """What every batch's work reads (``parallel.ordered``'s ``shared``)."""

    root: Path
    derive: Derivation | None
    checker: Checker | None
    #: Where a worker process leaves a batch's tables, and which process is not one.
    scratch: str
    parent: int


def _convert(job: _Job, item: tuple[int, list[str]]) -> Converted:
    """``parallel.ordered``'s work: one batch, wherever it runs.

    A worker process leaves the tables as Arrow files for this process to map: one
    copy each way, where pickling them through the pool's pipe took four, and as
    much CPU as converting the model and tool calls."""
    number, dirs = item
    done = convert(job.root, dirs, job.derive, job.checker)
    if os.getpid() != job.parent:
        done.tables = [(name, _spill(table, f"{job.scratch}/{number}.{i}"))
                       for i, (name, table) in enumerate(done.tables)]
    return done


def _spill(table: pa.Table, path: str) -> str:
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return path


def _tables(done: Converted) -> list[tuple[str, pa.Table]]:
    """A batch's tables, mapped from its files when a worker process left them."""
    tables = []
    for name, table in done.tables:
        if isinstance(table, str):
            path, table = table, pa.ipc.open_file(pa.memory_map(table)).read_all()
            os.unlink(path)  # a mapped file stays readable once unlinked, till it is unmapped
        tables.append((name, table))
    return tables


def _convert_runs(root: Path, runs: Iterator[str], folder: Path, batch_bytes: int,
                  workers: int | None, derive: Derivation | None, sealed: Sealed | None
                  ) -> tuple[int, int, int]:
    """Convert the run directories ``runs`` into the tables of ``folder``: (runs, events,
    bytes read).

    The first batches are cut before deciding how many processes to start: a
    process is worth forking for each batch there is, up to the cores. While the
    workers convert the next batches, this one writes the last one.
    """
    batches = _batches(runs, batch_bytes)
    if workers is None:
        first = list(islice(batches, parallel.cores()))
        workers = len(first)
        batches = chain(first, batches)
    totals = [0, 0, 0]
    scratch = folder / ".batches"
    scratch.mkdir()
    writers = Writers(folder, {**ds.SCHEMAS, **(derive.schemas if derive is not None else {})})
    try:
        job = _Job(root, derive, sealed.checker if sealed is not None else None,
                   os.fspath(scratch), os.getpid())
        for done in parallel.ordered(_convert, enumerate(batches), shared=job, workers=workers):
            for name, table in _tables(done):
                writers.write(name, table)
            for i, n in enumerate((done.runs, done.events, done.nbytes)):
                totals[i] += n
            if sealed is not None:
                sealed.add(done.seals)
        writers.close()
    finally:
        writers.close(flush=False)  # after a failure: the folder is thrown away
        shutil.rmtree(scratch, ignore_errors=True)
    return totals[0], totals[1], totals[2]


class Sealed:
    """Each stream checked against its seal (``evalkit.store.seal``) by whichever process
    converts it, from the bytes it read to convert (the seals above the root are read
    once, here, before the workers fork); the words and the altered streams, tallied."""

    def __init__(self, root: Path) -> None:
        from evalkit.store.seal import Checker

        self.checker = Checker.for_scoring([root])
        self.checker.warm(root)
        self.altered: dict[str, str] = {}
        self.counts: dict[str, int] = {}

    def add(self, seals: list[tuple[str, str, str | None]]) -> None:
        for events_path, word, altered in seals:
            self.counts[word] = self.counts.get(word, 0) + 1
            if altered is not None:
                self.altered[events_path] = altered

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


__all__ = ["BATCH_BYTES", "Derivation", "Gathering", "IngestResult", "discover", "ingest"]
