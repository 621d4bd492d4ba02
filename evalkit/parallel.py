"""Work shared out over the cores: the one executor scoring, ingest and regrade use.

A function is run over a stream of items by worker processes of a
``concurrent.futures.ProcessPoolExecutor``, and the results come back in the
items' order. The workers are forked, so they start with everything this
process has imported and built: what the work reads (a loaded suite, a
dataset's summaries, a seal checker) is handed over once, as ``shared``,
and inherited rather than pickled. Each item is a chunk of work (a run of
missions, a batch of run directories) big enough that sending it and its
result costs little beside doing it.

Forking is only safe while this process runs no other thread (a thread's lock
held at the fork stays held in the child for ever); then, and for work too
small to pay for a process, the items are worked through here, in order, by
the same function. A library caller sees no side effect either way: the
worker processes are this module's own and end with the call.

Kept here, at the top of the package, because the store (ingest) and the
runtime (regrade) use it as well as scoring, and neither may import
``evalkit.eval``.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from itertools import islice
from typing import Any, TypeVar

from evalkit.errors import EvalkitError

S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")

#: Items handed to each worker ahead of the one it is on: enough that none waits
#: for its next item, few enough that results held for ordering stay small.
AHEAD = 2


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0))


def workers_for(items: int, per_worker: int) -> int:
    """Processes worth starting for ``items`` units of work: one for every
    ``per_worker`` of them (what a process must have to do to repay its start),
    at most one per core, at least one."""
    return max(1, min(cores(), items // per_worker))


def spans(items: int, size: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of consecutive shares of ``items`` units, ``size`` at most each."""
    return [(start, min(start + size, items)) for start in range(0, items, size)]


def can_fork() -> bool:
    """Whether worker processes may be forked now: only this thread is running."""
    return hasattr(os, "fork") and threading.active_count() == 1


def ordered(work: Callable[[S, T], R], items: Iterable[T], *, shared: S,
            workers: int, cycles: bool = False) -> Iterator[R]:
    """``work(shared, item)`` for each item, yielded in the items' order.

    ``work`` must be a module-level function (the workers find it by name).
    ``items`` is read as the work goes, so a lazy walk feeds the workers while
    it walks. With ``workers`` > 1 (and forking safe) that many processes do
    the work; otherwise this one does. An exception raised by ``work`` is
    raised here, at its item; a worker process that dies is an
    ``EvalkitError``. Leaving the loop early cancels what is queued. ``cycles``:
    the work makes reference cycles (a replayed mission does), so the workers keep
    the cycle collector on.
    """
    if workers <= 1 or not can_fork():
        for item in items:
            yield work(shared, item)
        return
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                               initializer=_start_worker, initargs=(shared, cycles))
    try:
        pending: deque[Future[R]] = deque()
        queue = iter(items)
        for item in islice(queue, workers * AHEAD):
            pending.append(pool.submit(_call, work, item))
        while pending:
            try:
                result = pending.popleft().result()
            except BrokenProcessPool:
                raise EvalkitError("a worker process stopped before its work was done "
                                   "(killed, or out of memory)") from None
            for item in islice(queue, 1):
                pending.append(pool.submit(_call, work, item))
            yield result
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


#: What the work of this worker process reads (``ordered``'s ``shared``).
_shared: Any = None


def _start_worker(shared: Any, cycles: bool) -> None:
    """A worker's first step: keep ``shared``; leave Ctrl-C to the parent, which stops the
    pool; and, for work that makes no cycles, run without the cycle collector, whose
    passes would walk (and so copy) every object inherited from the parent."""
    global _shared
    _shared = shared
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not cycles:
        gc.disable()


def _call(work: Callable[[Any, T], R], item: T) -> R:
    return work(_shared, item)


__all__ = ["can_fork", "cores", "ordered", "spans", "workers_for"]
