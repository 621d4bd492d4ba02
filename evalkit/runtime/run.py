"""The mission loop: objective → model → (tool → result)* → answer → ``mission_finished``.

``Run`` is the whole agent: a model backend, a tool plane, bounds and a place
to record, wired into one loop. The CLI builds exactly these objects and
calls the same ``run``, so the library and ``evalkit mission`` cannot drift.

Every record leaves through one ``Emitter`` (run store first, then the sink),
and ``mission_finished`` is written from a ``finally``: a crash, a cancel or a
SIGTERM all still close the stream. The loop never parses a reply itself — a
``Protocol`` turns replies into calls, answers and rejections — and never
retries a model call itself — ``waits`` does, surfacing waits as
``model_state``.

A run has one *main line* and, under ``--swarm`` (``evalkit.runtime.swarm``),
branches: ``branch_off`` gives a lane over the same parts — model, plane,
governor, results, recording, stream, usage, clock and step counter — with
its own conversation, whose records carry ``branch``. Step indexes come from
the run's one ``StepCounter``, taken and announced under its lock, so the
stream stays one sequence whose ``step_started`` indexes only increase.
"""

from __future__ import annotations

import copy
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evalkit.contract import SCHEMA_VERSION
from evalkit.errors import RecordingFailed
from evalkit.runtime import control as control_words
from evalkit.runtime import prompts
from evalkit.runtime.backends import ModelBackend, Reply, ScriptExhausted
from evalkit.runtime.budgets import Spend, priced_as
from evalkit.runtime.cancel import Cancelled, CancelToken
from evalkit.runtime.governance import Governor
from evalkit.runtime.inflight import OutOfTime, within
from evalkit.runtime.protocol import Answer, Call, Protocol, Rejection, make_protocol
from evalkit.runtime.usage import UsageLedger, counters
from evalkit.runtime.waits import ModelUnavailable, WaitPolicy, call_with_waits
from evalkit.store.runstore import now_iso

if TYPE_CHECKING:

    from evalkit.grounding import Grammar
    from evalkit.pricing import Pricing
    from evalkit.runtime.control import ControlChannel
    from evalkit.runtime.governance.governor import Verdict
    from evalkit.runtime.resume import ResumePoint
    from evalkit.runtime.supervisor import Review
    from evalkit.runtime.tools import ResultStore, ToolPlane
    from evalkit.store.runstore import RunStore
    from evalkit.store.sink import EventSink

#: Called with every record as emitted (after scrubbing): the console, a test.
Observer = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Bounds:
    """Everything that can stop a run besides its answer."""

    #: Step ceiling; 0 = none.
    steps: int = 0
    #: Wall-clock ceiling in seconds; None = none.
    seconds: float | None = None
    #: Token and cost ceilings over every model call of the run (``evalkit.runtime.budgets``);
    #: None = none. A cost ceiling needs the run's ``pricing``.
    tokens: int | None = None
    cost: float | None = None
    #: How long to wait out an endpoint that makes a call wait.
    waits: WaitPolicy = field(default_factory=WaitPolicy)
    #: Characters of one tool result the model sees (the rest via ``mission_result``).
    result_chars: int = prompts.RESULT_VIEW_CHARS
    #: The stuck-loop supervisor (``evalkit.runtime.supervisor``); off with ``--no-supervisor``.
    supervisor: bool = True


@dataclass
class RunOutcome:
    """What ``Run.run`` returns: the answer and how the mission ended."""

    answer: str | None
    outcome: str
    run_id: str | None
    steps: int
    usage: dict[str, Any]
    reason: str | None = None
    budget: dict[str, Any] | None = None
    elapsed_s: float = 0.0
    #: Records emitted; 0 means the run failed before saying anything.
    records: int = 0
    #: The traceback when the loop itself crashed (a bug, never the agent's fault).
    error: str | None = None
    #: Whose fault ended the run when a model call failed for good: ``transport`` or
    #: ``configuration`` (``evalkit.runtime.backends.FAULTS``); None otherwise.
    fault: str | None = None
    #: The first write the run store refused (a full disk), in one sentence; None when
    #: every record reached it. The recording is then incomplete, whatever the outcome.
    unrecorded: str | None = None


