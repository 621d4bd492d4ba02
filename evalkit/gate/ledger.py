"""The action ledger: every governed tool call, its decision and its one execution.

Each action has an idempotency key (the caller's, or :func:`default_key` of run,
step and call index) and a digest — SHA-256 over RFC 8785 canonical JSON of the
tool, the exact arguments and the policy hash. The same key proposed again with
the same digest is the same action; with another digest it is a
:class:`LedgerConflict`.

States (a terminal state absorbs: any transition out of it raises)::

    proposed -> allowed | denied | held
    held     -> approved | denied | expired
    allowed | approved -> started            (the durable intent row, before the effect)
    started  -> completed | failed | outcome_unknown

**At most once, stated honestly.** :meth:`Ledger.start` is one conditional
UPDATE, committed with ``synchronous=FULL`` before the caller performs the side
effect; exactly one caller wins it and only the winner executes. A crash after
``started`` and before the terminal row leaves the effect unknown: it may or
may not have happened. :meth:`Ledger.recover` marks such an action
``outcome_unknown`` and it is never run again — except a tool the policy
declares ``idempotent`` (running it twice is harmless, so it returns to
``allowed``), or one a ``reconciler`` can settle by asking the outside world.
That is at-most-once execution, not exactly-once: exactly-once needs the tool's
own cooperation, and the ledger says which actions lack it.

Every change appends one row to ``events``, in the same transaction as the
change. Each row's ``hash`` is SHA-256 over the previous row's hash and the
row's canonical JSON; :meth:`Ledger.verify_chain` walks it and checks that
each action's state is the one its last event says. A row written into the
database by hand — an action moved to ``approved``, an event inserted or edited —
breaks the chain or disagrees with it, and :meth:`start` refuses such an action.
The chain has no secret: someone who can recompute it and write the file can
still forge; the file lives in the state folder, out of every mission's reach.

Holds carry a deadline fixed once, when the hold is created, from the injected
clock. An approval is an Ed25519-signed decision (``evalkit.gate.approval``)
naming the action's ``approval_id`` and its digest; anything else is refused
with one sentence and recorded, and an approval after the deadline expires the
action and is recorded as late — it never promotes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.gate import db
from evalkit.gate.approval import APPROVE, signed_problem
from evalkit.gate.owner import owner_alive, this_owner
from evalkit.gate.policy import ALLOWED as _ALLOWED_OUTCOME
from evalkit.gate.policy import DENIED as _DENIED_OUTCOME
from evalkit.gate.policy import HELD as _HELD_OUTCOME
from evalkit.gate.policy import Decision, Policy, decide
from evalkit.redact import redact_obj
from evalkit.store import signing

PROPOSED, ALLOWED, DENIED, HELD = "proposed", "allowed", "denied", "held"
APPROVED, EXPIRED, STARTED = "approved", "expired", "started"
COMPLETED, FAILED, OUTCOME_UNKNOWN = "completed", "failed", "outcome_unknown"
STATES = (PROPOSED, ALLOWED, DENIED, HELD, APPROVED, EXPIRED, STARTED, COMPLETED, FAILED,
          OUTCOME_UNKNOWN)
TERMINAL = frozenset({DENIED, EXPIRED, COMPLETED, FAILED, OUTCOME_UNKNOWN})
#: Which state may follow which (recovery's idempotent retry, started -> allowed, aside).
TRANSITIONS: dict[str, frozenset[str]] = {
    PROPOSED: frozenset({ALLOWED, DENIED, HELD}),
    HELD: frozenset({APPROVED, DENIED, EXPIRED}),
    ALLOWED: frozenset({STARTED}),
    APPROVED: frozenset({STARTED}),
    STARTED: frozenset({COMPLETED, FAILED, OUTCOME_UNKNOWN}),
}
#: Kinds an action takes on beyond the policy's (``evalkit.gate.policy.KINDS``).
KIND_APPROVED, KIND_DENIED_BY_APPROVER = "approved", "denied_by_approver"
#: Kinds only the built-in runtime's governor decides with (its profile, closed tool set,
#: ``--gate-tool`` and approval files are its policy).
KIND_OUTSIDE_CLOSED_SET, KIND_APPROVAL_INVALID = "outside_closed_set", "approval_invalid"
LEDGER_KINDS = (KIND_APPROVED, KIND_DENIED_BY_APPROVER, "denied_by_operator", "expired",
                "late_approval", "completed", "tool_error", "crashed", "recovered_idempotent",
                "reconciled", KIND_OUTSIDE_CLOSED_SET, KIND_APPROVAL_INVALID)
DEFAULT_HOLD_SECONDS = 3600.0
_GENESIS = "0" * 64

_SCHEMA = """
CREATE TABLE IF NOT EXISTS actions (
    key TEXT PRIMARY KEY, digest TEXT NOT NULL, tool TEXT NOT NULL,
    arguments TEXT NOT NULL, policy_hash TEXT NOT NULL, run_id TEXT,
    state TEXT NOT NULL, kind TEXT, reason TEXT, risk INTEGER, deadline REAL,
    approval_id TEXT, result TEXT, error TEXT, owner TEXT,
    attempts INTEGER NOT NULL DEFAULT 0, created REAL NOT NULL, updated REAL NOT NULL,
    head TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY, key TEXT NOT NULL, event TEXT NOT NULL, state TEXT,
    at REAL NOT NULL, body TEXT NOT NULL, prev TEXT NOT NULL, hash TEXT NOT NULL UNIQUE
);
CREATE INDEX IF NOT EXISTS events_key ON events (key, seq);
CREATE INDEX IF NOT EXISTS actions_state ON actions (state);
"""


class LedgerError(EvalkitError):
    """A ledger operation that cannot be done, said in one sentence."""


class LedgerConflict(LedgerError):
    """The same idempotency key proposed with another digest (other tool, arguments or policy)."""


class ApprovalRefused(LedgerError):
    """An approval that does not promote the action; the refusal is recorded as an event."""


@dataclass(frozen=True)
class Action:
    """One action as the ledger holds it (a snapshot; the ledger is the truth)."""

    key: str
    digest: str
    tool: str
    arguments: Any
    policy_hash: str
    run_id: str | None
    state: str
    kind: str | None
    reason: str | None
    risk: int | None
    deadline: float | None
    approval_id: str | None
    result: Any
    error: Any
    owner: Any
    attempts: int
    created: float
    updated: float

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


@dataclass(frozen=True)
class Event:
    """One row of the hash-chained event log."""

    seq: int
    key: str
    event: str
    state: str | None
    at: float
    body: Any
    prev: str
    hash: str


def default_key(run_id: str, step: int, call_index: int) -> str:
    """The idempotency key of a call when the caller gives none: run, step, call index."""
    return f"{run_id}:{int(step)}:{int(call_index)}"


def action_digest(tool: str, arguments: Any, policy_hash: str) -> str:
    """``sha256:`` and the hex SHA-256 of the RFC 8785 JSON of tool, arguments, policy hash."""
    return signing.digest({"tool": tool, "arguments": arguments, "policy_hash": policy_hash})


def _dumps(value: Any) -> str:
    """JSON for a column: ASCII, so a lone surrogate (a file name that is not UTF-8) is stored
    as its escape rather than failing SQLite's UTF-8 encoding."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      default=str)


