"""The gate sidecar: govern any framework's tool calls over NDJSON-RPC on stdio.

A framework that is not evalkit's runtime (LangGraph, CrewAI, a hand-written
loop) hands each tool call to this process *before* running it (``govern``).
The gate decides with the policy, records the decision in the action ledger,
and only when the call may run does it ask the client to run the body
(``run_tool``) — once per idempotency key, ever: the ledger's ``start`` is the
one conditional update that exactly one caller wins, committed (fsync'd) before
the body runs. A retried ``govern`` with the same key is answered from the
ledger and never runs the body again; one that arrives while the first is
running waits (bounded) for its outcome.

A held call is answered ``pending_approval`` with the deadline the ledger fixed
when the hold was created. A person releases it with a signed decision
(``evalkit gate approve``), written into the approval file the gate left in its
approvals folder; the gate checks it when asked (``resume``, or the same
``govern`` again) — the Ed25519 signature, the approval id, the action's digest
(tool, arguments and policy hash) and the deadline, by the injected clock. A
decision after the deadline is recorded and never releases the call.

Every wait is bounded: a client's ``wait_ms`` (at most ``MAX_WAIT_MS``), the
tool's answer (``tool_timeout`` seconds, after which the outcome is unknown and
the body is never run again for that key). Every step is recorded in a run of
the run store (``evalkit.gate.recording``), sealed at shutdown.

Lines are read one at a time and parsed strictly (``evalkit.gate.protocol``); a
refused line gets one ``error`` and the gate serves the next. Requests that can
block (``govern``, ``resume``) run on threads of their own; every line out goes
through one lock and is flushed at once.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from evalkit.gate import ledger as L
from evalkit.gate import protocol as P
from evalkit.gate.policy import Policy, decide
from evalkit.gate.recording import Recording
from evalkit.store import signing

#: Seconds the client may take to answer a ``run_tool`` before the outcome is unknown.
DEFAULT_TOOL_TIMEOUT = 30.0
#: Requests served at once (each waiting one holds a thread); more are refused at once.
MAX_IN_FLIGHT = 512
#: Seconds between looks for a decision while a ``resume`` waits.
POLL_SECONDS = 0.05
#: The ledger's kinds of a call refused by a person.
_REFUSED = ("denied_by_approver", "denied_by_operator")
#: The ledger's kinds of a call whose effect is unknown.
_UNKNOWN = ("outcome_unknown", "crashed")


def iso(seconds: float | None) -> str | None:
    """A clock reading as ISO 8601 UTC with milliseconds."""
    if seconds is None:
        return None
    stamp = datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


@dataclass
class _Leg:
    """One ``run_tool`` waiting for its answer."""

    correlation_id: str
    request_id: str
    key: str
    done: threading.Event = field(default_factory=threading.Event)
    answer: dict[str, Any] | None = None


class Approvals:
    """The folder where the gate leaves each hold's request and a person's signed decision
    lands (``<approval_id>.json``; ``evalkit gate approve`` writes the decision into it)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, approval_id: str) -> Path:
        return self.root / f"{approval_id}.json"

    def ask(self, action: L.Action, *, deadline: str | None) -> None:
        """Write the pending request a person decides (never over an existing file)."""
        from evalkit.store.replace import replace_file

        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self.path(str(action.approval_id))
        if path.exists():
            return
        record = {"id": action.approval_id, "state": "pending", "key": action.key,
                  "tool": action.tool, "arguments": action.arguments, "digest": action.digest,
                  "policy_hash": action.policy_hash, "reason": action.reason,
                  "deadline": deadline, "decision": None}
        replace_file(path, json.dumps(record, indent=2, ensure_ascii=False) + "\n", fsync=True)

    def decision(self, approval_id: str) -> tuple[Any, tuple[int, int] | None]:
        """The decision in the file (None when none yet) and the file's (mtime, size)."""
        path = self.path(approval_id)
        try:
            stat = path.stat()
            record = P.loads(path.read_bytes())
        except FileNotFoundError:
            return None, None
        except (OSError, ValueError):
            return None, None
        stamp = (stat.st_mtime_ns, stat.st_size)
        if not isinstance(record, dict):
            return None, stamp
        return record.get("decision"), stamp