class _CallFailed(Exception):
    """A model call that could not be made; ``reason`` says why in one sentence."""

    def __init__(self, reason: str, fault: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fault = fault


class _Finish(Exception):
    """How the loop ends itself: the outcome and what rides ``mission_finished``."""

    def __init__(self, outcome: str, *, reason: str | None = None,
                 budget: dict[str, Any] | None = None, answer: str | None = None,
                 fault: str | None = None) -> None:
        super().__init__(outcome)
        self.outcome, self.reason, self.budget, self.answer = outcome, reason, budget, answer
        self.fault = fault


class StepCounter:
    """The run's step counter, shared by its branches: an index is taken under ``lock``."""

    def __init__(self, taken: int = 0) -> None:
        #: Steps started so far (the next step's index).
        self.taken = taken
        self.lock = threading.Lock()


class _Outlet:
    """Where every record of one run leaves; its branches share it.

    Under one lock: the emitter (run store, then sink), the watchers that
    must see every record (the supervisor, the grounding evidence, a swarm's
    step log) and the observer. Once ``sealed`` (``mission_finished`` is
    out) nothing more leaves: a straggling branch cannot write past the end.
    """

    def __init__(self, emitter: Any, watchers: list[Any], observer: Observer | None) -> None:
        self.emitter, self.watchers, self.observer = emitter, watchers, observer
        self.sealed = False
        self._lock = threading.Lock()

    def emit(self, record: dict[str, Any], *, store: bool = True) -> None:
        """``store=False``: to the sink only, for the last word of a run whose store
        refused it (the harness still learns how the run ended)."""
        with self._lock:
            if self.sealed:
                return
            emitted = self.emitter.emit(record) if store else self.emitter.stream(record)
            self.see(emitted)
            if self.observer is not None:
                try:
                    self.observer(emitted)
                except Exception:  # a broken console never fails the mission
                    pass

    def see(self, record: dict[str, Any]) -> None:
        for watcher in self.watchers:
            if watcher is not None:
                watcher.see(record)


class Run:
    """One mission: ``Run(model, plane, bounds=..., store=..., sink=...).run(objective)``.

    The caller owns the plane's lifecycle (start it before, close it after);
    the run owns its recording (a new run directory in ``store`` when given)
    and never closes the sink. ``run`` may be called once.
    """

    def __init__(self, model: ModelBackend, plane: ToolPlane, *, bounds: Bounds | None = None,
                 store: RunStore | None = None, sink: EventSink | None = None,
                 protocol: str | Protocol = "json", observer: Observer | None = None,
                 results: ResultStore | None = None, meta: dict[str, Any] | None = None,
                 sandbox: str | None = None, profile: str | None = None,
                 cancel_token: CancelToken | None = None, governor: Governor | None = None,
                 control: ControlChannel | None = None,
                 grounding: Grammar | None = None, resume: ResumePoint | None = None,
                 closing_meta: Callable[[], dict[str, Any]] | None = None,
                 pricing: Pricing | None = None) -> None:
        self.model, self.plane, self.store, self.sink = model, plane, store, sink
        #: Prices each model call (``cost`` on its usage and the run's totals); None: unpriced.
        self.pricing = pricing
        self.bounds = bounds or Bounds()
        self.protocol = make_protocol(protocol) if isinstance(protocol, str) else protocol
        self.observer = observer
        self.results = results if results is not None else plane.results
        self.meta = dict(meta or {})
        self.sandbox = sandbox or getattr(getattr(plane, "sandbox", None), "name", "none")
        #: Every dispatch decision; deny-by-default (``safe``) when none is given.
        self.governor = governor or Governor(profile or "safe")
        self.profile = self.governor.profile
        self.token = cancel_token or CancelToken()
        self.control = control
        #: The grounding grammar (a skill's ``grounding:`` block); None = no validator.
        self.grounding = grounding
        #: An unfinished run to continue (``--resume``) instead of creating one.
        self.resume = resume
        #: Extra meta written when the run closes (a replay's ``drift``).
        self.closing_meta = closing_meta
        #: The ``branch`` every record of this lane carries (None: the records carry none).
        self.branch: str | None = None
        #: The main line takes injections, re-lists the plane and answers the mission; a
        #: branch lane (``branch_off``) does none of these.
        self._main = True

    def cancel(self) -> None:
        """Wind the run up at its next boundary (safe from any thread)."""
        self.token.cancel()

    # -- the run --------------------------------------------------------------------------

    def run(self, objective: str) -> RunOutcome:
        """Run the mission to its end; always returns, always closes the stream."""
        from evalkit.store.emitter import Emitter

        self._t0 = time.monotonic()
        self._counter, self._usage, self._started = StepCounter(), UsageLedger(), False
        self._usage.priced = self.pricing is not None
        self._spend = Spend(self.bounds.tokens, self.bounds.cost, self.pricing,
                            priced_as(self.model))
        self._usage_lock = threading.Lock()
        self._catalogue: list[dict[str, Any]] = []
        self._supervisor, self._grounding = _watchers(self.bounds.supervisor, self.grounding)
        self._stuck = False
        self._unrecorded: str | None = None
        self._next_step: dict[str, Any] = {}  # fields for the next step_started
        if self.resume is not None:
            self._writer = self.resume.writer
        else:
            self._writer = self.store.create(self._meta(objective)) if self.store else None
        self._emitter = Emitter(self.sink, self._writer)
        self._outlet = _Outlet(self._emitter, [self._supervisor, self._grounding], self.observer)
        finish, error = _Finish("incomplete"), None
        try:
            self._start(objective)
            self._work(objective)
        except _Finish as done:
            finish = done
        except (Cancelled, KeyboardInterrupt):
            finish = _Finish("incomplete", reason="cancelled")
        except RecordingFailed as exc:  # the disk, not the agent nor evalkit
            self._unrecorded = exc.message
            finish = _Finish("incomplete", reason=f"recording failed: {exc.message}")
        except Exception as exc:  # a bug in the loop or a part: the run still closes
            error = traceback.format_exc()
            finish = _Finish("incomplete", reason=f"crashed: {type(exc).__name__}: {exc}")
        finally:
            self.token.close()
            elapsed = self._close(objective, finish)
        return RunOutcome(
            answer=finish.answer, outcome=finish.outcome,
            run_id=self._writer.run_id if self._writer else None, steps=self._counter.taken,
            usage=self._usage.totals(), reason=finish.reason, budget=finish.budget,
            elapsed_s=elapsed, records=self._emitter.emitted, error=error, fault=finish.fault,
            unrecorded=self._unrecorded)

    def _work(self, objective: str) -> None:
        """What runs between ``mission_started`` and the end: the loop (a swarm stages it)."""
        self._loop()

    def branch_off(self, branch: str, messages: list[dict[str, Any]], *,
                   token: CancelToken | None = None) -> Run:
        """A lane of this run that works one branch of it (a swarm's plan step).

        It shares every run-wide part by reference — plane, governor, results,
        bounds, protocol, recording, stream and its watchers, usage, clock and
        step counter — and the model (through ``for_branch``: a backend that
        keeps branches apart, such as a replay, serves this branch its own
        recorded turns). Its own: the conversation ``messages``, ``branch`` on
        every record, and ``token`` (a lane on another thread gets a view of
        the run's). It has no supervisor and no grounding gate of its own (its
        records still reach the run's), hears the control channel only for
        gate decisions (no injected turns, no ``cancel_step``), never re-lists
        the plane, and its answer is not the mission's: ``_loop`` ends with
        ``_Finish("answered", answer=...)`` without writing an ``answer`` record.
        """
        lane = copy.copy(self)
        lane.branch, lane._main = branch, False
        lane.model = for_branch(self.model, branch)
        lane.token = token or self.token
        lane._messages = list(messages)
        lane._supervisor = lane._grounding = None
        lane._stuck, lane._next_step = False, {}
        return lane

    def _meta(self, objective: str) -> dict[str, Any]:
        return {"objective": objective, "protocol": self.protocol.name,
                "provider": getattr(self.model, "provider", None),
                "model": getattr(self.model, "model", None),
                "max_steps": self.bounds.steps, "max_seconds": self.bounds.seconds,
                **_with({}, max_tokens=self.bounds.tokens, max_cost=self.bounds.cost,
                        pricing=self.pricing.describe() if self.pricing else None,
                        priced_as=_priced_apart(self.model)),
                **self.meta}

    def _start(self, objective: str) -> None:
        self._audit_ref = self.governor.begin(
            self._writer.run_id if self._writer else None, objective)
        self._catalogue = [d.as_dict() for d in self.governor.offer(self.plane.catalogue())]
        self._tools = self.protocol.tools(self._catalogue)
        self._messages = [self.governor.brief(self.protocol.system_message(self._catalogue)),
                          {"role": "user", "content": objective}]
        if self.resume is not None:  # its mission_started is on record already
            self._continue(self.resume)
            return
        if self._writer is not None:
            with self.token.shield():
                self._writer.record_catalogue(self._catalogue)
        self._emit_started(objective)

    def _continue(self, point: ResumePoint) -> None:
        """A resumed run: the conversation, steps and usage so far, as recorded."""
        self._messages += point.messages
        self._counter.taken, self._usage, self._started = point.steps, point.usage, True
        self._usage.priced = self.pricing is not None
        for record in point.history:
            self._outlet.see(record)
        with self.token.shield():
            self._next_step.update(point.begin(self._catalogue))

    def _emit_started(self, objective: str) -> None:
        record = _with({
            "event": "mission_started", "schema_version": SCHEMA_VERSION,
            "objective": objective, "catalogue": self._names(), "gated": self.governor.gated,
            "max_steps": self.bounds.steps, "history": 0, "sandbox": self.sandbox,
            "audit_ref": getattr(self, "_audit_ref", None),
        }, profile=self.profile, run_id=self._writer.run_id if self._writer else None,
            protocol=None if self.protocol.name == "json" else self.protocol.name,
            granted=self.governor.granted)
        self._started = True
        self._emit(record)

    def _loop(self) -> None:
        while True:
            self.token.check()
            self._check_clock()
            self._check_steps()
            taken = self._counter.taken
            changed = self._refresh() if taken and self._main else None
            review = self._supervise(taken) if taken else None
            step: dict[str, Any] = dict(self._next_step)
            self._next_step = {}
            if changed is not None:
                step["catalogue"] = changed
            injected = self._take_control() if self._main else []
            if review is not None:
                step["review"] = review.record()
                injected = injected + (review.injected or [])
            if injected:
                step["injected"] = injected
            index = self._open_step(step)
            reply = self._ask(index)
            items = self.protocol.read(reply, self._names())
            self._messages.append(self.protocol.assistant_message(reply, items))
            usage, ordinal = reply.usage, 0
            for item in items:
                if isinstance(item, Answer):
                    self._answer(item, usage)
                    break  # it went back for repair: the loop goes on
                if isinstance(item, Rejection) or self._stuck:
                    if not isinstance(item, Rejection):  # a stuck run's last turn runs nothing
                        item = Rejection(prompts.STUCK_CALL, tool=item.tool, id=item.id)
                    self._emit(_with({"event": "reply_rejected", "index": index,
                                      "problem": item.problem}, tool=item.tool, usage=usage))
                    self._messages.append(self.protocol.rejection_message(item))
                else:
                    self.token.check()
                    self._check_clock()
                    if self._main and self.control is not None and self.control.step_cancelled():
                        skipped = Rejection(control_words.SKIPPED_CALL.format(tool=item.tool),
                                            tool=item.tool, id=item.id)
                        self._emit(_with({"event": "reply_rejected", "index": index,
                                          "problem": skipped.problem}, tool=item.tool,
                                         usage=usage))
                        self._messages.append(self.protocol.rejection_message(skipped))
                        continue
                    self._dispatch(index, item, ordinal, usage)
                    ordinal += 1
                usage = None  # usage rides only the first record of a turn
            if self._stuck:
                raise _Finish("incomplete", reason="stuck")

    def _answer(self, item: Answer, usage: dict[str, Any] | None) -> None:
        """The answer path; returns only when the answer went back for a repair turn.

        Under a grounding grammar the verdict record comes first (interim when
        a repair turn follows); an answer that stays ungrounded is kept with
        its caveat appended (``answered_with_caveat``).
        """
        if not self._main:  # a branch's reply settles the branch; the mission answers later
            raise _Finish("answered", answer=item.text)
        text, outcome = item.text, "answered"
        if self._grounding is not None:
            room = (not self.bounds.steps or self._counter.taken < self.bounds.steps) \
                and _can_ask_again(self.model)
            judged = self._grounding.judge(item.text, self._catalogue,
                                           can_repair=room and not self._stuck)
            self._emit(judged.record)
            if judged.repair is not None:
                self._messages.append(self.protocol.rejection_message(
                    Rejection(judged.repair, id=item.id)))
                return
            text, outcome = judged.text, judged.outcome
        self._emit(_with({"event": "answer", "text": text, "outcome": outcome}, usage=usage))
        raise _Finish(outcome, answer=text, reason="stuck" if self._stuck else None)

    def _supervise(self, index: int) -> Review | None:
        """At a step boundary: the supervisor's review of a signal that just fired, if any."""
        if self._supervisor is None:
            return None
        review = self._supervisor.boundary(lambda messages: self._review_call(index, messages))
        if review is not None:
            if review.message:
                self._messages.append({"role": "user", "content": review.message})
            self._stuck = review.verdict == "stuck"
        return review

    def _take_control(self) -> list[str]:
        """At a step boundary: the operator's injected turns (and a late cancel_step note)."""
        if self.control is None:
            return []
        if self.control.late_cancel_step():
            self._messages.append({"role": "user", "content": control_words.LATE_CANCEL_STEP})
        injected = self.control.injections()
        self._messages += [{"role": "user", "content": text} for text in injected]
        return injected

    def _open_step(self, fields: dict[str, Any]) -> int:
        """Take the next step index and write its ``step_started``, under the counter's lock.

        The step ceiling is checked again here: parallel branches reach it together.
        """
        with self._counter.lock:
            self._check_steps()
            index = self._counter.taken
            self._counter.taken = index + 1
            self._emit({"event": "step_started", "index": index, **fields})
        return index

    def _check_steps(self) -> None:
        taken = self._counter.taken
        if self.bounds.steps and taken >= self.bounds.steps:
            raise _Finish("budget_exhausted", budget={
                "which": "steps", "limit": self.bounds.steps, "spent": taken})

    def _check_clock(self) -> None:
        if self.bounds.seconds is not None and time.monotonic() - self._t0 >= self.bounds.seconds:
            raise self._out_of_time()

    def _deadline(self) -> float | None:
        """The ``time.monotonic()`` instant the mission's seconds run out; None: no clock."""
        return None if self.bounds.seconds is None else self._t0 + self.bounds.seconds

    def _out_of_time(self) -> _Finish:
        """How a run whose seconds ran out ends, whether between calls or during one."""
        return _Finish("budget_exhausted", budget={
            "which": "seconds", "limit": self.bounds.seconds,
            "spent": round(time.monotonic() - self._t0, 3)})

    def _refresh(self) -> list[str] | None:
        """Re-list the plane at a step boundary; the new names when the catalogue changed."""
        try:
            if not within(self._deadline(), self.plane.refresh, what="refresh"):
                return None
        except OutOfTime:
            raise self._out_of_time() from None
        except Exception:  # a server that died: its calls fail as ordinary results instead
            return None
        new = [d.as_dict() for d in self.governor.offer(self.plane.catalogue())]
        if new == self._catalogue:
            return None
        old_names, self._catalogue = self._names(), new
        names = self._names()
        self._tools = self.protocol.tools(new)
        added = [n for n in names if n not in old_names]
        removed = [n for n in old_names if n not in names]
        self._messages.append(self.protocol.catalogue_message(new, added, removed))
        if self._writer is not None:
            with self.token.shield():
                self._writer.record_catalogue(new)
        return names

    def _ask(self, index: int) -> Reply:
        """One mission turn; a call that cannot be made ends the run ``incomplete``."""
        try:
            return self._complete(index, self._messages, self._tools, "mission")
        except _CallFailed as failed:
            raise _Finish("incomplete", reason=failed.reason, fault=failed.fault) from None

    def _review_call(self, index: int, messages: list[dict[str, Any]]) -> Reply | None:
        """A supervisor review: one plain call; None when it could not be made."""
        try:
            return self._complete(index, messages, None, "plain")
        except _CallFailed:
            return None

    def _complete(self, index: int, messages: list[dict[str, Any]],
                  tools: list[dict[str, Any]] | None, kind: str) -> Reply:
        """One model call, waited out, metered, priced and recorded (failed calls too).

        A call whose estimated prompt would cross a token or cost budget is not made; a
        reply that crossed one is recorded and ends the run (``evalkit.runtime.budgets``).
        """
        self._check_clock()  # a call begun past the deadline would only be abandoned
        if self._spend.bounded:
            with self._usage_lock:
                totals = self._usage.totals()
            over = self._spend.before(totals, messages, tools)
            if over is not None:
                raise _Finish("budget_exhausted", budget=over)
        request = {"messages": messages, "extra": _with({
            **self.model.describe(), "protocol": self.protocol.name, "tools": tools},
            branch=self.branch)}
        deadline = self._deadline()

        def state(name: str, detail: str | None, since_s: float, retry: float | None) -> None:
            self._emit(_with({"event": "model_state", "state": name,
                              "provider": self.model.provider, "model": self.model.model,
                              "index": index, "since_s": round(since_s, 3)},
                             detail=detail, retry_after_s=retry))

        started = now_iso()  # kept on the model.jsonl line: the tables time the call
        try:
            reply = call_with_waits(
                lambda: within(deadline, lambda: self.model.complete(messages, tools, kind=kind),
                               what="model-call"),
                policy=self.bounds.waits, deadline=deadline, on_state=state,
                pause=self.token.pause)
        except OutOfTime:
            self._record_call(kind, request, {"error": ABANDONED.format(what="the model call")},
                              started)
            raise self._out_of_time() from None
        except ModelUnavailable as exc:
            self._record_call(kind, request, {"error": str(exc), "fault": exc.fault}, started)
            raise _CallFailed(str(exc), exc.fault) from None
        except ScriptExhausted as exc:
            self._record_call(kind, request, {"error": str(exc)}, started)
            raise _CallFailed(str(exc)) from None
        except Exception as exc:
            self._record_call(kind, request, {"error": f"{type(exc).__name__}: {exc}"}, started)
            raise _CallFailed(f"the model call failed: {type(exc).__name__}: {exc}") from None
        if self.pricing is not None:  # what the provider said, plus what it cost here
            reply.usage = {**(reply.usage or {}), "cost": self._spend.cost(counters(reply.usage))}
        with self._usage_lock:
            self._usage.add(reply.usage)
            totals = self._usage.totals()
        self._record_call(kind, request, reply.as_record(), started)
        over = self._spend.after(totals) if self._spend.bounded else None
        if over is not None:
            raise _Finish("budget_exhausted", budget=over)
        return reply

    def _record_call(self, kind: str, request: dict[str, Any], reply: dict[str, Any],
                     started: str | None = None) -> None:
        if self._writer is not None:
            with self.token.shield():
                self._writer.record_model_call(kind, request, reply, started)

    def _dispatch(self, index: int, call: Call, ordinal: int,
                  usage: dict[str, Any] | None) -> None:
        """``tool_call``, the governed dispatch, the whole result kept and recorded, ``tool_result``.

        A gated call stands at its gate first: it is carried out only once a
        person said yes; with nobody deciding, the run ends ``awaiting_approval``.
        """
        verdict = self.governor.judge(self.plane.descriptor(call.tool), call.tool,
                                      dict(call.arguments))
        if verdict.gated:
            verdict = self._stand_at_gate(index, call, verdict)
        self._emit(_with({"event": "tool_call", "index": index, "tool": call.tool,
                          "arguments": dict(call.arguments)}, usage=usage, call=ordinal or None))
        result = self.governor.carry_out(_Clocked(self.plane, self._deadline()), call.tool,
                                         dict(call.arguments), verdict, index=index,
                                         call=ordinal)
        handle = self.results.put(result.output)
        if self._writer is not None:
            with self.token.shield():
                self._writer.record_tool_call(call.tool, dict(call.arguments), result.as_record())
        view, truncated = prompts.result_view(result.output, result.error, result.ok, handle,
                                              limit=self.bounds.result_chars)
        self._emit(_with({"event": "tool_result", "index": index, "tool": call.tool,
                          "arguments": dict(call.arguments), "ok": result.ok,
                          "exit_code": result.exit_code, "output": result.output,
                          "error": result.error, "handle": handle, "truncated": truncated},
                         call=ordinal or None))
        note = prompts.result_note(call.tool, handle, result.ok, result.exit_code, view)
        self._messages.append(self.protocol.result_message(call, note))
        self._check_clock()  # a call that ran past the deadline (or was abandoned there) ends it

    def _stand_at_gate(self, index: int, call: Call, verdict: Verdict) -> Verdict:
        """``gate_requested``, then wait (``--gate-wait``) for a person; none -> awaiting."""
        with self.token.shield():
            gate = self.governor.request(verdict, call.tool, dict(call.arguments), index)
        self._emit({"event": "gate_requested", "index": index, "tool": call.tool,
                    "arguments": dict(call.arguments), "reason": gate.reason,
                    "approval_id": gate.approval_id, "digest": gate.digest})
        decided = self.governor.await_decision(gate, self.control, self.token, self._deadline())
        if decided is None:
            raise _Finish("awaiting_approval")
        return decided

    # -- the end --------------------------------------------------------------------------

    def _close(self, objective: str, finish: _Finish) -> float:
        """Write ``mission_finished`` (and a missing ``mission_started``), close the record."""
        elapsed = round(time.monotonic() - self._t0, 3)
        try:
            if not self._started:
                self._emit_started(objective)
            finished = _with({"event": "mission_finished", "outcome": finish.outcome,
                              "steps": self._counter.taken, "max_steps": self.bounds.steps,
                              "usage": self._usage.totals(), "elapsed_s": elapsed},
                             reason=finish.reason, budget=finish.budget)
            try:
                self._emit(finished)
            except RecordingFailed as exc:  # the disk is full: the sink still hears the end
                self._unrecorded = self._unrecorded or exc.message
                self._emit(finished, store=False)
            except Exception:  # the store broke: the stream still gets its last word
                if self.sink is not None:
                    from evalkit.redact import redact_obj

                    self.sink.write(redact_obj(finished))
                raise
        finally:
            self._outlet.sealed = True
            self.governor.end()
            if self._writer is not None:
                self._close_writer(finish, elapsed)
        return elapsed

    def _close_writer(self, finish: _Finish, elapsed: float) -> None:
        """meta.json's last word and the seal; a disk that refuses them is noted, not raised
        (the stream is closed already, and the run's own reason says what was lost)."""
        try:
            try:
                extra = self.closing_meta() if self.closing_meta is not None else {}
                self._writer.update_meta(outcome=finish.outcome, reason=finish.reason,
                                         steps=self._counter.taken, elapsed_s=elapsed, **extra)
            finally:
                from evalkit.gate.certificates import close_certified

                close_certified(self._writer)
        except RecordingFailed as exc:
            self._unrecorded = self._unrecorded or exc.message

    def _emit(self, record: dict[str, Any], *, store: bool = True) -> None:
        if self.branch is not None:
            record.setdefault("branch", self.branch)
        with self.token.shield():
            self._outlet.emit(record, store=store)

    def _names(self) -> list[str]:
        return [tool["name"] for tool in self._catalogue]


#: What a call still running when the mission's seconds ran out left in the record.
ABANDONED = "abandoned: the mission's seconds ran out while {what} was running"


class _Clocked:
    """The plane as the governor dispatches through it: never past the mission's deadline.

    A call still running at the deadline is abandoned (``evalkit.runtime.inflight``)
    and comes back as a failing result saying so, which the governor audits and
    the loop records like any other before it ends the run.
    """

    def __init__(self, plane: ToolPlane, deadline: float | None) -> None:
        self.plane, self.deadline = plane, deadline

    def dispatch(self, name: str, arguments: dict[str, Any]) -> Any:
        from evalkit.runtime.tools import ToolResult

        try:
            return within(self.deadline, lambda: self.plane.dispatch(name, arguments),
                          what=f"tool-{name}")
        except OutOfTime:
            return ToolResult.failure(ABANDONED.format(what=name), None)


def _watchers(supervised: bool, grammar: Grammar | None) -> tuple[Any, Any]:
    """The run's supervisor and grounding gate (imported here: ``--help`` never pays for them)."""
    supervisor = grounding = None
    if supervised:
        from evalkit.runtime.supervisor import Supervisor

        supervisor = Supervisor()
    if grammar is not None:
        from evalkit.runtime.repair import GroundingGate

        grounding = GroundingGate(grammar)
    return supervisor, grounding


def for_branch(model: ModelBackend, branch: str) -> ModelBackend:
    """The backend a branch lane talks to: ``model.for_branch(branch)`` where it has one.

    A backend that keeps branches apart (a replay serves each branch its own
    recorded turns) offers ``for_branch``; any other is shared as it is.
    """
    view = getattr(model, "for_branch", None)
    return view(branch) if callable(view) else model


def _can_ask_again(model: Any) -> bool:
    """False when the backend knows it holds no further turn (a replay at its recording's end).

    A grounding repair the recording never made cannot be served, so the
    answer is judged as it stands (kept with its caveat) instead of the replay
    running off the end.
    """
    remaining = getattr(model, "remaining", None)
    return not callable(remaining) or remaining("mission") > 0


def _priced_apart(model: Any) -> list[str | None] | None:
    """``[provider, model]`` a backend is priced as, when that is not what it calls itself
    (a replay prices as what it recorded): what offline re-pricing reads from meta.json."""
    identity = priced_as(model)
    own = (getattr(model, "provider", None), getattr(model, "model", None))
    return list(identity) if identity != own else None


def _with(record: dict[str, Any], **optional: Any) -> dict[str, Any]:
    """``record`` plus each optional field that has a value (absent, never null)."""
    record.update({k: v for k, v in optional.items() if v is not None})
    return record
