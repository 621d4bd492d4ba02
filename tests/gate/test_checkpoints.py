"""Leased approval checkpoints: one lease winner, enforced deadlines, sealed payloads bound to
their record, successors persisted before consumption, bounded codes, nothing left sealed."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from evalkit.errors import EvalkitError
from evalkit.gate.checkpoints import (
    FAULT_ENV,
    CheckpointRefused,
    CheckpointStore,
    Lease,
    Successor,
)
from evalkit.gate.sealing import KeyProvider, SealError

RUN, DEF = "run-1", "sha256:def1"


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def keys(tmp_path: Path) -> KeyProvider:
    return KeyProvider(tmp_path / "keys" / "checkpoint")


@pytest.fixture
def store(tmp_path: Path, keys: KeyProvider, clock: Clock) -> CheckpointStore:
    return CheckpointStore(tmp_path / "governance.sqlite", keys=keys, clock=clock)


def _lease(store: CheckpointStore, cid: str = "c1", seconds: float = 60) -> Lease:
    return store.approve_and_lease(cid, run_id=RUN, definition_hash=DEF, operator="ana",
                                   audit_ref="audit-1", lease_seconds=seconds)


def _envelope(store: CheckpointStore, cid: str) -> Any:
    conn = sqlite3.connect(store.path)
    try:
        return conn.execute("SELECT envelope FROM checkpoints WHERE id=?", (cid,)).fetchone()[0]
    finally:
        conn.close()


def test_pending_leased_consumed_and_the_ciphertext_is_dropped(store: CheckpointStore,
                                                               clock: Clock) -> None:
    store.save_pending("c1", RUN, DEF, {"messages": ["hi"], "step": 3}, clock.now + 3600)
    row = store.get("c1")
    assert row is not None and row.state == "pending" and row.sealed and row.kid
    assert b"messages" not in _envelope(store, "c1")
    lease = _lease(store)
    assert lease.deadline == clock.now + 60
    assert store.open(lease) == {"messages": ["hi"], "step": 3}
    store.consume(lease)
    row = store.get("c1")
    assert row is not None and row.state == "consumed" and not row.sealed
    assert (row.operator, row.audit_ref) == ("ana", "audit-1")
    assert _envelope(store, "c1") is None
    with pytest.raises(CheckpointRefused, match="is consumed, not leased"):
        store.consume(lease)
    with pytest.raises(CheckpointRefused, match="already consumed"):
        _lease(store)


def test_bytes_payloads_come_back_as_bytes(store: CheckpointStore, clock: Clock) -> None:
    store.save_pending("c1", RUN, DEF, b"\x00raw", clock.now + 60)
    assert store.open(_lease(store)) == b"\x00raw"


def test_a_lease_is_bound_to_its_run_and_definition(store: CheckpointStore,
                                                    clock: Clock) -> None:
    store.save_pending("c1", RUN, DEF, b"s", clock.now + 60)
    with pytest.raises(CheckpointRefused, match="belongs to another run") as caught:
        store.approve_and_lease("c1", run_id="run-2", definition_hash=DEF, operator="ana",
                                audit_ref="a", lease_seconds=60)
    assert caught.value.reason == "run_mismatch"
    with pytest.raises(CheckpointRefused, match="another agent definition") as caught:
        store.approve_and_lease("c1", run_id=RUN, definition_hash="sha256:other",
                                operator="ana", audit_ref="a", lease_seconds=60)
    assert caught.value.reason == "definition_mismatch"
    for bad in (0, -1, float("nan"), 10**9, True, "60"):
        with pytest.raises(EvalkitError, match="a lease lasts more than 0"):
            _lease(store, seconds=bad)  # type: ignore[arg-type]
    with pytest.raises(CheckpointRefused) as caught:
        _lease(store, "nope")
    assert caught.value.reason == "unknown"
    assert store.get("c1").state == "pending"  # type: ignore[union-attr]


def test_refusal_says_what_the_lease_would_and_leases_nothing(store: CheckpointStore,
                                                             clock: Clock) -> None:
    """``refusal`` is asked before a resume starts anything: the lease's own reason for each
    case, and a leasable checkpoint left pending for the lease to decide."""
    store.save_pending("c1", RUN, DEF, b"s", clock.now + 60)
    assert store.refusal("c1", run_id=RUN, definition_hash=DEF) is None
    assert store.get("c1").state == "pending"  # type: ignore[union-attr]
    for run, definition, reason in ((RUN, DEF, None), ("run-2", DEF, "run_mismatch"),
                                    (RUN, "sha256:other", "definition_mismatch")):
        found = store.refusal("c1", run_id=run, definition_hash=definition)
        assert (found.reason if found is not None else None) == reason
    assert store.refusal("nope", run_id=RUN, definition_hash=DEF).reason == "unknown"  # type: ignore[union-attr]
    store.consume(_lease(store))
    spent = store.refusal("c1", run_id=RUN, definition_hash=DEF)
    assert spent is not None and spent.reason == "not_pending"
    with pytest.raises(CheckpointRefused, match=re.escape(str(spent))):
        _lease(store)
    store.save_pending("c2", RUN, DEF, b"s", clock.now + 60)
    clock.now += 61
    late = store.refusal("c2", run_id=RUN, definition_hash=DEF)
    assert late is not None and late.reason == "expired"
    assert store.get("c2").state == "expired"  # type: ignore[union-attr]


def test_n_threads_race_for_the_lease_and_exactly_one_wins(tmp_path: Path,
                                                           keys: KeyProvider) -> None:
    path = tmp_path / "governance.sqlite"
    CheckpointStore(path, keys=keys).save_pending("c1", RUN, DEF, b"s", 4_000_000_000)
    n = 8
    stores = [CheckpointStore(path, keys=keys) for _ in range(n)]
    barrier = threading.Barrier(n)
    won: list[Lease] = []
    refused: list[str] = []

    def race(store: CheckpointStore) -> None:
        barrier.wait()
        try:
            won.append(_lease(store))
        except CheckpointRefused as exc:
            refused.append(exc.reason)

    threads = [threading.Thread(target=race, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and refused == ["not_pending"] * (n - 1)
    assert stores[0].open(won[0]) == b"s"


def _race_in_process(path: str, folder: str, barrier: Any, results: Any) -> None:
    store = CheckpointStore(path, keys=KeyProvider(folder))
    barrier.wait()
    try:
        results.put(("won", asdict(_lease(store))))
    except CheckpointRefused as exc:
        results.put(("refused", exc.reason))


def test_n_processes_race_for_the_lease_and_exactly_one_wins(tmp_path: Path,
                                                             keys: KeyProvider) -> None:
    path = tmp_path / "governance.sqlite"
    CheckpointStore(path, keys=keys).save_pending("c1", RUN, DEF, b"s", 4_000_000_000)
    n = 6
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_race_in_process,
                         args=(str(path), str(keys.folder), barrier, results))
             for _ in range(n)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=60) for _ in range(n)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    winners = [o[1] for o in outcomes if o[0] == "won"]
    assert len(winners) == 1
    assert sorted(o[1] for o in outcomes if o[0] == "refused") == ["not_pending"] * (n - 1)
    store = CheckpointStore(path, keys=keys)
    assert store.open(Lease(**winners[0])) == b"s"


def test_the_lease_deadline_is_enforced(store: CheckpointStore, clock: Clock) -> None:
    store.save_pending("c1", RUN, DEF, b"s", clock.now + 3600)
    lease = _lease(store, seconds=30)
    clock.now += 30
    with pytest.raises(CheckpointRefused, match="ran out") as caught:
        store.open(lease)
    assert caught.value.reason == "lease_expired"
    row = store.get("c1")
    assert row is not None and (row.state, row.failure_code, row.sealed) == (
        "failed", "lease_expired", False)
    with pytest.raises(CheckpointRefused, match="is failed, not leased"):
        store.consume(lease)
    with pytest.raises(CheckpointRefused, match="already failed"):
        _lease(store)


def test_a_late_consume_is_refused_and_fails_the_lease(store: CheckpointStore,
                                                       clock: Clock) -> None:
    store.save_pending("c1", RUN, DEF, b"s", clock.now + 3600)
    lease = _lease(store, seconds=30)
    assert store.open(lease) == b"s"
    clock.now += 31
    with pytest.raises(CheckpointRefused) as caught:
        store.consume(lease, Successor("c2", b"next", clock.now + 3600))
    assert caught.value.reason == "lease_expired"
    assert store.get("c1").failure_code == "lease_expired"  # type: ignore[union-attr]
    assert store.get("c2") is None  # a late lease writes no successor


def test_a_late_consume_without_a_successor_is_refused(store: CheckpointStore,
                                                       clock: Clock) -> None:
    store.save_pending("c1", RUN, DEF, b"s", clock.now + 3600)
    lease = _lease(store, seconds=30)
    clock.now += 30
    with pytest.raises(CheckpointRefused, match="ran out"):
        store.consume(lease)
    assert store.get("c1").failure_code == "lease_expired"  # type: ignore[union-attr]


def test_expire_due_ends_overdue_pending_and_leased(store: CheckpointStore,
                                                    clock: Clock) -> None:
    store.save_pending("c1", RUN, DEF, b"s", clock.now + 10)
    store.save_pending("c2", RUN, DEF, b"s", clock.now + 1000)
    store.save_pending("c3", RUN, DEF, b"s", clock.now + 1000)
    _lease(store, "c2", seconds=20)
    clock.now += 15
    assert store.expire_due() == ["c1"]
    clock.now += 10
    assert store.expire_due() == ["c2"]
    states = {c.id: (c.state, c.failure_code, c.sealed) for c in store.list()}
    assert states == {"c1": ("expired", None, False), "c2": ("failed", "lease_expired", False),
                      "c3": ("pending", None, True)}


def test_a_checkpoint_past_its_expiry_cannot_be_approved(store: CheckpointStore,
                                                         clock: Clock) -> None:
    store.save_pending("c1", RUN, DEF, b"s", clock.now + 10)
    clock.now += 10
    with pytest.raises(CheckpointRefused, match="expired before it was approved"):
        _lease(store)
    assert store.get("c1").state == "expired"  # type: ignore[union-attr]


@pytest.mark.parametrize("target_run", [RUN, "run-2"])
def test_a_ciphertext_moved_to_another_record_does_not_open(
        store: CheckpointStore, clock: Clock, target_run: str) -> None:
    store.save_pending("c1", RUN, DEF, b"secret state", clock.now + 60)
    store.save_pending("c2", target_run, DEF, b"other", clock.now + 60)
    conn = sqlite3.connect(store.path)
    conn.execute("UPDATE checkpoints SET envelope=(SELECT envelope FROM checkpoints "
                 "WHERE id='c1') WHERE id='c2'")
    conn.commit()
    conn.close()
    lease = store.approve_and_lease("c2", run_id=target_run, definition_hash=DEF,
                                    operator="ana", audit_ref="a", lease_seconds=60)
    with pytest.raises(SealError, match="sealed for another record or run"):
        store.open(lease)
    row = store.get("c2")
    assert row is not None and (row.state, row.failure_code) == ("failed", "decrypt_failed")


def test_checkpoints_sealed_before_a_rotation_still_open(store: CheckpointStore,
                                                         keys: KeyProvider,
                                                         clock: Clock) -> None:
    store.save_pending("c1", RUN, DEF, b"old", clock.now + 60)
    new_kid = keys.rotate()
    store.save_pending("c2", RUN, DEF, b"new", clock.now + 60)
    old, new = store.get("c1"), store.get("c2")
    assert old is not None and new is not None
    assert new.kid == new_kid != old.kid
    assert store.open(_lease(store, "c1")) == b"old"
    assert store.open(_lease(store, "c2")) == b"new"


def test_a_removed_key_fails_the_lease_with_one_sentence(store: CheckpointStore,
                                                         keys: KeyProvider,
                                                         clock: Clock) -> None:
    store.save_pending("c1", RUN, DEF, b"s", clock.now + 60)
    kid = store.get("c1").kid  # type: ignore[union-attr]
    (keys.folder / f"{kid}.key").unlink()
    lease = _lease(store)
    with pytest.raises(SealError, match=f"^checkpoint key {kid} is not in "):
        store.open(lease)
    assert store.get("c1").failure_code == "decrypt_failed"  # type: ignore[union-attr]


def test_the_successor_is_persisted_and_linked_when_consuming(store: CheckpointStore,
                                                              clock: Clock) -> None:
    store.save_pending("c1", RUN, DEF, b"s", clock.now + 60)
    lease = _lease(store)
    store.consume(lease, Successor("c2", {"paused": "again"}, clock.now + 600))
    first, second = store.get("c1"), store.get("c2")
    assert first is not None and (first.state, first.successor) == ("consumed", "c2")
    assert second is not None and (second.state, second.predecessor, second.run_id) == (
        "pending", "c1", RUN)
    assert store.open(_lease(store, "c2")) == {"paused": "again"}


def test_a_successor_may_not_reuse_an_id(store: CheckpointStore, clock: Clock) -> None:
    store.save_pending("c1", RUN, DEF, b"s", clock.now + 60)
    store.save_pending("c9", RUN, DEF, b"s", clock.now + 60)
    lease = _lease(store)
    with pytest.raises(CheckpointRefused, match="exists already"):
        store.consume(lease, Successor("c9", b"x", clock.now + 60))
    assert store.get("c1").state == "leased"  # type: ignore[union-attr]


_KILLED = """
import json, sys, time
from evalkit.gate.checkpoints import CheckpointStore, Successor
from evalkit.gate.sealing import KeyProvider
store = CheckpointStore(sys.argv[1], keys=KeyProvider(sys.argv[2]))
store.save_pending("c1", "run-1", "sha256:def1", b"s", time.time() + 3600)
lease = store.approve_and_lease("c1", run_id="run-1", definition_hash="sha256:def1",
                                operator="ana", audit_ref="a", lease_seconds=60)
