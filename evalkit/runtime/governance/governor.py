"""The governor: every dispatch decision of one run, in one object.

The loop hands it each call and gets back a ``Verdict`` — allow, deny (with
the sentence the model reads) or gate — and then lets it carry the call out,
which is where scopes are enforced, approvals are spent and the audit line
is written. It also decides what the model is offered (a skill's closed set,
widened by exactly the one tool an ``--approval`` admits) and adds the
skill's prompt to the system turn.

Built two ways: ``Governor(profile)`` for a library caller who wants only a
profile, and ``Governor.at_door(catalogue, ...)`` which does every check a
mission makes before its first event (closed set against the live plane,
code tools under bwrap, gate names, the approval being usable) and refuses
with one sentence.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.errors import EvalkitError
from evalkit.gate import ledger as gate_ledger
from evalkit.gate.policy import Decision
from evalkit.runtime.governance import profiles
from evalkit.runtime.governance.approvals import (
    ApprovalStore,
    canonical,
    decision_problem,
    new_approval_id,
    request_digest,
    unusable,
)
from evalkit.runtime.governance.audit import AuditLog, entry
from evalkit.runtime.governance.skills import (
    Manifest,
    close_over,
    live_namespaces,
    resolve_names,
)
from evalkit.runtime.tools.mcp_scopes import FROM_ANNOTATIONS, FROM_DEFAULT, FROM_OPERATOR
from evalkit.store.signing import digest

if TYPE_CHECKING:
    from evalkit.runtime.cancel import CancelToken
    from evalkit.runtime.control import ControlChannel
    from evalkit.runtime.tools import ToolDescriptor, ToolResult

#: How often a standing gate re-reads its durable record while it waits.
_RECORD_POLL_S = 0.25


@dataclass(frozen=True)
class Verdict:
    """What the governor says about one call before it is carried out."""

    #: "allow", "deny" or "gate".
    kind: str
    scopes: tuple[str, ...]
    reason: str
    #: On allow: the approval this dispatch spends.
    approval_id: str | None = None
    #: On allow over --control: who said yes (the request goes pending -> spent).
    decided_by: str | None = None
    note: str | None = None
    #: Where ``scopes`` came from, for an MCP tool (``ToolDescriptor.scope_origin``).
    origin: Mapping[str, str] = field(default_factory=dict)
    #: Why, as the action ledger's ``kind`` (``evalkit.gate.policy.KINDS`` and
    #: ``evalkit.gate.ledger.LEDGER_KINDS``).
    cause: str = "allowed"

    @property
    def gated(self) -> bool:
        return self.kind == "gate"


@dataclass(frozen=True)
class Gate:
    """A standing gate: the request a person must decide."""

    approval_id: str
    tool: str
    arguments: dict[str, Any]
    reason: str
    scopes: tuple[str, ...]
    #: Whether a durable record was written (False when EVALKIT_APPROVALS is off).
    durable: bool
    #: What a decision must name to cover this call (``request_digest``).
    digest: str
    origin: Mapping[str, str] = field(default_factory=dict)


def approved_record(approval_id: str, approvals: ApprovalStore | None) -> dict[str, Any]:
    """The approval ``--approval`` names, refused in one sentence unless it was decided yes:
    what can be said of it before the mission's tool plane starts (whether the plane offers
    its tool is asked at the door)."""
    if approvals is None:
        raise EvalkitError("--approval needs the approvals folder, but EVALKIT_APPROVALS "
                           "switches it off")
    record = approvals.get(approval_id)
    if record.get("state") != "approved":
        raise EvalkitError(unusable(record))
    return record


class Governor:
    """Profile, grants, closed set, gates, one admitted approval, the audit log."""

    def __init__(self, profile: str = profiles.DEFAULT_PROFILE, *, grants: Iterable[str] = (),
                 manifest: Manifest | None = None, closed: Iterable[str] | None = None,
                 gated: Sequence[str] = (), approval: Mapping[str, Any] | None = None,
                 approvals: ApprovalStore | None = None, audit: AuditLog | None = None,
                 gate_wait: float | None = None, runs_root: Path | None = None,
                 ledger: gate_ledger.Ledger | None = None) -> None:
        self.profile = profiles.check_profile(profile)
        self.grants = profiles.check_grants(grants)
        self.manifest = manifest
        self.closed = frozenset(closed) if closed is not None else None
        self.approval = dict(approval) if approval is not None else None
        self.approvals = approvals
        self.audit = audit
        self.gate_wait = gate_wait
        self.runs_root = runs_root
        #: The action ledger every carried-out call goes through (None: not recorded there).
        self.ledger = ledger
        admitted = self.approval["tool"] if self.approval else None
        gates = list(dict.fromkeys(gated))
        # A tool offered only because of the approval admits that one call; any
        # other call to it needs a person, so it is gated for this run.
        if admitted and self.closed is not None and admitted not in self.closed \
                and admitted not in gates:
            gates.append(admitted)
        self._gated = tuple(gates)
        self._spent = False
        #: Why the admitted approval's yes cannot be trusted (a forged or altered
        #: record): its call is then denied with this sentence, recorded and audited.
        self.approval_problem = decision_problem(self.approval) if self.approval else None
        #: Named tools a running server does not list yet; they join when it does.
        self.deferred: list[str] = []
        self.run_id: str | None = None
        self.objective = ""
        self.audit_ref: str | None = None

    # -- at the door -------------------------------------------------------------------------

    @classmethod
    def at_door(cls, catalogue: Sequence[ToolDescriptor], *,
                profile: str = profiles.DEFAULT_PROFILE, grants: Iterable[str] = (),
                manifest: Manifest | None = None, gate_tools: Sequence[str] = (),
                approval_id: str | None = None, approvals: ApprovalStore | None = None,
                audit: AuditLog | None = None, sandbox: str = "none",
                gate_wait: float | None = None, runs_root: Path | None = None,
                ledger: gate_ledger.Ledger | None = None) -> Governor:
        """Every check a mission makes against its live plane; refuses with one sentence."""
        profiles.check_profile(profile)
        grants = profiles.check_grants(grants)
        deferred: list[str] = []
        closed = close_over(manifest, catalogue, sandbox, deferred) \
            if manifest is not None else None
        names = [d.name for d in catalogue]
        gated = resolve_names(gate_tools, names, what="--gate-tool",
                              live=live_namespaces(catalogue), deferred=deferred) \
            if gate_tools else []
        record = None
        if approval_id is not None:
            record = cls._admit(approval_id, approvals, catalogue, profile, grants)
        admitted = {record["tool"]} if record is not None else set()
        outside = [g for g in gated if closed is not None and g not in closed | admitted]
        if outside:
            raise EvalkitError(f"--gate-tool {', '.join(outside)}: not in the skill's closed tool "
                               "set, so it is never offered and the gate would do nothing")
        gated = [n for n in names if n in gated] + [g for g in gated if g not in names]
        governor = cls(profile, grants=grants, manifest=manifest, closed=closed, gated=gated,
                       approval=record, approvals=approvals, audit=audit, gate_wait=gate_wait,
                       runs_root=runs_root, ledger=ledger)
        governor.deferred = list(dict.fromkeys(deferred))
        return governor

    @staticmethod
    def _admit(approval_id: str, approvals: ApprovalStore | None,
               catalogue: Sequence[ToolDescriptor], profile: str,
               grants: Sequence[str]) -> dict[str, Any]:
        record = approved_record(approval_id, approvals)
        tool = record.get("tool")
        descriptor = next((d for d in catalogue if d.name == tool), None)
        if descriptor is None:
            raise EvalkitError(f"approval {approval_id} is for {tool}, which this run's tool "
                               "plane does not offer (start the server that has it)")
        lacking = profiles.missing(profile, grants,
                                   descriptor.scopes_for(record.get("arguments") or {}))
        if lacking:
            raise EvalkitError(f"approval {approval_id} is for {tool}, but "
                               f"{profiles.refusal(profile, lacking)}")
        return record

    # -- what the model is offered ---------------------------------------------------------------

    @property
    def gated(self) -> list[str]:
        return list(self._gated)

    @property
    def granted(self) -> list[str] | None:
        """Sorted scopes added beyond the profile; None when there are none."""
        return sorted(self.grants) or None

    def offer(self, catalogue: Sequence[ToolDescriptor]) -> list[ToolDescriptor]:
        """The catalogue the model sees: the closed set, plus the approved tool."""
        if self.closed is None:
            return list(catalogue)
        admitted = self.approval["tool"] if self.approval else None
        return [d for d in catalogue if d.name in self.closed or d.name == admitted]

    def brief(self, system_message: dict[str, Any]) -> dict[str, Any]:
        """The system turn with the skill's prompt written into it."""
        text = self.manifest.prompt() if self.manifest is not None else ""
        if not text:
            return system_message
        return {**system_message, "content": f"{system_message.get('content') or ''}\n\n{text}"}

    # -- the run ---------------------------------------------------------------------------------

    def begin(self, run_id: str | None, objective: str) -> str | None:
        """The run started: open its audit file; returns ``audit_ref`` (None = audit off)."""
        self.run_id, self.objective = run_id, objective
        if self.ledger is not None:
            self.ledger.recover()  # calls left started by a process that died: outcome unknown
        if self.audit is not None:
            self.audit_ref = str(self.audit.open(run_id))
        return self.audit_ref

    def end(self) -> None:
        if self.audit is not None:
            self.audit.close()

    @property
    def policy_hash(self) -> str:
        """The digest of what this governor decides by: its policy, as the ledger names it."""
        return digest({"governor": {
            "profile": self.profile, "grants": sorted(self.grants),
            "closed": sorted(self.closed) if self.closed is not None else None,
            "gated": list(self._gated),
            "approval": self.approval.get("id") if self.approval else None}})

    def judge(self, descriptor: ToolDescriptor | None, name: str,
              arguments: Mapping[str, Any]) -> Verdict:
        """Allow, deny or gate one call (nothing is run here)."""
        scopes = descriptor.scopes_for(arguments) if descriptor is not None else ()
        origin = descriptor.scope_origin() if descriptor is not None else {}
        admitted = self.approval["tool"] if self.approval else None
        if self.closed is not None and name not in self.closed and name != admitted:
            skills = ", ".join(self.manifest.names) if self.manifest else "the skill"
            return Verdict("deny", scopes, f"denied: {name} is outside the closed tool set of "
                                           f"skill {skills}", origin=origin,
                           cause=gate_ledger.KIND_OUTSIDE_CLOSED_SET)
        lacking = profiles.missing(self.profile, self.grants, scopes)
        if lacking:
            return Verdict("deny", scopes, profiles.refusal(self.profile, lacking)
                           + _because(name, origin), origin=origin, cause="scope_missing")
        if self._covers(name, arguments):
            assert self.approval is not None
            if self.approval_problem is not None:
                return Verdict("deny", scopes, f"denied: {self.approval_problem}",
                               cause=gate_ledger.KIND_APPROVAL_INVALID)
            return Verdict("allow", scopes, f"approved by {self.approval.get('decided_by')} "
                                            f"({self.approval['id']})",
                           approval_id=self.approval["id"], origin=origin,
                           cause=gate_ledger.KIND_APPROVED)
        if name in self._gated:
            return Verdict("gate", scopes, f"{name} is gated (--gate-tool): a person must "
                                           "approve this call before it runs", origin=origin,
                           cause="requires_approval")
        return Verdict("allow", scopes, self._holding(scopes), origin=origin)

    def _covers(self, name: str, arguments: Mapping[str, Any]) -> bool:
        return (self.approval is not None and not self._spent
                and name == self.approval["tool"]
                and canonical(arguments) == canonical(self.approval.get("arguments")))

    def _holding(self, scopes: Sequence[str]) -> str:
        """Why an allowed call was allowed: the profile's scopes, and any granted for this run."""
        if not scopes:
            return "needs no scope"
        if self.profile == "god":
            return "profile 'god' holds every scope"
        held = [s for s in scopes if profiles.holds(self.profile, (), s)]
        granted = [s for s in scopes if s not in held]
        said = [f"profile {self.profile!r} holds {', '.join(held)}"] if held else []
        said += [f"--grant gives {', '.join(granted)}"] if granted else []
        return "; ".join(said)

    def request(self, verdict: Verdict, name: str, arguments: Mapping[str, Any],
                index: int) -> Gate:
        """Write the durable request for a gated call (when approvals are on)."""
        approval_id = new_approval_id()
        durable = self.approvals is not None
        if self.approvals is not None:
            approval_id = self.approvals.request(
                tool=name, arguments=arguments, objective=self.objective, run_id=self.run_id,
                runs_root=self.runs_root, index=index, reason=verdict.reason,
                approval_id=approval_id)["id"]
        self._write_audit(name, verdict.scopes, "denied",
                          f"gated: approval {approval_id} requested", None, 0.0, 0, index,
                          approval_id=approval_id, origin=verdict.origin)
        return Gate(approval_id, name, dict(arguments), verdict.reason, verdict.scopes, durable,
                    request_digest(name, dict(arguments)), origin=verdict.origin)

    def await_decision(self, gate: Gate, control: ControlChannel | None, token: CancelToken,
                       deadline: float | None) -> Verdict | None:
        """Stand at the gate for at most ``--gate-wait`` (and the run's time left).

        A decision may come over ``--control`` or from ``evalkit approvals``
        in another process. None: nobody decided in time (the run ends
        ``awaiting_approval``). Nothing times out into a yes.
        """
        if not self.gate_wait or self.gate_wait <= 0 or (control is None and not gate.durable):
            return None
        end = time.monotonic() + self.gate_wait
        if deadline is not None:
            end = min(end, deadline)
        next_read = 0.0
        while True:
            if control is not None:
                decision = control.take_decision(gate.approval_id)
                if decision is not None:
                    return self._decided_over_control(gate, decision)
            now = time.monotonic()
            if gate.durable and self.approvals is not None and now >= next_read:
                next_read = now + _RECORD_POLL_S
                verdict = self._decided_on_file(gate)
                if verdict is not None:
                    return verdict
            if now >= end:
                return None
            token.pause(min(0.05, max(end - now, 0.001)))

    def _decided_over_control(self, gate: Gate, decision: Any) -> Verdict:
        if decision.approve:
            return Verdict("allow", gate.scopes, f"approved by {decision.decided_by} over "
                                                 f"--control ({gate.approval_id})",
                           approval_id=gate.approval_id if gate.durable else None,
                           decided_by=decision.decided_by, note=decision.note,
                           origin=gate.origin, cause=gate_ledger.KIND_APPROVED)
        if gate.durable and self.approvals is not None:
            try:
                self.approvals.refuse(gate.approval_id, decided_by=decision.decided_by,
                                      note=decision.note, via="control")
            except EvalkitError:
                pass  # decided elsewhere meanwhile: the no still stands for this call
        note = f": {decision.note}" if decision.note else ""
        return Verdict("deny", gate.scopes, f"denied: {decision.decided_by} refused this call "
                                            f"to {gate.tool} ({gate.approval_id}){note}",
                       origin=gate.origin, cause=gate_ledger.KIND_DENIED_BY_APPROVER)

    def _decided_on_file(self, gate: Gate) -> Verdict | None:
        assert self.approvals is not None
        try:
            record = self.approvals.get(gate.approval_id)
        except EvalkitError:
            return None
        state = record.get("state")
        if state == "approved":
            problem = decision_problem(record, tool=gate.tool, arguments=gate.arguments)
            if problem is not None:
                return Verdict("deny", gate.scopes, f"denied: {problem}",
                               cause=gate_ledger.KIND_APPROVAL_INVALID)
            return Verdict("allow", gate.scopes, f"approved by {record.get('decided_by')} "
                                                 f"({gate.approval_id})",
                           approval_id=gate.approval_id, origin=gate.origin,
                           cause=gate_ledger.KIND_APPROVED)
        if state == "refused":
            note = f": {record['note']}" if record.get("note") else ""
            return Verdict("deny", gate.scopes, f"denied: {record.get('decided_by')} refused "
                                                f"this call to {gate.tool} "
                                                f"({gate.approval_id}){note}", origin=gate.origin,
                           cause=gate_ledger.KIND_DENIED_BY_APPROVER)
        return None

    def carry_out(self, plane: Any, name: str, arguments: dict[str, Any], verdict: Verdict,
                  *, index: int, call: int = 0) -> ToolResult:
        """Run an allowed call (spending its approval first) or refuse a denied one; audit it.

        With a ledger, the call is the action ``run:step:call`` there: proposed, decided
        as the verdict says, started (committed) before it is dispatched, and completed
        or failed after. A key already carried out — a resumed run reaching the same
        step — is not dispatched again.
        """
        from evalkit.runtime.tools import ToolResult

        if verdict.kind != "allow":
            self._write_audit(name, verdict.scopes, "denied", verdict.reason, None, 0.0, 0, index,
                              origin=verdict.origin)
            self._ledger_refuse(name, arguments, verdict, index, call)
            return ToolResult.failure(verdict.reason, None)
        if verdict.approval_id is not None and self.approvals is not None:
            try:
                self.approvals.spend(verdict.approval_id, run_id=self.run_id, tool=name,
                                     arguments=arguments, decided_by=verdict.decided_by,
                                     note=verdict.note,
                                     via="control" if verdict.decided_by else None)
            except EvalkitError as exc:
                reason = f"denied: {exc.message}"
                self._write_audit(name, verdict.scopes, "denied", reason, None, 0.0, 0, index,
                                  approval_id=verdict.approval_id, origin=verdict.origin)
                self._ledger_refuse(name, arguments, Verdict(
                    "deny", verdict.scopes, reason, cause=gate_ledger.KIND_APPROVAL_INVALID),
                    index, call)
                return ToolResult.failure(reason, None)
            if self.approval is not None and verdict.approval_id == self.approval["id"]:
                self._spent = True
        key, refusal = self._ledger_start(name, arguments, verdict, index, call)
        if refusal is not None:
            self._write_audit(name, verdict.scopes, "denied", refusal, None, 0.0, 0, index,
                              approval_id=verdict.approval_id, origin=verdict.origin)
            return ToolResult.failure(refusal, None)
        started = time.monotonic()
        result = plane.dispatch(name, arguments)
        took = time.monotonic() - started
        if key is not None and self.ledger is not None:
            outcome = {"ok": result.ok, "exit_code": result.exit_code,
                       "output": digest(result.output)}
            if result.ok:
                self.ledger.complete(key, outcome)
            else:
                self.ledger.fail(key, {**outcome, "error": result.error})
        ran = result.exit_code is not None
        # A file name that is not UTF-8 lists as lone surrogates (os's reading): counted,
        # not a crash.
        size = len(result.output.encode("utf-8", "surrogatepass"))
        self._write_audit(name, verdict.scopes, "allowed" if ran else "error",
                          verdict.reason if ran else (result.error or "the dispatch failed"),
                          result.exit_code, took, size, index,
                          approval_id=verdict.approval_id, origin=verdict.origin)
        return result

    # -- the action ledger ---------------------------------------------------------------------

    def _ledger_propose(self, name: str, arguments: Mapping[str, Any], verdict: Verdict,
                        index: int, call: int) -> tuple[str | None, str | None]:
        """Propose and decide the call as ``verdict`` says: (its key, or why it cannot be)."""
        if self.ledger is None or self.run_id is None:
            return None, None
        key = gate_ledger.default_key(self.run_id, index, call)
        policy_hash = self.policy_hash
        try:
            self.ledger.propose(key, name, dict(arguments), policy_hash=policy_hash,
                                run_id=self.run_id)
        except gate_ledger.LedgerConflict:
            return key, (f"denied: step {index} call {call} of run {self.run_id} is already "
                         "another call in the action ledger; it is not run")
        outcome = "allowed" if verdict.kind == "allow" else "denied"
        self.ledger.decide(key, Decision(outcome, verdict.reason, verdict.cause, policy_hash))
        return key, None

    def _ledger_refuse(self, name: str, arguments: Mapping[str, Any], verdict: Verdict,
                       index: int, call: int) -> None:
        self._ledger_propose(name, arguments, verdict, index, call)

    def _ledger_start(self, name: str, arguments: Mapping[str, Any], verdict: Verdict,
                      index: int, call: int) -> tuple[str | None, str | None]:
        """Win the right to dispatch (the intent row, committed); else why not."""
        key, refusal = self._ledger_propose(name, arguments, verdict, index, call)
        if key is None or refusal is not None or self.ledger is None:
            return key, refusal
        if self.ledger.start(key) is not None:
            return key, None
        action = self.ledger.get(key)
        state = action.state if action is not None else "unknown"
        return key, (f"not run again: step {index} call {call} of run {self.run_id} is "
                     f"{state.replace('_', ' ')} in the action ledger (at most once)")

    def _write_audit(self, tool: str, scopes: Sequence[str], verdict: str, reason: str | None,
                     exit_code: int | None, duration_s: float, bytes_out: int, index: int,
                     approval_id: str | None = None,
                     origin: Mapping[str, str] | None = None) -> None:
        if self.audit is None:
            return
        self.audit.write(entry(tool=tool, scopes=scopes, profile=self.profile, verdict=verdict,
                               reason=reason, exit_code=exit_code, duration_s=duration_s,
                               bytes_out=bytes_out, run_id=self.run_id, index=index,
                               **(origin or {}), granted=self.granted, approval_id=approval_id))


def _because(name: str, origin: Mapping[str, str]) -> str:
    """Why an MCP tool needs what it needs, so an operator knows whose word to change."""
    source = origin.get("scopes_from")
    if source == FROM_OPERATOR:
        return f" (scopes declared by {origin.get('declared_by')})"
    if source == FROM_ANNOTATIONS:
        return f" (scopes from {name}'s annotations)"
    if source == FROM_DEFAULT:
        return f" ({name} carries no annotations, so it is treated as writing)"
    return ""