def _text(value: str) -> str:
    """A name as a column can hold it: itself, or its JSON escape when it is not UTF-8."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value)[1:-1]
    return value


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def event_hash(prev: str, seq: int, key: str, event: str, state: str | None, at: float,
               body: str) -> str:
    """A row's link: SHA-256 of the previous link and the row's canonical JSON."""
    row = signing.canonical({"seq": seq, "key": key, "event": event, "state": state,
                             "at": repr(float(at)), "body": body})
    return hashlib.sha256(prev.encode("ascii") + b"\n" + row).hexdigest()


# -- the ledger -------------------------------------------------------------------------------


class Ledger:
    """The action ledger in the governance database (``evalkit.gate.db``)."""

    def __init__(self, path: Path | str | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path) if path is not None else db.default_path()
        self.clock = clock
        self.conn = db.connect(self.path, what="action ledger")
        self._lock = threading.RLock()
        self.conn.executescript(_SCHEMA)  # idempotent: every statement is IF NOT EXISTS

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading -----------------------------------------------------------------------------

    def get(self, key: str) -> Action | None:
        with self._lock:
            row = self.conn.execute(_SELECT + " WHERE key = ?", (key,)).fetchone()
        return None if row is None else _action(self.conn, row)

    def lookup(self, key: str) -> Action | None:
        """For replay: the recorded action (its result or error) by key. Never runs anything."""
        return self.get(key)

    def actions(self, *, run_id: str | None = None) -> list[Action]:
        sql, args = _SELECT, ()
        if run_id is not None:
            sql, args = sql + " WHERE run_id = ?", (run_id,)
        with self._lock:
            rows = self.conn.execute(sql + " ORDER BY created, key", args).fetchall()
        return [_action(self.conn, r) for r in rows]

    def events(self, key: str | None = None) -> list[Event]:
        sql, args = "SELECT seq, key, event, state, at, body, prev, hash FROM events", ()
        if key is not None:
            sql, args = sql + " WHERE key = ?", (key,)
        with self._lock:
            rows = self.conn.execute(sql + " ORDER BY seq", args).fetchall()
        return [Event(r[0], r[1], r[2], r[3], r[4], _loads(r[5]), r[6], r[7]) for r in rows]

    def wait(self, key: str, timeout: float, *, poll: float = 0.02) -> Action | None:
        """The action once it is terminal, waiting at most ``timeout`` seconds (real time)."""
        end = time.monotonic() + timeout
        while True:
            action = self.get(key)
            if action is None or action.terminal or time.monotonic() >= end:
                return action
            time.sleep(poll)

    # -- proposing and deciding ----------------------------------------------------------------

    def propose(self, key: str, tool: str, arguments: Any, *, policy_hash: str,
                run_id: str | None = None) -> Action:
        """Record a proposed call, or return the same key's action when it is the same call."""
        if not isinstance(key, str) or not key or _text(key) != key:
            raise LedgerError("an idempotency key is a non-empty string of UTF-8 text")
        digest = action_digest(tool, arguments, policy_hash)
        with self._write() as conn:
            row = conn.execute("SELECT digest FROM actions WHERE key = ?", (key,)).fetchone()
            if row is not None:
                if row[0] != digest:
                    raise LedgerConflict(
                        f"idempotency key {key!r} was proposed for another call (digest "
                        f"{row[0]}, not {digest}): a key names one tool, arguments and policy")
            else:
                now = self.clock()
                shown = redact_obj(arguments)
                body = {"tool": tool, "arguments": shown, "digest": digest,
                        "policy_hash": policy_hash, "run_id": run_id}
                head = self._append(conn, key, "proposed", PROPOSED, body, now)
                conn.execute(
                    "INSERT INTO actions (key, digest, tool, arguments, policy_hash, run_id, "
                    "state, created, updated, head) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (key, digest, _text(tool), _dumps(shown), policy_hash, run_id, PROPOSED,
                     now, now, head))
        return self._must(key)

    def decide(self, key: str, decision: Decision) -> Action:
        """Apply the policy's decision to a proposed action (idempotent for the same one)."""
        target = {_ALLOWED_OUTCOME: ALLOWED, _DENIED_OUTCOME: DENIED,
                  _HELD_OUTCOME: HELD}.get(decision.outcome)
        if target is None:
            raise LedgerError(f"a decision's outcome is allowed, denied or held, not "
                              f"{decision.outcome!r}")
        with self._write() as conn:
            action = self._row(conn, key)
            if action.state != PROPOSED:
                return action  # decided already (by a concurrent caller): the first stands
            if decision.policy_hash != action.policy_hash:
                raise LedgerError(f"action {key} was proposed under policy "
                                  f"{action.policy_hash}; a decision by {decision.policy_hash} "
                                  "does not apply")
            now = self.clock()
            fields: dict[str, Any] = {"kind": decision.kind, "reason": decision.reason,
                                      "risk": decision.risk}
            if target == HELD:
                hold = decision.hold_seconds if decision.hold_seconds is not None \
                    else DEFAULT_HOLD_SECONDS
                fields.update(deadline=now + float(hold),
                              approval_id=f"ap_{secrets.token_hex(8)}")
            self._move(conn, action, target, "decided",
                       {"decision": decision.as_dict(), **fields}, now, fields)
        return self._must(key)

    # -- approvals ---------------------------------------------------------------------------

    def approve(self, key: str, record: Mapping[str, Any], *, trust: signing.Trust) -> Action:
        """Apply a signed decision (approve or deny) to a held action.

        ``record`` is the decision itself, or an approval record carrying it under
        ``decision``. Anything but a trusted signature over this action's approval id
        and digest, in time, is refused (:class:`ApprovalRefused`), recorded, and
        changes nothing — except that a late one expires the hold.
        """
        decision = record.get("decision", record) if isinstance(record, Mapping) else record
        refusal: str | None = None
        with self._write() as conn:
            action = self._row(conn, key)
            now = self.clock()
            shown = decision if isinstance(decision, Mapping) else repr(decision)
            if action.state != HELD:
                refusal = (f"action {key} is {action.state}, not held: a decision on it "
                           "changes nothing")
            else:
                refusal = signed_problem(decision, approval_id=action.approval_id,
                                         digest=action.digest, trust=trust)
            if refusal is None and action.deadline is not None and now >= action.deadline:
                refusal = (f"the approval of action {key} came after its deadline; the hold "
                           "expired and a late approval never promotes")
                self._move(conn, action, EXPIRED, "late_approval",
                           {"decision": shown, "why": refusal}, now,
                           {"kind": "late_approval", "reason": refusal})
            elif refusal is None:
                yes = decision["verdict"] == APPROVE
                why = (f"{'approved' if yes else 'denied'} by {decision.get('decided_by')} "
                       f"(key {decision.get('key_id')})")
                kind = KIND_APPROVED if yes else KIND_DENIED_BY_APPROVER
                self._move(conn, action, APPROVED if yes else DENIED, "decision",
                           {"decision": dict(decision)}, now, {"kind": kind, "reason": why})
            else:
                self._append(conn, key, "approval_refused", action.state,
                             {"decision": shown, "why": refusal}, now, touch=True)
        if refusal is not None:
            raise ApprovalRefused(refusal)
        return self._must(key)

    def deny(self, key: str, *, by: str, reason: str) -> Action:
        """An operator denies a proposed or held action."""
        with self._write() as conn:
            action = self._row(conn, key)
            if action.state not in (PROPOSED, HELD):
                raise LedgerError(f"action {key} is {action.state}; only a proposed or held "
                                  "action is denied")
            why = f"denied by {by}: {reason}"
            self._move(conn, action, DENIED, "denied", {"by": by, "reason": reason},
                       self.clock(), {"kind": "denied_by_operator", "reason": why})
        return self._must(key)

    def expire_due(self) -> list[Action]:
        """Every hold whose deadline has passed (by the injected clock) becomes expired."""
        with self._write() as conn:
            now = self.clock()
            keys = [r[0] for r in conn.execute(
                "SELECT key FROM actions WHERE state = ? AND deadline <= ? ORDER BY key",
                (HELD, now))]
            for key in keys:
                self._move(conn, self._row(conn, key), EXPIRED, "expired", {"at": now}, now,
                           {"kind": "expired", "reason": "the hold's deadline passed with "
                            "no decision"})
        return [self._must(k) for k in keys]

    # -- executing ---------------------------------------------------------------------------

    def start(self, key: str, *, owner: Mapping[str, Any] | None = None) -> Action | None:
        """Win the right to execute: allowed|approved -> started, committed before the effect.

        Returns the action when this caller won; None when it is not executable by
        anyone now (already started or finished, or not allowed) — read :meth:`get`.
        A row whose state the event chain does not back is refused outright.
        """
        who = dict(owner) if owner is not None else this_owner()
        with self._write() as conn:
            action = self._row(conn, key)
            if action.state not in (ALLOWED, APPROVED):
                return None
            problem = self._backed(conn, key)
            if problem is not None:
                raise LedgerError(f"action {key} is not what its recorded events say "
                                  f"({problem}); it will not be executed")
            now = self.clock()
            cursor = conn.execute(
                "UPDATE actions SET state = ?, owner = ?, attempts = attempts + 1, updated = ? "
                "WHERE key = ? AND state IN (?, ?)",
                (STARTED, _dumps(who), now, key, ALLOWED, APPROVED))
            if cursor.rowcount != 1:
                return None
            head = self._append(conn, key, "started", STARTED, {"owner": who}, now)
            conn.execute("UPDATE actions SET head = ? WHERE key = ?", (head, key))
        return self._must(key)

    def complete(self, key: str, result: Any) -> Action:
        """Record what the body returned — redacted, like the arguments: the ledger is a
        durable store, and a credential a tool handled must not outlive the call in it."""
        result = redact_obj(result)
        with self._write() as conn:
            action = self._row(conn, key)
            self._move(conn, action, COMPLETED, "completed", {"result": result},
                       self.clock(), {"kind": "completed", "result": _dumps(result)})
        return self._must(key)

    def fail(self, key: str, error: Any, *, kind: str = "tool_error") -> Action:
        error = redact_obj(error)
        with self._write() as conn:
            action = self._row(conn, key)
            self._move(conn, action, FAILED, "failed", {"error": error, "kind": kind},
                       self.clock(), {"kind": kind, "error": _dumps(error)})
        return self._must(key)

    def unknown(self, key: str, why: str) -> Action:
        """A started action whose effect cannot be known (its executor stopped answering):
        ``outcome_unknown``, never run again — the same end a dead owner's action gets."""
        with self._write() as conn:
            action = self._row(conn, key)
            self._move(conn, action, OUTCOME_UNKNOWN, "unknown", {"reason": why},
                       self.clock(), {"kind": "unanswered", "reason": why})
        return self._must(key)

    def recover(self, *, all_owners: bool = False, policy: Policy | None = None,
                reconciler: Callable[[Action], tuple[str, Any] | None] | None = None
                ) -> list[Action]:
        """Settle started actions whose owner is dead (every one, with ``all_owners``).

        Each becomes ``outcome_unknown`` and is never run again, unless ``reconciler``
        settles it (returning ``("completed", result)`` or ``("failed", error)``) or
        ``policy`` — the same policy the action was decided under — declares its tool
        idempotent, when it returns to ``allowed`` to be started again.
        """
        recovered = []
        with self._lock:
            started = self.conn.execute("SELECT key FROM actions WHERE state = ? ORDER BY key",
                                        (STARTED,)).fetchall()
        for row in started:
            action = self.get(row[0])
            if action is None or action.state != STARTED:
                continue
            if not all_owners and owner_alive(action.owner):
                continue
            settled = reconciler(action) if reconciler is not None else None
            with self._write() as conn:
                current = self._row(conn, action.key)
                if current.state != STARTED or current.owner != action.owner:
                    continue
                now = self.clock()
                contract = policy.contract(current.tool) if policy is not None else None
                if settled is not None and settled[0] in (COMPLETED, FAILED):
                    state, value = settled[0], redact_obj(settled[1])
                    column = "result" if state == COMPLETED else "error"
                    self._move(conn, current, state, "reconciled", {column: value}, now,
                               {"kind": "reconciled", column: _dumps(value)})
                elif contract is not None and contract.idempotent \
                        and policy is not None and policy.hash == current.policy_hash:
                    self._move(conn, current, ALLOWED, "recovered", {"owner": current.owner},
                               now, {"kind": "recovered_idempotent", "owner": None,
                                     "reason": "its owner died; the tool is idempotent, so "
                                     "it may run again"}, force=True)
                else:
                    self._move(conn, current, OUTCOME_UNKNOWN, "recovered",
                               {"owner": current.owner}, now,
                               {"kind": "crashed", "reason": "its owner died after starting "
                                "it; whether the effect happened is unknown, and it is never "
                                "run again"})
            recovered.append(self._must(action.key))
        return recovered

    # -- the chain ---------------------------------------------------------------------------

    def verify_chain(self) -> tuple[bool, int, str | None]:
        """(ok, the last sequence number that verified, the first problem or None).

        Checks every link, that sequence numbers have no gaps, and that each action's
        state and head are the ones its last event says.
        """
        with self._lock:
            return self._verify_chain()

    def _verify_chain(self) -> tuple[bool, int, str | None]:
        prev, last = _GENESIS, 0
        heads: dict[str, tuple[str, str | None]] = {}
        for ev in self.conn.execute(
                "SELECT seq, key, event, state, at, body, prev, hash FROM events ORDER BY seq"):
            seq, key, event, state, at, body, stored_prev, stored = ev
            if seq != last + 1:
                return False, last, f"event {last + 1} is missing (next is {seq})"
            if stored_prev != prev or event_hash(prev, seq, key, event, state, at,
                                                 body) != stored:
                return False, last, f"event {seq} ({event} of {key}) does not chain"
            prev, last = stored, seq
            heads[key] = (stored, state)
        for row in self.conn.execute(f"SELECT key, state, head, {_FACTS} FROM actions"):
            key, state, head = row[:3]
            if heads.get(key) != (head, state):
                return False, last, (f"action {key} says {state}, which its recorded events "
                                     "do not")
            edited = _edited_column(row[3:], self.conn.execute(
                "SELECT event, body FROM events WHERE key = ? ORDER BY seq", (key,)))
            if edited is not None:
                return False, last, f"action {key}: {edited}"
        return True, last, None

    # -- internals ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; threads sharing this ledger take turns (one connection)."""
        with self._lock, db.immediate(self.conn) as conn:
            yield conn

    def _must(self, key: str) -> Action:
        action = self.get(key)
        if action is None:
            raise LedgerError(f"no action with key {key!r} in {self.path}")
        return action

    def _row(self, conn: sqlite3.Connection, key: str) -> Action:
        row = conn.execute(_SELECT + " WHERE key = ?", (key,)).fetchone()
        if row is None:
            raise LedgerError(f"no action with key {key!r} in {self.path}")
        return _action(conn, row)

    def _backed(self, conn: sqlite3.Connection, key: str) -> str | None:
        """Why the action's row disagrees with its own chained events (None: it agrees)."""
        head, state = conn.execute("SELECT head, state FROM actions WHERE key = ?",
                                   (key,)).fetchone()
        rows = conn.execute("SELECT seq, key, event, state, at, body, prev, hash FROM events "
                            "WHERE key = ? ORDER BY seq", (key,)).fetchall()
        if not rows:
            return "no event records it"
        for seq, k, event, st, at, body, prev, stored in rows:
            if event_hash(prev, seq, k, event, st, at, body) != stored:
                return f"event {seq} does not hash"
            before = conn.execute("SELECT hash FROM events WHERE seq = ?", (seq - 1,)).fetchone()
            if (before[0] if before else _GENESIS) != prev:
                return f"event {seq} does not follow event {seq - 1}"
        last = rows[-1]
        if last[7] != head or last[3] != state:
            return f"its last event says {last[3]}, the row says {state}"
        facts = conn.execute(f"SELECT {_FACTS} FROM actions WHERE key = ?", (key,)).fetchone()
        edited = _edited_column(facts, ((r[2], r[5]) for r in rows))
        if edited is not None:
            return edited
        if state == APPROVED and not any(r[2] == "decision" and r[3] == APPROVED for r in rows):
            return "it is approved without a signed decision"
        return None

    def _append(self, conn: sqlite3.Connection, key: str, event: str, state: str | None,
                body: Any, at: float, *, touch: bool = False) -> str:
        """Add one chained event (inside the caller's transaction); returns its hash."""
        row = conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
        seq, prev = (row[0] + 1, row[1]) if row else (1, _GENESIS)
        text = _dumps(body)
        link = event_hash(prev, seq, key, event, state, at, text)
        conn.execute("INSERT INTO events (seq, key, event, state, at, body, prev, hash) "
                     "VALUES (?,?,?,?,?,?,?,?)", (seq, key, event, state, at, text, prev, link))
        if touch:
            conn.execute("UPDATE actions SET head = ?, updated = ? WHERE key = ?",
                         (link, at, key))
        return link

    def _move(self, conn: sqlite3.Connection, action: Action, state: str, event: str,
              body: Any, at: float, fields: Mapping[str, Any], *, force: bool = False) -> None:
        if not force and state not in TRANSITIONS.get(action.state, frozenset()):
            raise LedgerError(f"action {action.key} is {action.state}"
                              f"{' (final)' if action.state in TERMINAL else ''}; it cannot "
                              f"become {state}")
        head = self._append(conn, action.key, event, state, body, at)
        columns = {**fields, "state": state, "updated": at, "head": head}
        columns = {k: (_dumps(v) if k == "owner" and v is not None else v)
                   for k, v in columns.items()}
        sets = ", ".join(f"{name} = ?" for name in columns)
        conn.execute(f"UPDATE actions SET {sets} WHERE key = ? AND state = ?",
                     (*columns.values(), action.key, action.state))


