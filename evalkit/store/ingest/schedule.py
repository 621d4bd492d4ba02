"""Handing batches to processes, this one included, and writing them in order."""

from __future__ import annotations

import os
import shutil
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import count, islice
from pathlib import Path
from typing import Any

import pyarrow as pa

from evalkit.store import dataset as ds
from evalkit.store.ingest.batch import Converted, Derivation, convert_here
from evalkit.store.ingest.sql import LazyConnection
from evalkit.store.ingest.workers import WorkerProcess, can_fan_out
from evalkit.store.ingest.writers import Writers
from evalkit.store.layout import EVENTS_FILE, MODEL_FILE, TOOLS_FILE

#: Bytes of JSONL converted at once by one process: big enough that per-batch
#: costs vanish, small enough that what a batch builds stays in warm memory
#: (converting went 3% faster per byte than at 48 MB, and peak memory is lower).
BATCH_BYTES = 24 * 2**20
BATCH_FILES = 4000


#: Runs each process must get before ingest fans out: starting a worker process
#: (Python and its imports, some 0.7 s of CPU) pays off from about there.
RUNS_PER_WORKER = 1000


def _schemas(derive: Derivation | None) -> dict[str, pa.Schema]:
    return {**ds.SCHEMAS, **(derive.schemas if derive is not None else {})}


class _Plan:
    """The run directories, found as they are wanted and cut into consecutive batches
    of about ``batch_bytes`` of JSONL.

    ``find`` walks on (from the main thread only: a thread that walks while another
    one holds the GIL waits on it at every directory). Batch sizes follow the bytes per
    run seen so far, the first runs' file sizes to start with. Once every run has been
    found, the last batches shrink to a share of what is left, so that the processes
    finish together rather than one waiting on another's last batch.
    """

    def __init__(self, runs: Iterator[str], batch_bytes: int) -> None:
        self._runs, self.batch_bytes = runs, batch_bytes
        self.found: deque[str] = deque()
        self.done = False
        self.processes = 1
        self.bytes = self.runs = 0

    def find(self, wanted: int) -> None:
        """Walk on until ``wanted`` runs are waiting to be taken, or there are no more."""
        while len(self.found) < wanted and not self.done:
            run = next(self._runs, None)
            if run is None:
                self.done = True
            else:
                self.found.append(run)
        if not self.runs and self.found:
            sample = list(islice(self.found, 32))
            self.bytes = sum(_size(os.path.join(d, name)) for d in sample
                             for name in (EVENTS_FILE, MODEL_FILE, TOOLS_FILE))
            self.runs = len(sample)

    def __bool__(self) -> bool:
        """Runs found and not taken yet (after ``find``: runs left)."""
        return bool(self.found)

    def size(self) -> int:
        """Runs in the next batch."""
        per_run = max(1, self.bytes // max(1, self.runs))
        size = max(16, min(BATCH_FILES, self.batch_bytes // per_run))
        if self.done:
            size = min(size, max(16, -(-len(self.found) // (2 * self.processes))))
        return size

    def take(self) -> list[str]:
        found = self.found
        return [found.popleft() for _ in range(min(self.size(), len(found)))]

    def learn(self, runs: int, nbytes: int) -> None:
        self.runs += runs
        self.bytes += nbytes


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


class _Here:
    """A batch this process converts (a ``Future``'s ``done``/``result``)."""

    def __init__(self) -> None:
        self.value: Converted | None = None

    def done(self) -> bool:
        return self.value is not None

    def result(self) -> Converted:
        assert self.value is not None
        return self.value


#: Batches this process may have converted ahead of the oldest one still being
#: converted by a worker process (their tables wait in memory to be written).
_HELD = 3


def convert_runs(root: Path, runs: Iterator[str], folder: Path, threads: int | None,
             batch_bytes: int, workers: int | None, derive: Derivation | None = None
             ) -> tuple[int, int, int]:
    """Convert the run directories ``runs`` into the tables of ``folder``: (runs, events,
    bytes read).

    Batches are taken in order by whichever process is free: a worker process
    (there are ``workers - 1``) is handed its next batch the moment it returns
    one, so it never waits on this process, and this process takes the next
    batch itself while the oldest one is still being converted elsewhere. This
    process writes every batch's tables, in batch order; the Parquet encoding
    runs in a thread beside its own converting (both release the GIL).
    """
    plan = _Plan(runs, batch_bytes)
    if not can_fan_out(derive):
        workers = 1
    elif workers is None:
        cpus = len(os.sched_getaffinity(0))
        plan.find(cpus * RUNS_PER_WORKER)
        workers = min(cpus, len(plan.found) // RUNS_PER_WORKER)
    plan.processes = workers = max(1, workers)
    pending: deque[Future[Converted] | _Here] = deque()  # batches in order
    lock = threading.Lock()  # plan and pending, shared with the workers' threads
    idle: list[WorkerProcess] = []  # worker processes that found no batch to take (the walk lagging)
    totals = [0, 0, 0]
    scratch = folder / ".batches"
    con: Any = LazyConnection(threads)
    writers = Writers(folder, _schemas(derive))
    processes: list[WorkerProcess] = []
    stopping = False
    numbers = count()

    def hand_out(worker: WorkerProcess) -> None:
        """Give a worker process its next batch (called again as each one comes back)."""
        with lock:
            if stopping:
                return
            if not plan:
                idle.append(worker)
                return
            stem = os.fspath(scratch / str(next(numbers)))
            future = worker.submit(root, plan.take(), derive, stem)
            pending.append(future)
        future.add_done_callback(lambda _: hand_out(worker))

    try:
        if workers > 1:
            scratch.mkdir()
            processes = [WorkerProcess() for _ in range(workers - 1)]
            idle.extend(processes)
        with ThreadPoolExecutor(max_workers=1) as writer:
            writes: deque[Future[None]] = deque()
            while True:
                # Enough runs found for every process's next batch, then some. (Outside
                # the lock: a worker's batch is taken meanwhile; the deque allows both.)
                plan.find((workers + 1) * plan.size())
                with lock:
                    waiting = idle[:]
                    idle.clear()
                for worker in waiting:
                    hand_out(worker)
                here = None
                with lock:
                    if not pending and not plan:
                        break
                    head = pending[0] if pending else None
                    held = sum(isinstance(p, _Here) for p in pending)
                    if plan and held < _HELD and (head is None or not head.done()):
                        here, taken = _Here(), plan.take()
                        pending.append(here)
                if here is not None:
                    here.value = convert_here(con, root, taken, derive)
                    continue
                assert head is not None
                done = head.result()  # a worker's batch: waits for it if need be
                with lock:
                    pending.popleft()
                    plan.learn(done.runs, done.nbytes)
                for i, n in enumerate((done.runs, done.events, done.nbytes)):
                    totals[i] += n
                while len(writes) > 1:  # memory stays bounded: one write queued at most
                    writes.popleft().result()
                writes.append(writer.submit(_write, writers, done))
            for write in writes:
                write.result()
        writers.close()
    finally:
        with lock:
            stopping = True
        for process in processes:
            process.stop()
        writers.close(flush=False)  # after a failure: the folder is thrown away
        con.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return totals[0], totals[1], totals[2]


def _write(writers: Writers, done: Converted) -> None:
    tables = done.load()
    done.discard()  # a mapped file stays readable once unlinked, till it is unmapped
    for name, table in tables:
        writers.write(name, table)
