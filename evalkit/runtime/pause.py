"""A mission paused at a gate, kept as a leased approval checkpoint.

When a recorded run with the action ledger ends ``awaiting_approval``, what a
resume is bound to is saved as a pending checkpoint (``evalkit.gate.checkpoints``)
in the ledger's database: its id is the approval id, its run the run id, its
definition hash the digest of what defines the agent (``definition_hash``), and
its sealed payload the pending call (tool, call digest), the approval id and the
last seq on record. ``evalkit mission --resume RUN --approval ID`` then leases
that checkpoint (one winner, bound to run and definition), opens it, checks it
against the recording and the approval, runs, and consumes it — with the next
pause as its successor when the resumed run stops at another gate. Why: the
approved call must not run twice, and a resume that was started, or failed, or
refused, or that came too late must not be started again.

A run with no checkpoint (recorded before this existed, or with
``EVALKIT_LEDGER=off``) resumes as it always has.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.errors import EvalkitError
from evalkit.gate.checkpoints import (
    MAX_LEASE_SECONDS,
    CheckpointRefused,
    CheckpointStore,
    Lease,
    Successor,
)
from evalkit.store.signing import digest

if TYPE_CHECKING:
    from evalkit.runtime.mission import MissionSettings
    from evalkit.runtime.resume import ResumePoint
    from evalkit.runtime.run import RunOutcome

#: How long a paused run's checkpoint waits for its resume (approvals have no lifetime).
PAUSE_SECONDS = 7 * 24 * 3600
#: Headroom a lease gets beyond ``--mission-seconds`` (tool plane start, recording, closing).
LEASE_MARGIN_SECONDS = 600
PAYLOAD_VERSION = 1


def definition_hash(settings: MissionSettings) -> str:
    """The digest of what defines the agent: a resume under another definition is refused.

    Model, provider, protocol, profile, grants, gates, MCP servers and scopes as the
    run was configured, and each skill manifest by path *and content*, so an edited
    SKILL.md between the pause and the resume is a different agent.
    """
    return digest({"agent_definition": {
        "provider": settings.provider, "model": settings.model,
        "protocol": settings.protocol, "profile": settings.profile,
        "grants": sorted(settings.grants), "gate_tools": sorted(settings.gate_tools),
        "mcp_stdio": list(settings.mcp_stdio), "mcp_scopes": sorted(settings.mcp_scopes),
        "skills": [[str(path), _file_digest(path)] for path in settings.skills]}})


def _file_digest(path: str) -> str | None:
    try:
        return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def lease_seconds(settings: MissionSettings) -> float:
    """The resume's time bound plus headroom; without one, the longest lease the store grants."""
    if settings.seconds:
        return min(MAX_LEASE_SECONDS, settings.seconds + LEASE_MARGIN_SECONDS)
    return MAX_LEASE_SECONDS


class Pauses:
    """The checkpoints of paused missions, in the action ledger's database."""

    def __init__(self, path: Path, environ: Mapping[str, str],
                 clock: Callable[[], float] = time.time) -> None:
        self.store = CheckpointStore(path, environ=environ, clock=clock)
        self.clock = clock

    def close(self) -> None:
        self.store.close()

    # -- the resume ------------------------------------------------------------------------

    def take(self, settings: MissionSettings, point: ResumePoint,
             approval: Mapping[str, Any]) -> Lease | None:
        """Lease and check the checkpoint this resume's approval names; None: there is none.

        Refused in one sentence when it cannot be leased (another resume holds or
        held it, it expired, was rejected, belongs to another run or agent
        definition) or when the recording moved on since the pause (the lease then
        fails ``state_invalid``).
        """
        approval_id = str(approval.get("id"))
        if self.store.get(approval_id) is None:
            return None
        run_id = point.writer.run_id
        try:
            lease = self.store.approve_and_lease(
                approval_id, run_id=run_id, definition_hash=definition_hash(settings),
                operator=str(approval.get("decided_by") or "unknown"), audit_ref=approval_id,
                lease_seconds=lease_seconds(settings))
        except CheckpointRefused as exc:
            raise EvalkitError(_refusal(run_id, approval_id, exc, self._state(approval_id))) \
                from None
        try:
            payload = self.store.open(lease)
        except CheckpointRefused as exc:
            raise EvalkitError(_refusal(run_id, approval_id, exc, self._state(approval_id))) \
                from None
        except EvalkitError as exc:  # the envelope did not open: the lease is failed already
            raise EvalkitError(f"run {run_id} is not resumed: {exc}") from None
        problem = _mismatch(payload, run_id, point.from_seq, approval)
        if problem is not None:
            self.fail(lease, "state_invalid")
            raise EvalkitError(f"run {run_id} is not resumed with approval {approval_id}: "
                               f"{problem} (the checkpoint is failed, state_invalid)")
        return lease

    def refuse_early(self, settings: MissionSettings, point: ResumePoint,
                     approval_id: str) -> None:
        """Refuse now, before the resume starts its tool plane, with ``take``'s own sentence,
        when the checkpoint its approval names could not be leased (spent, expired,
        rejected, another run's or agent's); ``take`` still decides, at the lease."""
        if self.store.get(approval_id) is None:
            return
        run_id = point.writer.run_id
        refused = self.store.refusal(approval_id, run_id=run_id,
                                     definition_hash=definition_hash(settings))
        if refused is not None:
            raise EvalkitError(_refusal(run_id, approval_id, refused, self._state(approval_id)))

    def fail(self, lease: Lease, code: str) -> None:
        """The resume could not finish: the checkpoint is failed with ``code``, never retried."""
        with contextlib.suppress(CheckpointRefused):
            self.store.fail(lease, code)

    # -- the end of a run ------------------------------------------------------------------

    def settle(self, settings: MissionSettings, outcome: RunOutcome, run_dir: Path | None,
               lease: Lease | None) -> str | None:
        """Save the pause, or consume (or fail) the lease; returns a sentence for a person, or None."""
        pause = _pause_of(run_dir, outcome) if outcome.outcome == "awaiting_approval" else None
        if lease is None:
            if pause is None:
                return None
            self.store.save_pending(pause["approval_id"], str(outcome.run_id),
                                    definition_hash(settings), pause, self._expiry())
            return None
        if outcome.error is not None:
            self.fail(lease, "resume_failed")
            return None
        successor = None if pause is None else Successor(pause["approval_id"], pause,
                                                         self._expiry())
        try:
            self.store.consume(lease, successor)
        except CheckpointRefused as exc:
            return f"note: checkpoint {lease.checkpoint_id} was not consumed: {exc}"
        return None

    def _state(self, checkpoint_id: str) -> str | None:
        found = self.store.get(checkpoint_id)
        return found.state if found is not None else None

    def _expiry(self) -> float:
        return self.clock() + PAUSE_SECONDS