print(json.dumps(lease.__dict__), flush=True)
store.consume(lease, Successor("c2", b"next", time.time() + 3600))
print("not killed", flush=True)
"""


def _killed_after_successor(tmp_path: Path, keys: KeyProvider) -> tuple[Path, Lease]:
    path = tmp_path / "governance.sqlite"
    env = {**os.environ, FAULT_ENV: "after_successor",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run([sys.executable, "-c", _KILLED, str(path), str(keys.folder)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "not killed" not in proc.stdout
    return path, Lease(**json.loads(proc.stdout.splitlines()[0]))


def test_a_crash_between_successor_and_consume_leaves_the_successor_and_no_second_use(
        tmp_path: Path, keys: KeyProvider) -> None:
    path, lease = _killed_after_successor(tmp_path, keys)
    clock = Clock(lease.deadline - 1)
    store = CheckpointStore(path, keys=keys, clock=clock)
    assert store.get("c1").state == "leased"  # type: ignore[union-attr]
    successor = store.get("c2")
    assert successor is not None and (successor.state, successor.predecessor) == (
        "pending", "c1")
    with pytest.raises(CheckpointRefused, match="already leased"):
        _lease(store, "c1")
    clock.now = lease.deadline
    assert store.expire_due() == ["c1"]
    with pytest.raises(CheckpointRefused, match="is failed, not leased"):
        store.consume(lease)
    assert store.get("c1").failure_code == "lease_expired"  # type: ignore[union-attr]
    assert store.open(_lease(store, "c2")) == b"next"


def test_the_lease_holder_retrying_consume_after_a_crash_finishes_once(
        tmp_path: Path, keys: KeyProvider) -> None:
    path, lease = _killed_after_successor(tmp_path, keys)
    clock = Clock(lease.deadline - 1)
    store = CheckpointStore(path, keys=keys, clock=clock)
    store.consume(lease, Successor("c2", b"ignored: already written", clock.now + 60))
    assert store.get("c1").successor == "c2"  # type: ignore[union-attr]
    assert store.open(_lease(store, "c2")) == b"next"  # the first write stands
    with pytest.raises(CheckpointRefused, match="is consumed, not leased"):
        store.consume(lease, Successor("c2", b"x", clock.now + 60))


def test_failure_codes_are_bounded(store: CheckpointStore, clock: Clock) -> None:
    store.save_pending("c1", RUN, DEF, b"s", clock.now + 60)
    lease = _lease(store)
    with pytest.raises(EvalkitError, match="is not a checkpoint failure code"):
        store.fail(lease, "Traceback: KeyError('api_key=sk-123')")
    assert store.get("c1").state == "leased"  # type: ignore[union-attr]
    conn = sqlite3.connect(store.path)
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("UPDATE checkpoints SET state='failed', envelope=NULL, "
                     "failure_code='raw text' WHERE id='c1'")
    conn.close()
    store.fail(lease, "resume_failed")
    row = store.get("c1")
    assert row is not None and (row.state, row.failure_code, row.sealed) == (
        "failed", "resume_failed", False)
    with pytest.raises(CheckpointRefused, match="is failed, not leased"):
        store.fail(lease, "crashed")


def test_a_forged_lease_is_refused(store: CheckpointStore, clock: Clock) -> None:
    store.save_pending("c1", RUN, DEF, b"s", clock.now + 60)
    real = _lease(store)
    forged = Lease(**{**asdict(real), "token": "0" * 32})
    with pytest.raises(CheckpointRefused, match="not by this lease"):
        store.open(forged)
    with pytest.raises(CheckpointRefused, match="not by this lease"):
        store.consume(forged)
    moved = Lease(**{**asdict(real), "run_id": "run-2"})  # the real token, another run
    with pytest.raises(CheckpointRefused, match="not by this lease"):
        store.consume(moved, Successor("c2", b"x", clock.now + 60))
    assert store.get("c1").state == "leased"  # type: ignore[union-attr]
    assert store.get("c2") is None


def test_reject_never_decrypts(store: CheckpointStore, keys: KeyProvider, clock: Clock) -> None:
    store.save_pending("c1", RUN, DEF, b"s", clock.now + 60)
    shutil.rmtree(keys.folder)  # nothing could be opened now
    store.reject("c1", operator="ana", reason_code="operator_denied", audit_ref="a-9")
    row = store.get("c1")
    assert row is not None and (row.state, row.reject_code, row.sealed) == (
        "rejected", "operator_denied", False)
    assert _envelope(store, "c1") is None
    with pytest.raises(CheckpointRefused, match="only a pending checkpoint can be rejected"):
        store.reject("c1", operator="ana", reason_code="withdrawn")
    with pytest.raises(EvalkitError, match="is not a rejection code"):
        store.reject("c1", operator="ana", reason_code="because I said so")


def test_the_table_refuses_ciphertext_in_a_terminal_row(store: CheckpointStore,
                                                        clock: Clock) -> None:
    store.save_pending("c1", RUN, DEF, b"s", clock.now + 60)
    conn = sqlite3.connect(store.path)
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("UPDATE checkpoints SET state='expired' WHERE id='c1'")
    conn.close()


def test_the_database_is_private(store: CheckpointStore) -> None:
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600


def test_approve_and_resume_consumes_with_the_successor(store: CheckpointStore,
                                                        clock: Clock) -> None:
    store.save_pending("c1", RUN, DEF, {"step": 1}, clock.now + 60)
    seen: list[Any] = []

    def resume(payload: Any) -> Successor:
        seen.append(payload)
        return Successor("c2", {"step": 2}, clock.now + 60)

    store.approve_and_resume("c1", run_id=RUN, definition_hash=DEF, operator="ana",
                             audit_ref="a", lease_seconds=60, resume=resume)
    assert seen == [{"step": 1}]
    assert store.get("c1").state == "consumed"  # type: ignore[union-attr]
    assert store.get("c2").state == "pending"  # type: ignore[union-attr]


def test_a_resume_that_raises_fails_the_lease_with_a_code_not_its_message(
        store: CheckpointStore, clock: Clock) -> None:
    store.save_pending("c1", RUN, DEF, b"s", clock.now + 60)

    def resume(payload: Any) -> None:
        raise RuntimeError("the model said: api_key=sk-123")

    with pytest.raises(RuntimeError):
        store.approve_and_resume("c1", run_id=RUN, definition_hash=DEF, operator="ana",
                                 audit_ref="a", lease_seconds=60, resume=resume)
    row = store.get("c1")
    assert row is not None and (row.state, row.failure_code) == ("failed", "resume_failed")
    conn = sqlite3.connect(store.path)
    dump = "\n".join(conn.iterdump())
    conn.close()
    assert "sk-123" not in dump
    with pytest.raises(CheckpointRefused, match="already failed"):
        _lease(store)


def test_a_successor_that_cannot_be_written_fails_the_lease(store: CheckpointStore,
                                                            clock: Clock) -> None:
    store.save_pending("c1", RUN, DEF, b"s", clock.now + 60)
    with pytest.raises(EvalkitError, match="would expire before it is saved"):
        store.approve_and_resume("c1", run_id=RUN, definition_hash=DEF, operator="ana",
                                 audit_ref="a", lease_seconds=60,
                                 resume=lambda _: Successor("c2", b"x", clock.now - 1))
    assert store.get("c1").failure_code == "successor_failed"  # type: ignore[union-attr]
    assert store.get("c2") is None


def test_every_committed_transition_reaches_the_observer_without_the_payload(
        tmp_path: Path, keys: KeyProvider, clock: Clock) -> None:
    seen: list[dict[str, Any]] = []
    store = CheckpointStore(tmp_path / "g.sqlite", keys=keys, clock=clock, observer=seen.append)
    store.save_pending("c1", RUN, DEF, {"secret": "hunter2"}, clock.now + 60)
    store.save_pending("c3", RUN, DEF, b"s", clock.now + 5)
    lease = _lease(store)
    store.consume(lease, Successor("c2", b"next", clock.now + 60))
    store.reject("c2", operator="bo", reason_code="withdrawn")
    with pytest.raises(EvalkitError):  # rolled back: nothing to tell
        store.save_pending("c4", RUN, DEF, b"s", clock.now - 1)
    clock.now += 5
    store.expire_due()
    moves = [(e["checkpoint_id"], e["from"], e["to"]) for e in seen]
    assert moves == [("c1", None, "pending"), ("c3", None, "pending"),
                     ("c1", "pending", "leased"), ("c2", None, "pending"),
                     ("c1", "leased", "consumed"), ("c2", "pending", "rejected"),
                     ("c3", "pending", "expired")]
    assert all(e["event"] == "checkpoint_transition" and e["run_id"] == RUN for e in seen)
    assert seen[2]["operator"] == "ana" and seen[2]["lease_deadline"] == lease.deadline
    assert seen[3]["predecessor"] == "c1" and seen[4]["successor"] == "c2"
    assert seen[5]["reject_code"] == "withdrawn"
    assert "hunter2" not in json.dumps(seen)
