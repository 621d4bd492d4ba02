"""Leased approval checkpoints: a paused mission's state, sealed, released to one resumer.

A checkpoint moves ``pending -> leased -> consumed | failed`` or
``pending -> rejected | expired``; the last four absorb. It lives in the
governance database beside the action ledger (:mod:`evalkit.gate.db`), and every
transition is one ``BEGIN IMMEDIATE`` transaction.

Why each rule:

* Approving and leasing is one conditional ``UPDATE ... WHERE state='pending' AND
  run_id=? AND definition_hash=? AND expires_at > now``: of any number of callers,
  threads or processes, exactly one changes the row; the rest are refused by name.
* The lease deadline is enforced. Past it, the lease cannot open the payload nor
  consume, and the checkpoint becomes ``failed`` with the code ``lease_expired``
  (never ``pending`` again: the resumer may already have acted, so a second
  resume could act twice). Only ``pending`` can be leased, so nothing is re-leased.
* The payload is sealed (:mod:`evalkit.gate.sealing`) to the checkpoint's id, run
  and definition hash, opened only under a live lease, and dropped once the
  checkpoint is terminal (a table constraint holds it: no ciphertext outside
  ``pending``/``leased``).
* ``consume`` commits the successor checkpoint first, then consumes the current
  one in a second transaction that also checks the successor is there. A crash
  between the two leaves the successor ``pending`` and the current one ``leased``
  until its deadline, then ``failed`` — never consumed twice, never resumed again.
* A failure or a rejection is a code from a closed tuple, checked by the table too:
  no raw error text (it could carry the decrypted state) is ever stored.
* Every committed transition is told to the store's ``observer`` as an event (never the
  payload), so a host can put the lifecycle in a run's stream.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.gate import db
from evalkit.gate.sealing import KeyProvider, SealError, envelope_kid, seal, unseal

STATES = ("pending", "leased", "consumed", "failed", "rejected", "expired")
TERMINAL = ("consumed", "failed", "rejected", "expired")
#: Why a lease ended ``failed``: the only words stored.
FAILURE_CODES = ("resume_failed", "decrypt_failed", "successor_failed", "lease_expired",
                 "state_invalid", "operator_aborted", "crashed")
#: Why a pending checkpoint was ``rejected``.
REJECT_CODES = ("operator_denied", "policy_denied", "superseded", "withdrawn")
#: Why a call was refused (``CheckpointRefused.reason``).
REFUSALS = ("unknown", "exists", "run_mismatch", "definition_mismatch", "expired",
            "not_pending", "not_leased", "lease_mismatch", "lease_expired")
#: The longest lease a caller may take, in seconds.
MAX_LEASE_SECONDS = 24 * 3600
#: A checkpoint this resume may lease: (id, run id, definition hash, now) bound in order.
_LEASABLE = "id=? AND state='pending' AND run_id=? AND definition_hash=? AND expires_at>?"
#: ``EVALKIT_CHECKPOINT_FAULT=after_successor`` kills the process (SIGKILL) between
#: persisting a successor and consuming its predecessor: for the crash tests.
FAULT_ENV = "EVALKIT_CHECKPOINT_FAULT"

_JSON, _BYTES = b"J", b"B"


def _in(values: tuple[str, ...]) -> str:
    return "(" + ",".join(f"'{v}'" for v in values) + ")"


SCHEMA = f"""
CREATE TABLE IF NOT EXISTS checkpoints (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    definition_hash TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN {_in(STATES)}),
    envelope BLOB,
    kid TEXT,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    lease_token TEXT,
    leased_at REAL,
    lease_deadline REAL,
    operator TEXT,
    audit_ref TEXT,
    failure_code TEXT CHECK (failure_code IS NULL OR failure_code IN {_in(FAILURE_CODES)}),
    reject_code TEXT CHECK (reject_code IS NULL OR reject_code IN {_in(REJECT_CODES)}),
    predecessor TEXT,
    successor TEXT,
    closed_at REAL,
    CHECK ((state IN ('pending', 'leased')) = (envelope IS NOT NULL)),
    CHECK (state <> 'leased' OR (lease_token IS NOT NULL AND lease_deadline IS NOT NULL)),
    CHECK ((state = 'failed') = (failure_code IS NOT NULL)),
    CHECK ((state = 'rejected') = (reject_code IS NOT NULL))
);
CREATE INDEX IF NOT EXISTS checkpoints_due ON checkpoints (state, expires_at);
CREATE INDEX IF NOT EXISTS checkpoints_predecessor ON checkpoints (predecessor);
"""

_COLUMNS = ("id", "run_id", "definition_hash", "state", "kid", "created_at", "expires_at",
            "leased_at", "lease_deadline", "operator", "audit_ref", "failure_code",
            "reject_code", "predecessor", "successor", "closed_at")


class CheckpointRefused(EvalkitError):
    """A transition that may not happen, in one sentence; ``reason`` is one of REFUSALS."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Lease:
    """What the one winner of ``approve_and_lease`` holds; the token proves it."""

    checkpoint_id: str
    run_id: str
    definition_hash: str
    token: str
    deadline: float
    operator: str
    audit_ref: str