def _pause_of(run_dir: Path | None, outcome: RunOutcome) -> dict[str, Any] | None:
    """The payload a pause is saved with: the gate it stopped at and the last seq on record."""
    from evalkit.runtime.replay.recording import read_recording

    if run_dir is None or outcome.unrecorded is not None:
        return None
    recording = read_recording(run_dir)
    gate = next((r for r in reversed(recording.records)
                 if r.get("event") == "gate_requested"), None)
    last_seq = recording.meta_file.get("last_seq")
    if gate is None or not gate.get("approval_id") or not isinstance(last_seq, int):
        return None
    return {"v": PAYLOAD_VERSION, "run_id": recording.run_id, "last_seq": last_seq,
            "approval_id": gate["approval_id"], "tool": gate.get("tool"),
            "call_digest": gate.get("digest")}


def _mismatch(payload: Any, run_id: str, from_seq: int,
              approval: Mapping[str, Any]) -> str | None:
    """Why the opened checkpoint does not describe this run and this approval, or None."""
    if not isinstance(payload, dict) or payload.get("v") != PAYLOAD_VERSION:
        return "the checkpoint's state is not one this version reads"
    if payload.get("run_id") != run_id or payload.get("approval_id") != approval.get("id"):
        return "the checkpoint was saved for another run or approval"
    if payload.get("last_seq") != from_seq:
        return (f"the run moved on since it paused (last seq {payload.get('last_seq')} then, "
                f"{from_seq} now)")
    if payload.get("tool") != approval.get("tool") \
            or payload.get("call_digest") != approval.get("digest"):
        return "the approved call is not the call the run paused at"
    return None


def _refusal(run_id: str, approval_id: str, exc: CheckpointRefused, state: str | None) -> str:
    if exc.reason in ("not_pending", "expired"):
        why = {"leased": "another resume of it is running (a paused run is resumed once)",
               "consumed": "it was resumed already (a paused run is resumed once)",
               "failed": "an earlier resume of it failed, and it is never resumed again",
               "rejected": "it is rejected (the request was refused or withdrawn)",
               "expired": "it expired before it was resumed"}.get(state or "", str(exc))
    else:
        why = {"run_mismatch": "it belongs to another run",
               "definition_mismatch": "the agent's definition (model, skills, gates, profile…) "
                                      "changed since the pause"}.get(exc.reason, str(exc))
    return (f"run {run_id} is not resumed: its checkpoint for approval {approval_id} "
            f"cannot be used: {why}")


def checkpoints_path(environ: Mapping[str, str]) -> Path | None:
    """Where paused runs' checkpoints are (the action ledger's database), or None: off."""
    from evalkit.gate import db
    from evalkit.runtime.mission import LEDGER_ALL, LEDGER_ENV, LEDGER_OFF

    value = (environ.get(LEDGER_ENV) or "").strip()
    if value.lower() in LEDGER_OFF:
        return None
    return Path(value) if value and value.lower() not in LEDGER_ALL else db.default_path(environ)


def reject(environ: Mapping[str, str], approval_id: str, *, operator: str) -> bool:
    """A person said no: the paused run's checkpoint (if any) is rejected, never opened.

    True when a pending checkpoint was rejected. No database, no checkpoint, or one
    already past ``pending`` (a resume took it) is left as it is.
    """
    path = checkpoints_path(environ)
    if path is None or not path.exists():
        return False
    store = CheckpointStore(path, environ=environ)
    try:
        found = store.get(approval_id)
        if found is None or found.state != "pending":
            return False
        try:
            store.reject(approval_id, operator=operator, reason_code="operator_denied",
                         audit_ref=approval_id)
        except CheckpointRefused:  # taken or expired meanwhile
            return False
        return True
    finally:
        store.close()
