"""Duplicate governs, one after another and N at once (threads, then processes, each
released by a barrier): exactly one execution, and every caller sees the same outcome."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from pathlib import Path

import pytest

from evalkit.gate.ledger import Ledger, govern

from ._ledger_kit import POLICY

N = 8


def _effect(counter: Path):
    def run() -> dict:
        fd = os.open(counter, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, b"x\n")
        finally:
            os.close(fd)
        time.sleep(0.05)  # long enough for every other caller to arrive meanwhile
        return {"value": 42}
    return run


def _count(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def test_sequential_duplicates_run_once(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    outcomes = []
    for _ in range(5):
        book = Ledger(tmp_path / "gov.sqlite")
        action = govern(book, "run1:1:0", "noop", {"a": 1}, POLICY, _effect(counter))
        outcomes.append((action.state, action.result))
        book.close()
    assert outcomes == [("completed", {"value": 42})] * 5
    assert _count(counter) == 1


def test_threads_racing_on_one_key_run_it_once(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    barrier = threading.Barrier(N)
    outcomes: list = [None] * N

    def caller(i: int) -> None:
        book = Ledger(tmp_path / "gov.sqlite")
        barrier.wait()
        action = govern(book, "run1:1:0", "noop", {"a": 1}, POLICY, _effect(counter))
        outcomes[i] = (action.state, action.result)
        book.close()

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(N)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert outcomes == [("completed", {"value": 42})] * N
    assert _count(counter) == 1
    book = Ledger(tmp_path / "gov.sqlite")
    assert book.get("run1:1:0").attempts == 1 and book.verify_chain()[0]


@pytest.mark.slow
def test_openers_racing_on_a_fresh_file_all_open(tmp_path: Path) -> None:
    """N openers released at once on a new database: the switch to WAL must wait for the
    others, not fail with "database is locked" (found by the test above in CI, 1 run in
    about 50 here). Many fresh files, because one race loses rarely."""
    failures: list[str] = []

    def opener(path: Path, barrier: threading.Barrier) -> None:
        barrier.wait()
        try:
            Ledger(path).close()
        except Exception as exc:  # noqa: BLE001 - any failure to open is the finding
            failures.append(str(exc))

    for trial in range(100):
        barrier = threading.Barrier(N)
        path = tmp_path / f"gov{trial}.sqlite"
        threads = [threading.Thread(target=opener, args=(path, barrier)) for _ in range(N)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert failures == []


def _process_caller(db: str, counter: str, barrier, results) -> None:
    book = Ledger(db)
    barrier.wait()
    action = govern(book, "run1:1:0", "noop", {"a": 1}, POLICY, _effect(Path(counter)))
    results.put((action.state, action.result))


@pytest.mark.slow
def test_processes_racing_on_one_key_run_it_once(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(N)
    results = context.Queue()
    counter = tmp_path / "counter"
    procs = [context.Process(target=_process_caller,
                             args=(str(tmp_path / "gov.sqlite"), str(counter), barrier, results))
             for _ in range(N)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert outcomes == [("completed", {"value": 42})] * N
    assert _count(counter) == 1
    book = Ledger(tmp_path / "gov.sqlite")
    assert book.get("run1:1:0").attempts == 1
    assert book.verify_chain() == (True, 4, None)


@pytest.mark.slow
def test_racing_on_different_keys_runs_each_once(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    barrier = threading.Barrier(4)

    def caller(i: int) -> None:
        book = Ledger(tmp_path / "gov.sqlite")
        barrier.wait()
        for step in range(3):
            govern(book, f"run1:{step}:0", "noop", {"s": step}, POLICY, _effect(counter))
        book.close()

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert _count(counter) == 3
    book = Ledger(tmp_path / "gov.sqlite")
    assert {a.state for a in book.actions()} == {"completed"}
    assert book.verify_chain()[0]


def test_threads_sharing_one_ledger_take_turns(tmp_path: Path) -> None:
    """Swarm lanes share their run's ledger (one connection): still one execution per key."""
    counter = tmp_path / "counter"
    book = Ledger(tmp_path / "gov.sqlite")
    barrier = threading.Barrier(N)
    outcomes: list = [None] * N

    def caller(i: int) -> None:
        barrier.wait()
        action = govern(book, f"run1:{i % 2}:0", "noop", {"a": i % 2}, POLICY,
                        _effect(counter))
        outcomes[i] = (action.key, action.state, action.result["value"])

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(N)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(set(outcomes)) == [("run1:0:0", "completed", 42),
                                     ("run1:1:0", "completed", 42)]
    assert _count(counter) == 2 and book.verify_chain()[0]