_COLUMNS = ("key", "digest", "tool", "arguments", "policy_hash", "run_id", "state", "kind",
            "reason", "risk", "deadline", "approval_id", "result", "error", "owner",
            "attempts", "created", "updated", "head")
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM actions"


#: The columns an action's events say outright; a row must agree with them (a column edited
#: by hand, with the chain left alone, is caught by ``verify_chain`` and refused by ``start``).
_FACT_COLUMNS = ("digest", "tool", "arguments", "policy_hash", "run_id", "deadline",
                 "approval_id", "result", "error")
_FACTS = ", ".join(_FACT_COLUMNS)


def _edited_column(row: Iterable[Any], events: Iterable[tuple[str, str]]) -> str | None:
    """Which fact column disagrees with the action's own events (None: every one agrees)."""
    said: dict[str, Any] = dict.fromkeys(_FACT_COLUMNS)
    for event, text in events:
        body = _loads(text)
        if not isinstance(body, dict):
            continue
        if event == "proposed":
            said.update(digest=body.get("digest"), tool=_text(str(body.get("tool"))),
                        arguments=_dumps(body.get("arguments")),
                        policy_hash=body.get("policy_hash"), run_id=body.get("run_id"))
        elif event == "decided":
            said.update(deadline=body.get("deadline"), approval_id=body.get("approval_id"))
        elif event in ("completed", "failed", "reconciled"):
            for column in ("result", "error"):
                if column in body:
                    said[column] = _dumps(body[column])
    for column, value in zip(_FACT_COLUMNS, row, strict=True):
        if value != said[column]:
            return f"its {column} is not the one its recorded events say"
    return None


