"""Worker processes that convert batches for ingest, fed over a pipe."""

from __future__ import annotations

import gc
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
from concurrent.futures import Future
from contextlib import suppress
from typing import Any

import pyarrow as pa

from evalkit.errors import EvalkitError
from evalkit.store.ingest.batch import Converted, Derivation, convert_there
from evalkit.store.ingest.sql import LazyConnection

#: What a worker process runs: this process's import path (where it found evalkit and
#: whatever the derivation needs), then ``serve``. Not multiprocessing's spawn: its
#: child imports the caller's main module again, and a script calling ingest without an
#: ``if __name__ == "__main__":`` guard then ingests again in there, and fails.
_BOOTSTRAP = ("import pickle, sys; sys.path[:] = pickle.load(sys.stdin.buffer); "
              "from evalkit.store.ingest.workers import serve; serve()")


def serve() -> None:
    """A worker process's life: batches (``convert_there``'s arguments after ``con``)
    read from stdin, each answered on stdout as (True, result) or (False, exception),
    till stdin closes.

    Anything printed goes to stderr (the answers have stdout to themselves); Ctrl-C is
    left to the parent, which stops its workers itself.
    """
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.disable()  # as ingest's collector_paused, for the process's whole life
    _skip_pandas_probe()
    con = LazyConnection(1)  # one per process, opened by the first batch that needs SQL
    tasks = sys.stdin.buffer
    while True:
        try:
            task = pickle.load(tasks)
        except EOFError:
            return
        try:
            answer: tuple[bool, Any] = (True, convert_there(con, *task))
        except BaseException as exc:  # the parent raises it
            answer = (False, exc)
        try:
            data = pickle.dumps(answer, pickle.HIGHEST_PROTOCOL)
        except Exception:  # an exception that does not pickle: its words do
            data = pickle.dumps((False, EvalkitError(f"ingest worker: {answer[1]!r}")))
        answers.write(data)
        answers.flush()


def _skip_pandas_probe() -> None:
    """Spare a worker process pyarrow's import of pandas (0.2 s of CPU).

    pyarrow imports pandas on its first conversion, only to recognise pandas objects
    handed to ``pa.array``; ingest hands it none. With pandas unimportable for that first
    conversion pyarrow takes it as absent; it is importable again afterwards, and
    pyarrow's own pandas functions (``to_pandas``…) import it when called. (Only in a
    worker, a process of ingest's own: a derivation there that hands ``pa.array`` a
    pandas object before any of those gets it read as a plain sequence.)
    """
    if "pandas" in sys.modules:
        return
    sys.meta_path.insert(0, _NoPandas)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(_NoPandas)


class _NoPandas:
    """An import finder that refuses pandas (for ``_skip_pandas_probe``)."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        if name == "pandas":
            raise ModuleNotFoundError("not imported by an ingest worker", name=name)


#: A worker's environment, where the caller's says nothing else. Its memory is what
#: costs here (each first touch of a page is a fault, some 5 µs on a VM): freed memory
#: is kept for the next batch, by Arrow's allocator (mimalloc) and by the C library's,
#: rather than handed back to the system and faulted in again. And numpy's BLAS starts
#: no threads: they spin some 0.15 s of CPU at import, and a worker does no algebra.
_WORKER_ENV = {
    "MIMALLOC_PURGE_DELAY": "-1",
    "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
    "MALLOC_TOP_PAD_": str(64 << 20),
    "OPENBLAS_NUM_THREADS": "1",
}


class WorkerProcess:
    """A worker process (``serve``) and the thread that talks to it: batches are sent
    one at a time, in the order given, each answered through its ``Future``."""

    def __init__(self) -> None:
        self._popen = subprocess.Popen([sys.executable, "-c", _BOOTSTRAP],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       env={**_WORKER_ENV, **os.environ})
        assert self._popen.stdin is not None
        with suppress(BrokenPipeError):  # it died at once: its first batch says so
            pickle.dump(sys.path, self._popen.stdin)
            self._popen.stdin.flush()
        self._tasks: queue.SimpleQueue[tuple[tuple[Any, ...], Future[Converted]] | None] = \
            queue.SimpleQueue()
        self._thread = threading.Thread(target=self._talk, name="evalkit-ingest-worker",
                                        daemon=True)
        self._thread.start()

    def submit(self, *task: Any) -> Future[Converted]:
        future: Future[Converted] = Future()
        self._tasks.put((task, future))
        return future

    def _talk(self) -> None:
        stdin, stdout = self._popen.stdin, self._popen.stdout
        assert stdin is not None and stdout is not None
        while (item := self._tasks.get()) is not None:
            task, future = item
            try:
                pickle.dump(task, stdin, pickle.HIGHEST_PROTOCOL)
                stdin.flush()
                ok, value = pickle.load(stdout)
            except (OSError, EOFError, pickle.UnpicklingError):
                code = self._popen.wait()
                future.set_exception(EvalkitError(
                    f"an ingest worker process stopped (exit status {code})"))
                continue  # the batches still to come fail the same way
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    def stop(self) -> None:
        """End the process (a batch it is converting is abandoned) and the thread."""
        self._popen.kill()
        self._tasks.put(None)
        self._thread.join()
        self._popen.wait()
        for pipe in (self._popen.stdin, self._popen.stdout):
            with suppress(OSError):
                pipe.close()  # type: ignore[union-attr]


def can_fan_out(derive: Derivation | None) -> bool:
    """Whether worker processes can convert: they start from this Python, and must find
    the derivation's class (one defined in the caller's main script they cannot)."""
    return bool(sys.executable) and (derive is None or type(derive).__module__ != "__main__")
