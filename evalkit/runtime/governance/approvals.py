"""Durable approval requests: one JSON file per gated call, ``ap_<16 hex>.json``.

A mission that reaches a gated tool writes a *pending* request here (tool,
arguments, objective, the run that asked) and ends ``awaiting_approval``. A
person decides it from outside (``evalkit approvals approve|refuse``), and a
later mission started with ``--approval ID`` may then make exactly that call,
once: the request is *spent* the moment the call is dispatched.

What the runtime itself may write is deliberately narrow: it creates pending
requests, spends decided ones, records a refusal, and marks requests whose
run is gone as abandoned. Moving a request to approved is the decision
command's job alone (``evalkit.commands.approvals``); nothing in this module,
or anywhere under ``evalkit.runtime``, writes that state — a test reads the
source to prove it. A ``gate_decision`` that says yes over ``--control`` goes
from pending straight to spent, signed by the person who sent it.

The file's ``state`` is not what lets a call through: a request carries the
digest of what was asked (``request_digest``), and a yes is a *decision*
signed with the state folder's Ed25519 key naming that digest. Before a call
runs, the runtime checks the signature against the keys it trusts and the
digest against the call in hand (``decision_problem``); a record rewritten on
disk — to approved, to another decider, to other arguments — is refused.

Every write happens under an exclusive ``flock`` on the folder's lock file,
re-reads the record first (so a request is decided once, and spent once,
whatever races), is redacted, and replaces the file atomically.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.gate.approval import decision_body, decision_problem, request_digest
from evalkit.redact import redact_obj
from evalkit.runtime.governance.audit import beside_runs
from evalkit.store.replace import replace_file
from evalkit.store.runstore import now_iso
from evalkit.store.sink import json_bytes
from evalkit.store.state import APPROVALS

#: The decision checks live in evalkit.gate.approval (one owner); named here for old callers.
__all__ = ["ApprovalStore", "GateNotice", "approvals_root", "decision_body", "decision_problem",
           "is_approval_id", "new_approval_id", "request_digest"]

APPROVALS_ENV = "EVALKIT_APPROVALS"
OFF = ("none", "off")
LOCK_NAME = ".lock"

_ID = re.compile(r"ap_[0-9a-f]{16}")
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def approvals_root(environ: Mapping[str, str] | None = None) -> Path | None:
    """Where approval requests live, or None when ``EVALKIT_APPROVALS`` silences them."""
    env = os.environ if environ is None else environ
    value = env.get(APPROVALS_ENV)
    if value is None or value == "":
        return beside_runs(env, APPROVALS)
    if value.strip().lower() in OFF:
        return None
    return Path(value)


def new_approval_id() -> str:
    """``ap_`` and 16 random hex digits."""
    return f"ap_{secrets.token_hex(8)}"


def is_approval_id(text: Any) -> bool:
    return isinstance(text, str) and bool(_ID.fullmatch(text))


def canonical(arguments: Any) -> str:
    """How two calls' arguments are compared: redacted, then canonical JSON."""
    return json.dumps(redact_obj(arguments), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)