def _action(conn: sqlite3.Connection, row: tuple[Any, ...]) -> Action:
    data = dict(zip(_COLUMNS, row, strict=True))
    for name in ("arguments", "result", "error", "owner"):
        data[name] = _loads(data[name])
    data.pop("head")
    return Action(**data)


def govern(book: Ledger, key: str, tool: str, arguments: Any, policy: Policy,
           call: Callable[[], Any], *, run_id: str | None = None,
           granted_scopes: Iterable[str] | None = None, wait: float = 10.0) -> Action:
    """Propose, decide, and — when allowed or approved — run ``call`` at most once.

    The action as it ends up: completed or failed by this caller or another one
    (waited for at most ``wait`` seconds), or held, denied, expired or
    ``outcome_unknown`` without running anything. ``call`` raising an ``Exception``
    is the tool failing (recorded ``failed``); anything else escaping leaves the
    action started, for :meth:`Ledger.recover` to settle.
    """
    action = book.propose(key, tool, arguments, policy_hash=policy.hash, run_id=run_id)
    if action.state == PROPOSED:
        action = book.decide(key, decide(policy, tool, arguments,
                                         granted_scopes=granted_scopes))
    if action.state not in (ALLOWED, APPROVED):
        return book.wait(key, wait) if action.state == STARTED else action
    if book.start(key) is None:
        return book.wait(key, wait) or action
    try:
        result = call()
    except Exception as exc:
        return book.fail(key, f"{type(exc).__name__}: {exc}")
    return book.complete(key, result)

