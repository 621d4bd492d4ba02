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
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evalkit.contract import SCHEMA_VERSION
from evalkit.runtime import prompts
from evalkit.runtime.backends import ModelBackend, Reply, ScriptExhausted
from evalkit.runtime.cancel import Cancelled, CancelToken
from evalkit.runtime.protocol import Answer, Call, Protocol, Rejection, make_protocol
from evalkit.runtime.usage import UsageLedger
from evalkit.runtime.waits import ModelUnavailable, WaitPolicy, call_with_waits

if TYPE_CHECKING:
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
    #: How long to wait out an endpoint that makes a call wait.
    waits: WaitPolicy = field(default_factory=WaitPolicy)
    #: Characters of one tool result the model sees (the rest via ``mission_result``).
    result_chars: int = prompts.RESULT_VIEW_CHARS


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


class _Finish(Exception):
    """How the loop ends itself: the outcome and what rides ``mission_finished``."""

    def __init__(self, outcome: str, *, reason: str | None = None,
                 budget: dict[str, Any] | None = None, answer: str | None = None) -> None:
        super().__init__(outcome)
        self.outcome, self.reason, self.budget, self.answer = outcome, reason, budget, answer


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
                 cancel_token: CancelToken | None = None) -> None:
        self.model, self.plane, self.store, self.sink = model, plane, store, sink
        self.bounds = bounds or Bounds()
        self.protocol = make_protocol(protocol) if isinstance(protocol, str) else protocol
        self.observer = observer
        self.results = results if results is not None else plane.results
        self.meta = dict(meta or {})
        self.sandbox = sandbox or getattr(getattr(plane, "sandbox", None), "name", "none")
        self.profile = profile
        self.token = cancel_token or CancelToken()

    def cancel(self) -> None:
        """Wind the run up at its next boundary (safe from any thread)."""
        self.token.cancel()

    # -- the run --------------------------------------------------------------------------

    def run(self, objective: str) -> RunOutcome:
        """Run the mission to its end; always returns, always closes the stream."""
        from evalkit.store.emitter import Emitter

        self._t0 = time.monotonic()
        self._steps, self._usage, self._started = 0, UsageLedger(), False
        self._catalogue: list[dict[str, Any]] = []
        self._writer = self.store.create(self._meta(objective)) if self.store else None
        self._emitter = Emitter(self.sink, self._writer)
        finish, error = _Finish("incomplete"), None
        try:
            self._start(objective)
            self._loop()
        except _Finish as done:
            finish = done
        except (Cancelled, KeyboardInterrupt):
            finish = _Finish("incomplete", reason="cancelled")
        except Exception as exc:  # a bug in the loop or a part: the run still closes
            error = traceback.format_exc()
            finish = _Finish("incomplete", reason=f"crashed: {type(exc).__name__}: {exc}")
        finally:
            self.token.close()
            elapsed = self._close(objective, finish)
        return RunOutcome(
            answer=finish.answer, outcome=finish.outcome,
            run_id=self._writer.run_id if self._writer else None, steps=self._steps,
            usage=self._usage.totals(), reason=finish.reason, budget=finish.budget,
            elapsed_s=elapsed, records=self._emitter.emitted, error=error)

    def _meta(self, objective: str) -> dict[str, Any]:
        return {"objective": objective, "protocol": self.protocol.name,
                "provider": getattr(self.model, "provider", None),
                "model": getattr(self.model, "model", None),
                "max_steps": self.bounds.steps, "max_seconds": self.bounds.seconds, **self.meta}

    def _start(self, objective: str) -> None:
        self._catalogue = [d.as_dict() for d in self.plane.catalogue()]
        self._tools = self.protocol.tools(self._catalogue)
        self._messages = [self.protocol.system_message(self._catalogue),
                          {"role": "user", "content": objective}]
        if self._writer is not None:
            with self.token.shield():
                self._writer.record_catalogue(self._catalogue)
        self._emit_started(objective)

    def _emit_started(self, objective: str) -> None:
        record = _with({
            "event": "mission_started", "schema_version": SCHEMA_VERSION,
            "objective": objective, "catalogue": self._names(), "gated": [],
            "max_steps": self.bounds.steps, "history": 0, "sandbox": self.sandbox,
            "audit_ref": None,
        }, profile=self.profile, run_id=self._writer.run_id if self._writer else None,
            protocol=None if self.protocol.name == "json" else self.protocol.name)
        self._started = True
        self._emit(record)

    def _loop(self) -> None:
        while True:
            self.token.check()
            self._check_clock()
            if self.bounds.steps and self._steps >= self.bounds.steps:
                raise _Finish("budget_exhausted", budget={
                    "which": "steps", "limit": self.bounds.steps, "spent": self._steps})
            changed = self._refresh() if self._steps else None
            index, self._steps = self._steps, self._steps + 1
            step: dict[str, Any] = {"event": "step_started", "index": index}
            if changed is not None:
                step["catalogue"] = changed
            self._emit(step)
            reply = self._ask(index)
            items = self.protocol.read(reply, self._names())
            self._messages.append(self.protocol.assistant_message(reply, items))
            usage, ordinal = reply.usage, 0
            for item in items:
                if isinstance(item, Answer):
                    self._emit(_with({"event": "answer", "text": item.text,
                                      "outcome": "answered"}, usage=usage))
                    raise _Finish("answered", answer=item.text)
                if isinstance(item, Rejection):
                    self._emit(_with({"event": "reply_rejected", "index": index,
                                      "problem": item.problem}, tool=item.tool, usage=usage))
                    self._messages.append(self.protocol.rejection_message(item))
                else:
                    self.token.check()
                    self._check_clock()
                    self._dispatch(index, item, ordinal, usage)
                    ordinal += 1
                usage = None  # usage rides only the first record of a turn

    def _check_clock(self) -> None:
        spent = time.monotonic() - self._t0
        if self.bounds.seconds is not None and spent >= self.bounds.seconds:
            raise _Finish("budget_exhausted", budget={
                "which": "seconds", "limit": self.bounds.seconds, "spent": round(spent, 3)})

    def _refresh(self) -> list[str] | None:
        """Re-list the plane at a step boundary; the new names when the catalogue changed."""
        try:
            if not self.plane.refresh():
                return None
        except Exception:  # a server that died: its calls fail as ordinary results instead
            return None
        new = [d.as_dict() for d in self.plane.catalogue()]
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
        """One model call, waited out and recorded (failed calls too)."""
        request = {"messages": self._messages, "extra": {
            **self.model.describe(), "protocol": self.protocol.name, "tools": self._tools}}
        deadline = None if self.bounds.seconds is None else self._t0 + self.bounds.seconds

        def state(name: str, detail: str | None, since_s: float, retry: float | None) -> None:
            self._emit(_with({"event": "model_state", "state": name,
                              "provider": self.model.provider, "model": self.model.model,
                              "index": index, "since_s": round(since_s, 3)},
                             detail=detail, retry_after_s=retry))

        try:
            reply = call_with_waits(
                lambda: self.model.complete(self._messages, self._tools, kind="mission"),
                policy=self.bounds.waits, deadline=deadline, on_state=state,
                pause=self.token.pause)
        except (ModelUnavailable, ScriptExhausted) as exc:
            self._record_call(request, {"error": str(exc)})
            raise _Finish("incomplete", reason=str(exc)) from None
        except Exception as exc:
            self._record_call(request, {"error": f"{type(exc).__name__}: {exc}"})
            raise _Finish("incomplete",
                          reason=f"the model call failed: {type(exc).__name__}: {exc}") from None
        self._usage.add(reply.usage)
        self._record_call(request, reply.as_record())
        return reply

    def _record_call(self, request: dict[str, Any], reply: dict[str, Any]) -> None:
        if self._writer is not None:
            with self.token.shield():
                self._writer.record_model_call("mission", request, reply)

    def _dispatch(self, index: int, call: Call, ordinal: int,
                  usage: dict[str, Any] | None) -> None:
        """``tool_call``, the dispatch, the whole result kept and recorded, ``tool_result``."""
        self._emit(_with({"event": "tool_call", "index": index, "tool": call.tool,
                          "arguments": dict(call.arguments)}, usage=usage, call=ordinal or None))
        result = self.plane.dispatch(call.tool, dict(call.arguments))
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

    # -- the end --------------------------------------------------------------------------

    def _close(self, objective: str, finish: _Finish) -> float:
        """Write ``mission_finished`` (and a missing ``mission_started``), close the record."""
        elapsed = round(time.monotonic() - self._t0, 3)
        try:
            if not self._started:
                self._emit_started(objective)
            finished = _with({"event": "mission_finished", "outcome": finish.outcome,
                              "steps": self._steps, "max_steps": self.bounds.steps,
                              "usage": self._usage.totals(), "elapsed_s": elapsed},
                             reason=finish.reason, budget=finish.budget)
            try:
                self._emit(finished)
            except Exception:  # the store broke: the stream still gets its last word
                if self.sink is not None:
                    from evalkit.redact import redact_obj

                    self.sink.write(redact_obj(finished))
                raise
        finally:
            if self._writer is not None:
                try:
                    self._writer.update_meta(outcome=finish.outcome, reason=finish.reason,
                                             steps=self._steps, elapsed_s=elapsed)
                finally:
                    self._writer.close()
        return elapsed

    def _emit(self, record: dict[str, Any]) -> None:
        with self.token.shield():
            emitted = self._emitter.emit(record)
        if self.observer is not None:
            try:
                self.observer(emitted)
            except Exception:  # a broken console never fails the mission
                pass

    def _names(self) -> list[str]:
        return [tool["name"] for tool in self._catalogue]


def _with(record: dict[str, Any], **optional: Any) -> dict[str, Any]:
    """``record`` plus each optional field that has a value (absent, never null)."""
    record.update({k: v for k, v in optional.items() if v is not None})
    return record