class ApprovalStore:
    """The folder of approval requests."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).absolute()

    # -- reading ---------------------------------------------------------------------------

    def path_of(self, approval_id: str) -> Path:
        if not is_approval_id(approval_id):
            raise EvalkitError(f"{approval_id!r} is not an approval id (ap_ and 16 hex digits)")
        return self.root / f"{approval_id}.json"

    def get(self, approval_id: str) -> dict[str, Any]:
        """One request; an unknown id is "no such approval request"."""
        path = self.path_of(approval_id)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise EvalkitError(f"no such approval request: {approval_id} (in {self.root})"
                               ) from None
        except (OSError, ValueError) as exc:
            raise EvalkitError(f"cannot read {path}: {exc}") from None
        if not isinstance(data, dict) or data.get("id") != approval_id:
            raise EvalkitError(f"{path} is not an approval request")
        return data

    def list(self) -> list[dict[str, Any]]:
        """Every readable request, oldest first."""
        if not self.root.is_dir():
            return []
        found = []
        for path in sorted(self.root.glob("ap_*.json")):
            if not is_approval_id(path.stem):
                continue
            try:
                found.append(self.get(path.stem))
            except EvalkitError:
                continue
        return sorted(found, key=lambda r: (str(r.get("created_at")), r["id"]))

    # -- writing ---------------------------------------------------------------------------

    def ensure(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EvalkitError(f"cannot create the approvals folder {self.root}: "
                               f"{exc.strerror or exc} (EVALKIT_APPROVALS moves it; off "
                               "silences it)") from None

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """An exclusive lock over the whole folder (every write holds it)."""
        self.ensure()
        fd = os.open(self.root / LOCK_NAME, os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _put(self, record: dict[str, Any]) -> dict[str, Any]:
        clean = redact_obj(record)
        data = json_bytes(clean, indent=2, sort_keys=False) + b"\n"
        try:
            replace_file(self.path_of(clean["id"]), data, fsync=True)
        except OSError as exc:
            raise EvalkitError(f"cannot write approval {clean['id']}: {exc.strerror or exc}"
                               ) from None
        return clean

    def update(self, approval_id: str,
               change: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        """Re-read under the lock, apply ``change`` (which may raise to refuse), write whole."""
        with self.locked():
            record = self.get(approval_id)
            changed = change(dict(record))
            changed["updated_at"] = now_iso()
            return self._put(changed)

    def request(self, *, tool: str, arguments: Mapping[str, Any], objective: str,
                run_id: str | None, runs_root: Path | None, index: int, reason: str,
                approval_id: str | None = None) -> dict[str, Any]:
        """Write a new pending request; returns it as stored (redacted)."""
        now = now_iso()
        record = {
            "id": approval_id or new_approval_id(), "state": "pending", "tool": tool,
            "arguments": dict(arguments), "digest": request_digest(tool, dict(arguments)),
            "objective": objective, "run_id": run_id,
            "runs_root": str(Path(runs_root).absolute()) if runs_root is not None else None,
            "index": index, "reason": reason, "created_at": now, "updated_at": now,
            "decided_by": None, "decided_at": None, "note": None,
        }
        with self.locked():
            return self._put(record)

    def refuse(self, approval_id: str, *, decided_by: str, note: str | None = None,
               via: str | None = None) -> dict[str, Any]:
        """A person said no (pending -> refused)."""
        who = signer(decided_by)

        def change(record: dict[str, Any]) -> dict[str, Any]:
            must_be_pending(record)
            record.update(state="refused", decided_by=who, decided_at=now_iso(), note=note)
            if via:
                record["decided_via"] = via
            return record

        return self.update(approval_id, change)

    def spend(self, approval_id: str, *, run_id: str | None, tool: str,
              arguments: Mapping[str, Any], decided_by: str | None = None,
              note: str | None = None, via: str | None = None) -> dict[str, Any]:
        """The decided call is being dispatched now: mark the request spent, exactly once.

        Without ``decided_by`` the request must already carry a person's yes.
        With it (a ``gate_decision`` over ``--control``), a pending request is
        decided and spent in one step, signed by that person.
        """
        who = signer(decided_by) if decided_by is not None else None

        def change(record: dict[str, Any]) -> dict[str, Any]:
            if record.get("tool") != tool or canonical(record.get("arguments")) != canonical(
                    arguments):
                raise EvalkitError(f"approval {approval_id} is for {record.get('tool')} with "
                                   "other arguments; it does not cover this call")
            if who is not None:
                must_be_pending(record)
                record.update(decided_by=who, decided_at=now_iso(), note=note)
                if via:
                    record["decided_via"] = via
            elif record.get("state") != "approved":
                raise EvalkitError(unusable(record))
            else:
                problem = decision_problem(record, tool=tool, arguments=arguments)
                if problem is not None:
                    raise EvalkitError(problem)
            record.update(state="spent", spent_by=run_id, spent_at=now_iso())
            return record

        return self.update(approval_id, change)

    def abandon(self, approval_id: str, why: str) -> dict[str, Any] | None:
        """Mark a still-pending request abandoned; None when it was decided meanwhile."""
        def change(record: dict[str, Any]) -> dict[str, Any]:
            if record.get("state") != "pending":
                raise _Skip()
            record.update(state="abandoned", abandoned_at=now_iso(), abandoned_why=why)
            return record

        try:
            return self.update(approval_id, change)
        except _Skip:
            return None

    def reconcile(self) -> list[str]:
        """Mark every pending request whose run is gone abandoned; returns their ids.

        A run is gone when its directory no longer exists, or when nothing
        holds it and it did not end ``awaiting_approval`` (it crashed, was
        killed, or finished some other way). A request whose run was not
        recorded cannot be judged and stays pending.
        """
        abandoned = []
        for record in self.list():
            if record.get("state") != "pending":
                continue
            why = _gone(record)
            if why and self.abandon(record["id"], why) is not None:
                abandoned.append(record["id"])
        return abandoned


class _Skip(Exception):
    pass


def signer(decided_by: str | None) -> str:
    if not isinstance(decided_by, str) or not decided_by.strip():
        raise EvalkitError("a decision signed by nobody is refused: say who decides "
                           "(--decided-by NAME)")
    return decided_by.strip()


def must_be_pending(record: Mapping[str, Any]) -> None:
    if record.get("state") != "pending":
        by = f" by {record['decided_by']}" if record.get("decided_by") else ""
        raise EvalkitError(f"approval {record.get('id')} is already {record.get('state')}{by}; "
                           "a request is decided once")


def unusable(record: Mapping[str, Any]) -> str:
    """Why ``--approval`` cannot use this request (it is not in the decided-yes state)."""
    approval_id, state = record.get("id"), record.get("state")
    if state == "pending":
        return (f"approval {approval_id} has not been decided yet: decide it with "
                f"evalkit approvals approve {approval_id} --decided-by NAME")
    if state == "refused":
        return f"approval {approval_id} was refused by {record.get('decided_by')}"
    if state == "spent":
        return (f"approval {approval_id} was already spent by run {record.get('spent_by')}; "
                "an approval admits one run — ask again")
    if state == "abandoned":
        return f"approval {approval_id} was abandoned ({record.get('abandoned_why')})"
    return f"approval {approval_id} is in state {state!r} and cannot be used"


def _gone(record: Mapping[str, Any]) -> str | None:
    """Why a pending request's run is gone, or None while it may still be standing."""
    from evalkit.store import layout
    from evalkit.store.runstore import RunStore

    run_id, root = record.get("run_id"), record.get("runs_root")
    if not run_id or not root or not layout.is_run_id(run_id):
        return None
    store = RunStore(Path(root))
    path = Path(root) / run_id
    if not path.is_dir():
        return f"run {run_id} no longer exists"
    try:
        if store.is_live(run_id):
            return None
        meta = json.loads((path / layout.META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, EvalkitError):
        return None
    outcome = meta.get("meta", {}).get("outcome") if isinstance(meta, dict) else None
    if outcome == "awaiting_approval":
        return None
    if outcome is None:
        return f"run {run_id} died without finishing"
    return f"run {run_id} ended {outcome}"


class GateNotice:
    """An observer that tells a person watching how to decide a gate the run stopped at."""

    def __init__(self, inner: Callable[[dict[str, Any]], None]) -> None:
        self.inner = inner
        self.out = getattr(inner, "out", None)

    def __call__(self, record: dict[str, Any]) -> None:
        self.inner(record)
        if record.get("event") == "gate_requested" and self.out is not None:
            approval_id = record.get("approval_id")
            print(f"[step {record.get('index')}] waiting on a person: {record.get('tool')} "
                  f"is gated; approval {approval_id} — decide it with: evalkit approvals approve "
                  f"{approval_id} --decided-by NAME (or refuse), then run again with "
                  f"--approval {approval_id}", file=self.out, flush=True)