@dataclass(frozen=True)
class Successor:
    """The checkpoint a resume paused at again; it inherits the lease's run and definition."""

    checkpoint_id: str
    payload: bytes | dict[str, Any]
    expires_at: float | datetime


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint's row as listings show it: never the payload."""

    id: str
    run_id: str
    definition_hash: str
    state: str
    kid: str | None
    created_at: float
    expires_at: float
    leased_at: float | None
    lease_deadline: float | None
    operator: str | None
    audit_ref: str | None
    failure_code: str | None
    reject_code: str | None
    predecessor: str | None
    successor: str | None
    closed_at: float | None
    sealed: bool


def _seconds(when: float | datetime) -> float:
    seconds = when.timestamp() if isinstance(when, datetime) else float(when)
    if not math.isfinite(seconds):
        raise EvalkitError(f"a checkpoint's expiry must be a finite time, not {when}")
    return seconds


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 256:
        raise EvalkitError(f"a checkpoint's {name} must be a non-empty string of at most "
                           f"256 characters, not {value!r:.60}")
    return value


def _frame(payload: bytes | dict[str, Any]) -> bytes:
    import rfc8785

    if isinstance(payload, bytes | bytearray):
        return _BYTES + bytes(payload)
    if isinstance(payload, dict):
        try:
            return _JSON + rfc8785.dumps(payload)
        except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
            raise EvalkitError(f"a checkpoint payload must be plain JSON: {exc}") from None
    raise EvalkitError("a checkpoint payload is bytes or a JSON object")


def _unframe(plain: bytes) -> bytes | dict[str, Any]:
    import json

    return json.loads(plain[1:]) if plain[:1] == _JSON else plain[1:]


def identity(checkpoint_id: str, run_id: str, definition_hash: str) -> dict[str, str]:
    """What a checkpoint's ciphertext is bound to (the associated data, with the header)."""
    return {"checkpoint_id": checkpoint_id, "run_id": run_id,
            "definition_hash": definition_hash}