class GateServer:
    """One sidecar: ``serve(stdin, stdout)`` until ``shutdown`` or end of input."""

    #: Requests served at once; a client cannot make the gate start threads without end.
    max_in_flight = MAX_IN_FLIGHT

    def __init__(self, policy: Policy, ledger: L.Ledger, *, recording: Recording,
                 approvals: Approvals, trust: signing.Trust | None = None,
                 clock: Callable[[], float] | None = None,
                 tool_timeout: float = DEFAULT_TOOL_TIMEOUT,
                 poll: float = POLL_SECONDS, run_id: str | None = None) -> None:
        self.policy = policy
        self.ledger = ledger  # thread-safe: its one connection is used in turns
        self.recording = recording
        self.approvals = approvals
        self.trust = trust if trust is not None else signing.Trust.local()
        self.clock = clock if clock is not None else ledger.clock
        self.tool_timeout = tool_timeout
        self.poll = poll
        #: The run id actions are filed under when a govern names none.
        self.run_id = run_id if run_id is not None else recording.run_id
        self._out: IO[bytes] | None = None
        self._write_lock = threading.Lock()
        self._state = threading.Lock()
        self._requests: set[str] = set()
        self._legs: dict[str, _Leg] = {}
        self._key_locks: dict[str, threading.RLock] = {}
        self._ended: set[str] = set()
        self._held: set[str] = set()
        self._arguments: dict[str, Any] = {}
        self._seen_decisions: dict[str, tuple[int, int]] = {}
        self._threads: list[threading.Thread] = []
        self._legs_made = itertools.count(1)
        self._closing = False
        self._registered: set[str] = set()

    # -- the loop ------------------------------------------------------------------------------

    def serve(self, inp: IO[bytes], out: IO[bytes]) -> str:
        """Answer lines until ``shutdown`` or end of input; returns the run's outcome."""
        self._out = out
        # A gate that died mid-call left its actions started: settle them before serving,
        # so a retry reads outcome_unknown instead of running the body a second time.
        for settled in self.ledger.recover(policy=self.policy):
            self.recording.governance("result", key=settled.key, tool=settled.tool,
                                      phase="failed", kind=_kind_of(settled),
                                      reason=settled.reason)
        self._send(P.outbound("ready", id=None, protocol_version=P.PROTOCOL_VERSION,
                              policy_hash=self.policy.hash, run_id=self.recording.run_id,
                              max_line_bytes=P.MAX_LINE_BYTES, max_wait_ms=P.MAX_WAIT_MS))
        while True:
            line = _read_line(inp)
            if line is None:
                return self._shutdown(None, None)
            if isinstance(line, P.ProtocolError):
                self._refuse(line)
                continue
            if not line.strip():
                continue
            try:
                message = P.parse_inbound(line)
            except P.ProtocolError as refused:
                self._refuse(refused)
                continue
            if message["type"] == "shutdown":
                return self._shutdown(message["id"], message.get("answer"))
            self._dispatch(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind in ("tool_result", "tool_error"):
            self._answer_leg(message)
            return
        request_id = message["id"]
        with self._state:
            if self._closing:
                refused = P.ProtocolError("shutting_down", "the gate is shutting down",
                                          request_id)
            elif request_id in self._requests:
                refused = P.ProtocolError("duplicate_id", f"request id {request_id!r} is "
                                          "still being served", request_id)
            elif len(self._requests) >= self.max_in_flight:
                refused = P.ProtocolError("internal", f"{len(self._requests)} requests are "
                                          "in flight, the most this gate serves at once; "
                                          "send it again when one is answered", request_id)
            else:
                refused = None
                self._requests.add(request_id)
        if refused is not None:
            self._refuse(refused)
            return
        if kind == "register_tool":
            self._serve(self._register, message)
            return
        worker = threading.Thread(target=self._serve, args=(
            self._govern if kind == "govern" else self._resume, message),
            name=f"gate-{request_id}", daemon=True)
        with self._state:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(worker)
        worker.start()

    def _serve(self, handler: Callable[[dict[str, Any]], dict[str, Any]],
               message: dict[str, Any]) -> None:
        try:
            reply = handler(message)
        except Exception as exc:  # a bug or a broken database: said, and serving goes on
            reply = P.ProtocolError("internal", f"{type(exc).__name__}: {exc}",
                                    message["id"]).reply()
            self._record_error(reply, message)
        finally:
            with self._state:
                self._requests.discard(message["id"])
        self._send(reply)

    # -- requests ------------------------------------------------------------------------------

    def _register(self, message: dict[str, Any]) -> dict[str, Any]:
        tool = message["tool"]
        self._registered.add(tool)
        self.recording.register(tool, message.get("description", ""))
        return P.outbound("registered", id=message["id"], tool=tool,
                          in_policy=self.policy.contract(tool) is not None)

    def _govern(self, message: dict[str, Any]) -> dict[str, Any]:
        request_id, key = message["id"], message["idempotency_key"]
        tool, arguments = message["tool"], message["arguments"]
        self.recording.step(message.get("step"))
        self.recording.governance("received", key=key, tool=tool, request_id=request_id)
        with self._lock_of(key):
            try:
                action = self.ledger.propose(key, tool, arguments,
                                             policy_hash=self.policy.hash,
                                             run_id=message.get("run_id") or self.run_id)
            except L.LedgerConflict as exc:
                reply = self._result(request_id, key, "conflict", exc.message, digest=None,
                                     replayed=False)
                self._record_end(reply, tool, arguments)
                return reply
            self._arguments.setdefault(key, arguments)
            if action.state == L.PROPOSED:
                decision = decide(self.policy, tool, arguments)
                action = self.ledger.decide(key, decision)
                self.recording.governance(
                    "decided", key=key, tool=tool, request_id=request_id,
                    phase=_phase_of_state(action.state), kind=decision.kind,
                    reason=decision.reason, digest=action.digest,
                    policy_hash=action.policy_hash)
                if action.state == L.HELD:
                    self._hold(action)
                return self._advance(request_id, action, fresh=True,
                                     wait_ms=message.get("wait_ms", P.DEFAULT_WAIT_MS))
        return self._advance(request_id, action, fresh=False,
                             wait_ms=message.get("wait_ms", P.DEFAULT_WAIT_MS))

    def _resume(self, message: dict[str, Any]) -> dict[str, Any]:
        request_id, key = message["id"], message["idempotency_key"]
        action = self.ledger.get(key)
        if action is None:
            reply = P.ProtocolError("unknown_action", f"no action has the key {key!r}",
                                    request_id).reply()
            self._record_error(reply, message)
            return reply
        self.recording.governance("received", key=key, tool=action.tool,
                                  request_id=request_id)
        if action.policy_hash != self.policy.hash:
            # The ledger is shared (the runtime, other gates): an action decided under
            # another policy is not this gate's to start, and its outcome not its to tell —
            # as a govern of that key here would be a conflict.
            reply = self._result(request_id, key, "conflict", f"idempotency key {key!r} "
                                 f"belongs to an action decided under another policy "
                                 f"({action.policy_hash}), not this gate's", digest=None,
                                 replayed=False)
            self._record_end(reply, action.tool, None)
            return reply
        return self._advance(request_id, action, fresh=False,
                             wait_ms=message.get("wait_ms", P.DEFAULT_WAIT_MS))

    # -- the life of an action -----------------------------------------------------------------

    def _advance(self, request_id: str, action: L.Action, *, fresh: bool,
                 wait_ms: int) -> dict[str, Any]:
        """Take the action as far as it can go now, and say where it is."""
        key = action.key
        if action.state == L.HELD or (action.state == L.EXPIRED and key in self._held):
            action = self._look_for_decision(request_id, action, wait_ms)
        if action.state in (L.ALLOWED, L.APPROVED):
            with self._lock_of(key):
                won = self.ledger.start(key)
            if won is not None:
                return self._execute(request_id, won)
            action = self.ledger.get(key) or action
        if action.state == L.STARTED:
            bound = max(wait_ms / 1000, self.tool_timeout + 1.0)
            action = self.ledger.wait(key, bound) or action
        # Answered from the record: an end this gate already said, or one it never saw.
        replayed = action.terminal and (key in self._ended or
                                        (not fresh and key not in self._held))
        reply = self._reply_for(request_id, action, replayed=replayed)
        if replayed:
            self.recording.governance("replayed", key=key, tool=action.tool,
                                      request_id=request_id, phase=reply["phase"],
                                      kind=reply["kind"])
        elif action.terminal or reply["phase"] == "pending_approval":
            self._record_end(reply, action.tool, self._args_of(action))
        return reply

    def _hold(self, action: L.Action) -> None:
        self._held.add(action.key)
        deadline = iso(action.deadline)
        self.approvals.ask(action, deadline=deadline)
        self.recording.held(tool=action.tool, arguments=self._args_of(action),
                            reason=str(action.reason), approval_id=str(action.approval_id),
                            digest=action.digest)
        self.recording.governance("held", key=action.key, tool=action.tool,
                                  kind=action.kind, deadline=deadline,
                                  approval_id=action.approval_id, digest=action.digest)

    def _look_for_decision(self, request_id: str, action: L.Action, wait_ms: int) -> L.Action:
        """Check the approval file until a decision settles the hold, the deadline passes
        (by the injected clock), or ``wait_ms`` of real time runs out."""
        key, approval_id = action.key, str(action.approval_id)
        until = time.monotonic() + wait_ms / 1000
        while True:
            decision, stamp = self.approvals.decision(approval_id)
            if decision is not None and stamp != self._seen_decisions.get(approval_id):
                self._seen_decisions[approval_id] = stamp  # type: ignore[assignment]
                action = self._apply(request_id, action, decision)
                if action.state != L.HELD:
                    return action
            if action.state == L.HELD and action.deadline is not None \
                    and self.clock() >= action.deadline:
                self.ledger.expire_due()
                return self.ledger.get(key) or action
            if action.state != L.HELD or time.monotonic() >= until:
                return action
            time.sleep(min(self.poll, max(0.0, until - time.monotonic())))
            action = self.ledger.get(key) or action

    def _apply(self, request_id: str, action: L.Action, decision: Any) -> L.Action:
        key = action.key
        late = action.state == L.EXPIRED
        try:
            action = self.ledger.approve(key, decision, trust=self.trust)
            detail = f"a signed decision was applied: {action.reason}"
        except L.ApprovalRefused as refused:
            action = self.ledger.get(key) or action
            detail = refused.message
            late = late or action.kind == "late_approval"
        self.recording.governance("late_approval" if late else "approval_checked", key=key,
                                  tool=action.tool, request_id=request_id,
                                  approval_id=action.approval_id, detail=detail)
        return action

    def _execute(self, request_id: str, action: L.Action) -> dict[str, Any]:
        """Remoted execute: the body runs in the client, now, once; the answer is awaited
        for ``tool_timeout`` seconds at most."""
        key, arguments = action.key, self._args_of(action)
        if arguments is None:
            error = ("the call's arguments are not known to this gate (it was proposed "
                     "elsewhere and its recorded arguments are redacted); it is not run")
            self.ledger.fail(key, error, kind="not_run")
            return self._finish(request_id, key)
        leg = _Leg(f"c-{next(self._legs_made)}", request_id, key)
        with self._state:
            self._legs[leg.correlation_id] = leg
        self.recording.governance("run_tool", key=key, tool=action.tool,
                                  request_id=request_id, correlation_id=leg.correlation_id)
        self._send(P.outbound("run_tool", id=request_id, correlation_id=leg.correlation_id,
                              idempotency_key=key, tool=action.tool, arguments=arguments))
        answered = leg.done.wait(self.tool_timeout)
        with self._state:
            self._legs.pop(leg.correlation_id, None)
            answer = leg.answer
        if not answered or answer is None:
            self.ledger.unknown(key, f"no answer to run_tool within {self.tool_timeout:g} s; "
                                     "whether the body ran is unknown")
        elif answer["type"] == "tool_result":
            self.ledger.complete(key, answer["output"])
        else:
            self.ledger.fail(key, answer["error"], kind="tool_error")
        # The ledger keeps the answer redacted; the caller gets its own body's answer as is.
        live = {} if answer is None or not answered else (
            {"result": answer["output"]} if answer["type"] == "tool_result"
            else {"error": answer["error"]})
        return self._finish(request_id, key, live)

    def _finish(self, request_id: str, key: str, live: Mapping[str, Any] | None = None
                ) -> dict[str, Any]:
        action = self.ledger.get(key)
        assert action is not None
        reply = {**self._reply_for(request_id, action, replayed=False), **(live or {})}
        self._record_end(reply, action.tool, self._args_of(action))
        return reply

    def _answer_leg(self, message: dict[str, Any]) -> None:
        cid = message["correlation_id"]
        with self._state:
            leg = self._legs.get(cid)
            if leg is None:
                refused = P.ProtocolError("unknown_correlation", f"no run_tool {cid!r} is "
                                          "waiting for an answer", message["id"])
            elif leg.request_id != message["id"]:
                refused = P.ProtocolError("mixed_ids", f"run_tool {cid!r} belongs to "
                                          "another request id", message["id"])
            else:
                refused = None
                leg.answer = message
                del self._legs[cid]
        if refused is not None:
            self._refuse(refused)
            return
        assert leg is not None
        leg.done.set()

    # -- replies -------------------------------------------------------------------------------

    def _reply_for(self, request_id: str, action: L.Action, *, replayed: bool
                   ) -> dict[str, Any]:
        kind = _kind_of(action)
        fields: dict[str, Any] = {}
        if action.state == L.COMPLETED:
            fields["result"] = action.result
        elif action.state in (L.FAILED, L.OUTCOME_UNKNOWN):
            fields["error"] = action.error if isinstance(action.error, str) \
                else json.dumps(action.error)
        if action.deadline is not None and action.approval_id is not None:
            fields["deadline"] = iso(action.deadline)
        return self._result(request_id, action.key, kind, str(action.reason or kind),
                            digest=action.digest, replayed=replayed, **fields)

    def _result(self, request_id: str, key: str, kind: str, reason: str, *,
                digest: str | None, replayed: bool, **fields: Any) -> dict[str, Any]:
        return P.outbound("govern_result", id=request_id, idempotency_key=key,
                          phase=P.KINDS[kind][0], kind=kind, reason=reason, digest=digest,
                          policy_hash=self.policy.hash, replayed=replayed, **fields)

    def _record_end(self, reply: Mapping[str, Any], tool: str, arguments: Any) -> None:
        phase, kind, key = reply["phase"], reply["kind"], reply["idempotency_key"]
        if phase != "pending_approval" and kind != "conflict":
            self._ended.add(key)
        self.recording.governance("result", key=key, tool=tool, request_id=reply["id"],
                                  phase=phase, kind=kind, reason=reply["reason"],
                                  digest=reply["digest"], policy_hash=reply["policy_hash"])
        if phase == "pending_approval":
            return
        args = arguments if isinstance(arguments, dict) else {}
        if phase == "completed":
            self.recording.call(tool=tool, arguments=args, ok=True, output=reply.get("result"),
                                error=None)
        else:
            why = reply.get("error") or reply["reason"]
            self.recording.call(tool=tool, arguments=args, ok=False, output="",
                                error=f"{kind}: {why}")

    def _refuse(self, refused: P.ProtocolError) -> None:
        reply = refused.reply()
        self._record_error(reply, None)
        self._send(reply)

    def _record_error(self, reply: Mapping[str, Any], message: Mapping[str, Any] | None
                      ) -> None:
        key = message.get("idempotency_key") if message else None
        tool = message.get("tool") if message else None
        self.recording.governance("error", key=key if isinstance(key, str) else None,
                                  tool=tool if isinstance(tool, str) else None,
                                  request_id=reply.get("id"), kind=reply.get("code"),
                                  reason=reply.get("message"))

    def _send(self, message: Mapping[str, Any]) -> None:
        data = P.dumps(message)
        with self._write_lock:
            if self._out is None:
                return
            try:
                self._out.write(data)
                self._out.flush()
            except (OSError, ValueError):  # the client went away: nothing can reach it
                pass

    # -- helpers -------------------------------------------------------------------------------

    def _lock_of(self, key: str) -> threading.RLock:
        """One lock per key in this process (the ledger orders processes): a duplicate
        waits for the first request's outcome instead of racing it."""
        with self._state:
            return self._key_locks.setdefault(key, threading.RLock())

    def _args_of(self, action: L.Action) -> Any:
        """The call's exact arguments: as the client sent them, or the ledger's when they
        still match the digest (redaction changed nothing); else None."""
        known = self._arguments.get(action.key)
        if known is not None:
            return known
        if L.action_digest(action.tool, action.arguments, action.policy_hash) == action.digest:
            return action.arguments
        return None

    def _shutdown(self, request_id: str | None, answer: str | None) -> str:
        with self._state:
            self._closing = True
            threads = list(self._threads)
        end = time.monotonic() + self.tool_timeout + 2.0
        for worker in threads:
            worker.join(max(0.0, end - time.monotonic()))
        holding = any((a := self.ledger.get(k)) is not None and a.state == L.HELD
                      for k in self._held)
        outcome = self.recording.close(answer=answer, holding=holding)
        if request_id is not None:
            self._send(P.outbound("closed", id=request_id, run_id=self.recording.run_id,
                                  outcome=outcome))
        return outcome


def _phase_of_state(state: str) -> str:
    return {L.ALLOWED: "completed", L.DENIED: "rejected", L.HELD: "pending_approval"
            }.get(state, "failed")


def _kind_of(action: L.Action) -> str:
    """The protocol's kind (``protocol.KINDS``) of where an action is."""
    state, kind = action.state, action.kind or ""
    if state == L.COMPLETED:
        return "approved" if action.approval_id is not None else "allowed"
    if state == L.HELD:
        return kind if P.KINDS.get(kind, ("",))[0] == "pending_approval" else "requires_approval"
    if state == L.DENIED:
        if kind in _REFUSED:
            return "refused"
        return kind if P.KINDS.get(kind, ("",))[0] == "rejected" else "refused"
    if state == L.EXPIRED:
        return "expired"
    if state == L.OUTCOME_UNKNOWN or (state == L.FAILED and kind in _UNKNOWN):
        return "outcome_unknown"
    if state == L.FAILED:
        return "tool_error"
    return "in_flight"  # proposed, allowed, approved or started: not settled in time


def _read_line(inp: IO[bytes]) -> bytes | P.ProtocolError | None:
    """One line (None at end of input); a line past the bound is skipped to its end and
    refused without being kept in memory."""
    line = inp.readline(P.MAX_LINE_BYTES + 2)
    if not line:
        return None
    if line.endswith(b"\n") or len(line) <= P.MAX_LINE_BYTES:
        return line
    skipped = len(line)
    while not line.endswith(b"\n"):
        line = inp.readline(1 << 16)
        if not line:
            break
        skipped += len(line)
    return P.ProtocolError("line_too_long", f"a line of {skipped} bytes or more is longer "
                                            f"than the {P.MAX_LINE_BYTES} allowed")


def run(policy_path: Path, *, ledger_path: Path | None, runs: Path | None,
        approvals_dir: Path | None, objective: str, suite_key: str | None,
        tool_timeout: float, run_id: str | None = None,
        clock: Callable[[], float] | None = None,
        environ: Mapping[str, str] | None = None, inp: IO[bytes] | None = None,
        out: IO[bytes] | None = None) -> str:
    """``evalkit gate serve``: load, serve stdio, seal. Returns the run's outcome."""
    import sys

    from evalkit.gate import db
    from evalkit.store.seal import signer_or_none
    from evalkit.store.state import state_home

    env = os.environ if environ is None else environ
    policy = Policy.load(policy_path)
    ledger = L.Ledger(ledger_path if ledger_path is not None else db.default_path(env),
                      **({"clock": clock} if clock is not None else {}))
    try:
        signer, _ = signer_or_none(env)
        gated = [t for t in policy.tools if decide(policy, t, {}).outcome == "held"]
        root = runs / suite_key if runs is not None and suite_key else runs
        recording = Recording(root, objective=objective, gated=gated,
                              policy_hash=policy.hash, signer=signer,
                              meta={"policy": str(policy_path)})
        folder = approvals_dir if approvals_dir is not None \
            else state_home(env) / "gate-approvals"
        server = GateServer(policy, ledger, recording=recording, approvals=Approvals(folder),
                            trust=signing.Trust.local(env), clock=clock,
                            tool_timeout=tool_timeout, run_id=run_id)
        return server.serve(inp if inp is not None else sys.stdin.buffer,
                            out if out is not None else sys.stdout.buffer)
    finally:
        ledger.close()