class CheckpointStore:
    """Checkpoints in the governance database; safe to share between threads and processes."""

    def __init__(self, path: Path | str | None = None, *, keys: KeyProvider | None = None,
                 clock: Callable[[], float] = time.time,
                 environ: Mapping[str, str] | None = None,
                 observer: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.path = Path(path) if path is not None else db.default_path(environ)
        self.keys = keys if keys is not None else KeyProvider.default(environ)
        self.clock = clock
        #: Told of every committed transition (``checkpoint_transition`` events, no payload),
        #: after the commit and outside the lock: how a host records them in a run's stream.
        self.observer = observer
        self._events: list[dict[str, Any]] = []
        self._lock = threading.RLock()
        self._conn = db.connect(self.path)
        with self._lock:
            self._conn.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- writes -------------------------------------------------------------------------

    def save_pending(self, checkpoint_id: str, run_id: str, definition_hash: str,
                     payload: bytes | dict[str, Any], expires_at: float | datetime) -> None:
        """Store a paused mission's state, sealed, awaiting a decision until ``expires_at``."""
        self._insert(checkpoint_id, run_id, definition_hash, payload, expires_at, None)

    def approve_and_lease(self, checkpoint_id: str, *, run_id: str, definition_hash: str,
                          operator: str, audit_ref: str, lease_seconds: float) -> Lease:
        """An authenticated operator's yes: pending -> leased, for exactly one caller."""
        _text("operator", operator)
        _text("audit reference", audit_ref)
        if isinstance(lease_seconds, bool) or not isinstance(lease_seconds, int | float) \
                or not 0 < lease_seconds <= MAX_LEASE_SECONDS:
            raise EvalkitError(f"a lease lasts more than 0 and at most {MAX_LEASE_SECONDS} "
                               f"seconds, not {lease_seconds}")
        token = secrets.token_hex(16)
        with self._tx() as conn:
            now = self.clock()
            deadline = now + lease_seconds
            won = conn.execute(
                "UPDATE checkpoints SET state='leased', lease_token=?, leased_at=?, "
                f"lease_deadline=?, operator=?, audit_ref=? WHERE {_LEASABLE}",
                (token, now, deadline, operator, audit_ref, checkpoint_id, run_id,
                 definition_hash, now)).rowcount == 1
            refusal = None if won else self._why_not_leased(conn, checkpoint_id, run_id,
                                                            definition_hash, now)
            if won:
                self._moved(checkpoint_id, run_id, "pending", "leased", now, operator=operator,
                            audit_ref=audit_ref, lease_deadline=deadline)
        if refusal is not None:
            raise refusal
        return Lease(checkpoint_id, run_id, definition_hash, token, deadline, operator,
                     audit_ref)

    def refusal(self, checkpoint_id: str, *, run_id: str, definition_hash: str
                ) -> CheckpointRefused | None:
        """Why ``approve_and_lease`` would refuse this checkpoint now (None: it would lease
        it), leasing nothing: a resume asks before it starts anything. A checkpoint that
        cannot be leased never can be again, so the answer holds; one that can is still
        won by one resume only, at the lease."""
        with self._tx() as conn:
            now = self.clock()
            if conn.execute(f"SELECT 1 FROM checkpoints WHERE {_LEASABLE}",
                            (checkpoint_id, run_id, definition_hash, now)).fetchone():
                return None
            return self._why_not_leased(conn, checkpoint_id, run_id, definition_hash, now)

    def open(self, lease: Lease) -> bytes | dict[str, Any]:
        """The paused state, decrypted, while ``lease`` is live.

        A payload that does not open fails the lease (``decrypt_failed``): the state
        is unusable, and the checkpoint must not wait to be tried again.
        """
        envelope = self._check_live(lease)
        try:
            plain = unseal(self.keys, envelope, identity(lease.checkpoint_id, lease.run_id,
                                                       lease.definition_hash))
        except SealError:
            with contextlib.suppress(CheckpointRefused):  # it may have run out meanwhile
                self.fail(lease, "decrypt_failed")
            raise
        return _unframe(plain)

    def consume(self, lease: Lease, successor: Successor | None = None) -> None:
        """The resume finished: persist ``successor`` (if it paused again), then consume."""
        if successor is not None:
            self._insert(successor.checkpoint_id, lease.run_id, lease.definition_hash,
                         successor.payload, successor.expires_at, lease)
            if os.environ.get(FAULT_ENV) == "after_successor":
                os.kill(os.getpid(), signal.SIGKILL)
        after = successor.checkpoint_id if successor is not None else None
        self._finish(lease, "consumed", "state='consumed', successor=?", (after,),
                     {"successor": after},
                     extra=("AND (? IS NULL OR EXISTS (SELECT 1 FROM checkpoints AS s "
                            "WHERE s.id=? AND s.predecessor=checkpoints.id))"),
                     extra_args=(after, after))

    def fail(self, lease: Lease, code: str) -> None:
        """The resume could not finish: leased -> failed, with a code from FAILURE_CODES."""
        if code not in FAILURE_CODES:
            raise EvalkitError(f"{code!r:.40} is not a checkpoint failure code; use one of "
                               f"{', '.join(FAILURE_CODES)}")
        self._finish(lease, "failed", "state='failed', failure_code=?", (code,),
                     {"failure_code": code}, allow_late=True)

    def reject(self, checkpoint_id: str, *, operator: str, reason_code: str,
               audit_ref: str | None = None) -> None:
        """An operator's no: pending -> rejected. The payload is dropped, never opened."""
        _text("operator", operator)
        if audit_ref is not None:
            _text("audit reference", audit_ref)
        if reason_code not in REJECT_CODES:
            raise EvalkitError(f"{reason_code!r:.40} is not a rejection code; use one of "
                               f"{', '.join(REJECT_CODES)}")
        with self._tx() as conn:
            now = self.clock()
            done = conn.execute(
                "UPDATE checkpoints SET state='rejected', reject_code=?, operator=?, "
                "audit_ref=?, envelope=NULL, closed_at=? WHERE id=? AND state='pending'",
                (reason_code, operator, audit_ref, now, checkpoint_id)).rowcount == 1
            row = conn.execute("SELECT state, run_id FROM checkpoints WHERE id=?",
                               (checkpoint_id,)).fetchone()
            if done:
                self._moved(checkpoint_id, row[1], "pending", "rejected", now,
                            reject_code=reason_code, operator=operator, audit_ref=audit_ref)
        if done:
            return
        if row is None:
            raise CheckpointRefused("unknown", f"there is no checkpoint {checkpoint_id}")
        raise CheckpointRefused("not_pending", f"checkpoint {checkpoint_id} is {row[0]}, "
                                "and only a pending checkpoint can be rejected")

    def expire_due(self) -> list[str]:
        """Pending past their expiry -> expired; leases past their deadline -> failed."""
        with self._tx() as conn:
            now = self.clock()
            rows = conn.execute(
                "SELECT id, run_id, state FROM checkpoints WHERE (state='pending' AND "
                "expires_at<=?) OR (state='leased' AND lease_deadline<=?) ORDER BY id",
                (now, now)).fetchall()
            for cid, run_id, state in rows:
                if state == "pending":
                    self._moved(cid, run_id, "pending", "expired", now)
                else:
                    self._moved(cid, run_id, "leased", "failed", now,
                                failure_code="lease_expired")
            conn.execute("UPDATE checkpoints SET state='expired', envelope=NULL, closed_at=? "
                         "WHERE state='pending' AND expires_at<=?", (now, now))
            conn.execute("UPDATE checkpoints SET state='failed', failure_code='lease_expired', "
                         "envelope=NULL, closed_at=? WHERE state='leased' AND lease_deadline<=?",
                         (now, now))
        return [row[0] for row in rows]

    def approve_and_resume(self, checkpoint_id: str, *, run_id: str, definition_hash: str,
                           operator: str, audit_ref: str, lease_seconds: float,
                           resume: Callable[[bytes | dict[str, Any]], Successor | None]) -> None:
        """The whole release, as a host runs it: lease, open, ``resume``, consume.

        ``resume`` gets the paused state and returns the checkpoint it paused at again,
        or None when it finished. Whatever it raises fails the lease with a code
        (``resume_failed``; ``operator_aborted`` on Ctrl-C) and is raised again: the
        checkpoint is never resumed a second time, since the first may have acted.
        """
        lease = self.approve_and_lease(checkpoint_id, run_id=run_id,
                                       definition_hash=definition_hash, operator=operator,
                                       audit_ref=audit_ref, lease_seconds=lease_seconds)
        payload = self.open(lease)
        try:
            successor = resume(payload)
        except BaseException as exc:
            code = "operator_aborted" if isinstance(exc, KeyboardInterrupt) else "resume_failed"
            with contextlib.suppress(CheckpointRefused):
                self.fail(lease, code)
            raise
        try:
            self.consume(lease, successor)
        except Exception:  # the successor could not be written; a lease that ran out is failed
            with contextlib.suppress(CheckpointRefused):
                self.fail(lease, "successor_failed")
            raise

    # -- reads --------------------------------------------------------------------------

    def get(self, checkpoint_id: str) -> Checkpoint | None:
        rows = self._select("WHERE id=?", (checkpoint_id,))
        return rows[0] if rows else None

    def list(self, state: str | None = None) -> list[Checkpoint]:
        if state is None:
            return self._select("ORDER BY created_at, id", ())
        return self._select("WHERE state=? ORDER BY created_at, id", (state,))

    # -- inside ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction; its transitions reach the observer once committed."""
        with self._lock:
            self._events = []
            try:
                with db.immediate(self._conn) as conn:
                    yield conn
            finally:
                events, self._events = self._events, []
        # Reached only when the transaction committed (an exception skips this).
        for event in events:
            if self.observer is not None:
                self.observer(event)

    def _moved(self, cid: str, run_id: str, before: str | None, after: str, at: float,
               **fields: Any) -> None:
        self._events.append({"event": "checkpoint_transition", "checkpoint_id": cid,
                             "run_id": run_id, "from": before, "to": after, "at": at,
                             **{k: v for k, v in fields.items() if v is not None}})

    def _select(self, where: str, args: tuple[Any, ...]) -> list[Checkpoint]:
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {', '.join(_COLUMNS)}, envelope IS NOT NULL FROM checkpoints {where}",
                args).fetchall()
        return [Checkpoint(*row[:-1], sealed=bool(row[-1])) for row in rows]

    def _insert(self, checkpoint_id: str, run_id: str, definition_hash: str,
                payload: bytes | dict[str, Any], expires_at: float | datetime,
                lease: Lease | None) -> None:
        for name, value in (("id", checkpoint_id), ("run id", run_id),
                            ("definition hash", definition_hash)):
            _text(name, value)
        expires = _seconds(expires_at)
        envelope = seal(self.keys, _frame(payload),
                        identity(checkpoint_id, run_id, definition_hash))
        with self._tx() as conn:
            now = self.clock()
            if expires <= now:
                raise EvalkitError(f"checkpoint {checkpoint_id} would expire before it is "
                                   "saved; give an expiry in the future")
            refusal = None if lease is None else self._lease_problem(conn, lease, now)
            before = conn.execute("SELECT predecessor FROM checkpoints WHERE id=?",
                                  (checkpoint_id,)).fetchone()
            if refusal is None and before is not None and (
                    lease is None or before[0] != lease.checkpoint_id):
                refusal = CheckpointRefused("exists", f"checkpoint {checkpoint_id} exists "
                                            "already; a checkpoint id is used once")
            if refusal is None and before is None:  # else: this lease's, from an earlier try
                conn.execute(
                    "INSERT INTO checkpoints (id, run_id, definition_hash, state, envelope, "
                    "kid, created_at, expires_at, predecessor) "
                    "VALUES (?,?,?,'pending',?,?,?,?,?)",
                    (checkpoint_id, run_id, definition_hash, envelope, envelope_kid(envelope),
                     now, expires, lease.checkpoint_id if lease is not None else None))
                self._moved(checkpoint_id, run_id, None, "pending", now, expires_at=expires,
                            predecessor=lease.checkpoint_id if lease is not None else None)
        if refusal is not None:
            raise refusal

    def _finish(self, lease: Lease, to: str, assign: str, args: tuple[Any, ...],
                fields: dict[str, Any], *,
                extra: str = "", extra_args: tuple[Any, ...] = (),
                allow_late: bool = False) -> None:
        """leased -> a terminal state, for the lease's holder, while live (or ``allow_late``)."""
        with self._tx() as conn:
            now = self.clock()
            late = "" if allow_late else "AND lease_deadline>? "
            done = conn.execute(
                f"UPDATE checkpoints SET {assign}, envelope=NULL, closed_at=? "
                f"WHERE id=? AND state='leased' AND lease_token=? {late}{extra}",
                (*args, now, lease.checkpoint_id, lease.token,
                 *(() if allow_late else (now,)), *extra_args)).rowcount == 1
            refusal = None if done else self._lease_problem(conn, lease, now)
            if done:
                self._moved(lease.checkpoint_id, lease.run_id, "leased", to, now, **fields)
        if not done:
            raise refusal or CheckpointRefused(
                "not_leased", f"checkpoint {lease.checkpoint_id}'s successor is not on "
                "record, so it was not consumed")

    def _check_live(self, lease: Lease) -> bytes:
        """The envelope, when ``lease`` is live now; else the refusal (a late lease fails)."""
        with self._tx() as conn:
            refusal = self._lease_problem(conn, lease, self.clock())
            row = conn.execute("SELECT envelope FROM checkpoints WHERE id=?",
                               (lease.checkpoint_id,)).fetchone()
        if refusal is not None:
            raise refusal
        return bytes(row[0])

    def _lease_problem(self, conn: sqlite3.Connection, lease: Lease,
                       now: float) -> CheckpointRefused | None:
        """Why ``lease`` is not live now, or None; a lease found past its deadline fails here."""
        row = conn.execute("SELECT state, lease_token, lease_deadline, run_id, definition_hash "
                           "FROM checkpoints WHERE id=?", (lease.checkpoint_id,)).fetchone()
        cid = lease.checkpoint_id
        if row is None:
            return CheckpointRefused("unknown", f"there is no checkpoint {cid}")
        state, token, deadline, run_id, definition_hash = row
        if state != "leased":
            return CheckpointRefused("not_leased", f"checkpoint {cid} is {state}, not leased")
        if not secrets.compare_digest(str(token), str(lease.token)) \
                or (run_id, definition_hash) != (lease.run_id, lease.definition_hash):
            return CheckpointRefused("lease_mismatch", f"checkpoint {cid} is leased, but not "
                                     "by this lease")
        if deadline <= now:
            conn.execute("UPDATE checkpoints SET state='failed', failure_code='lease_expired', "
                         "envelope=NULL, closed_at=? WHERE id=? AND state='leased'", (now, cid))
            self._moved(cid, run_id, "leased", "failed", now, failure_code="lease_expired")
            return CheckpointRefused("lease_expired", f"the lease on checkpoint {cid} ran out; "
                                     "the checkpoint is failed (lease_expired) and is never "
                                     "resumed again")
        return None

    def _why_not_leased(self, conn: sqlite3.Connection, cid: str, run_id: str,
                        definition_hash: str, now: float) -> CheckpointRefused:
        row = conn.execute("SELECT state, run_id, definition_hash, expires_at FROM checkpoints "
                           "WHERE id=?", (cid,)).fetchone()
        if row is None:
            return CheckpointRefused("unknown", f"there is no checkpoint {cid}")
        state, bound_run, bound_definition, expires = row
        if bound_run != run_id:
            return CheckpointRefused("run_mismatch", f"checkpoint {cid} belongs to another "
                                     "run; nothing was leased")
        if bound_definition != definition_hash:
            return CheckpointRefused("definition_mismatch", f"checkpoint {cid} was saved under "
                                     "another agent definition; nothing was leased")
        if state == "pending" and expires <= now:
            conn.execute("UPDATE checkpoints SET state='expired', envelope=NULL, closed_at=? "
                         "WHERE id=? AND state='pending'", (now, cid))
            self._moved(cid, bound_run, "pending", "expired", now)
            return CheckpointRefused("expired", f"checkpoint {cid} expired before it was "
                                     "approved; nothing was leased")
        return CheckpointRefused("not_pending", f"checkpoint {cid} is already {state}; only a "
                                 "pending checkpoint can be approved and leased")
