"""One recorded mission of a program evalkit did not write.

A stream written by hand (``examples/my_agent.py``) can be scored, but nothing
else can be re-derived from it: there is no run directory, no model log, no
tool log, no seal. ``Mission`` gives any Python agent what the built-in runtime
has, by using the very same parts: the run store's writer (``RunStore``:
``seq``, envelopes, fsync, the lock, the seal), the ``Emitter`` (run store
first, then the event sink) and the redactor inside them. Only the loop is the
agent's own; the recorder is told what happened through ``model_call``,
``tool_call`` and ``answer``, which the openai wrapper, the ``@tool``
decorator and the LangChain handler call.

What counts as a step: one model call, as in the built-in loop. A tool called
before any model call opens a step of its own, so every ``tool_call`` has the
``index`` the contract requires. The usage a model call reported rides the
first record of its turn, as the contract says.

How a mission ends is said in the contract's words only: ``answered`` when
``answer`` was given, else ``incomplete`` — with the reason ``crashed: …``
when an exception left the ``with`` block (the agent's failure, re-raised),
``cancelled`` on SIGTERM or Ctrl-C, and ``transport fault: …`` /
``configuration fault: …`` when the exception was a model call's that the
endpoint caused, so the scorer charges the machine room, not the agent.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from evalkit.contract import SCHEMA_VERSION
from evalkit.errors import EvalkitError, RecordingFailed
from evalkit.record._calls import ModelCall, ToolCall
from evalkit.record._current import Opened, Terminated, enter, leave
from evalkit.record._jsonable import jsonable
from evalkit.record._replay import REPLAY_ENV, Replay, find_run
from evalkit.runtime.backends import ScriptExhausted
from evalkit.runtime.tools.descriptor import ResultStore, ToolResult
from evalkit.runtime.usage import UsageLedger
from evalkit.store.emitter import Emitter
from evalkit.store.layout import runs_root
from evalkit.store.runstore import RunStore, RunWriter
from evalkit.store.sink import EVENTS_ENV, EventSink

#: What a model call's ``kind`` is in model.jsonl (the built-in loop's word for a turn).
MISSION_CALL = "mission"
#: The reason of a mission that ended with no answer and no exception.
NO_ANSWER = "ended without an answer"


class Mission:
    """One run: ``with evalkit.record.mission("objective") as m: …``.

    ``runs``: the run store root (default ``EVALKIT_RUNS``, as the built-in runtime;
    ``none`` records nothing). ``events``: the event sink (``-``, ``fd:N`` or a path;
    default ``EVALKIT_EVENTS``, which ``evalkit run`` sets). ``suite_key``: the suite
    mission this run answers; recorded by hand (no harness), the run is filed under
    ``<runs>/<suite_key>/`` so ``evalkit score --runs <runs>`` finds it. ``catalogue``:
    tool names (or ``{name, description, parameters}``) offered from the start.
    ``replay``: a recording to replay (default ``EVALKIT_REPLAY``; ``evalkit.record._replay``):
    the wrapped client is served its replies and dials nothing.
    """

    def __init__(self, objective: str, *, suite_key: str | None = None,
                 runs: str | Path | None = None, events: str | None = None,
                 catalogue: Iterable[str | Mapping[str, Any]] = (),
                 meta: Mapping[str, Any] | None = None, replay: str | Path | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        if suite_key is not None and (not suite_key or "/" in suite_key or
                                      suite_key.startswith(".")):
            raise EvalkitError(f"suite_key {suite_key!r} is not a mission key: "
                               "use the key as the suite names it (no '/', no leading '.')")
        self.objective = objective
        self.suite_key = suite_key
        self.run_id: str | None = None
        self.answer_text: str | None = None
        self.outcome: str | None = None
        self.reason: str | None = None
        self.closed = False
        self._runs, self._events, self._environ = runs, events, environ
        self._replay_spec = replay
        #: The recording this run replays (``evalkit.record._replay``); None: a live run.
        self.replay: Replay | None = None
        self._meta = dict(meta or {})
        self._catalogue = [_descriptor(c) for c in catalogue]
        self._lock = threading.RLock()
        self._writer: RunWriter | None = None
        self._sink: EventSink | None = None
        self._emitter: Emitter | None = None
        self._usage = UsageLedger()
        self._results = ResultStore()
        self._steps = 0
        self._index: int | None = None
        self._ordinal = 0
        self._turn_usage: dict[str, Any] | None = None
        self._unrecorded: str | None = None
        self._pending: set[ModelCall] = set()
        self._fault: tuple[BaseException, str] | None = None
        self._opened: Opened | None = None
        self._t0 = time.monotonic()

    # -- opening and closing --------------------------------------------------------------

    def __enter__(self) -> Mission:
        self.open()
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        self.close(exc)

    async def __aenter__(self) -> Mission:
        return self.__enter__()

    async def __aexit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        self.close(exc)

    def open(self) -> Mission:
        """Open the run directory and the sink, write ``mission_started``."""
        from evalkit.gate.certificates import close_certified
        from evalkit.store.orphans import close_orphans
        from evalkit.store.seal import signer_or_none

        env = os.environ if self._environ is None else self._environ
        spec = self._events if self._events is not None else (env.get(EVENTS_ENV) or None)
        harnessed = self._events is None and spec is not None
        root = Path(self._runs) if self._runs is not None else runs_root(env)
        if root is not None and str(root).strip().lower() in ("none", "off"):
            root = None
        if root is not None and self.suite_key and not harnessed:
            root = root / self.suite_key
        replay = self._replay_spec if self._replay_spec is not None else env.get(REPLAY_ENV)
        if replay:
            self.replay = Replay(find_run(replay, self.objective))
        self._sink = _open_sink(spec) if spec else None
        try:
            if root is not None:
                signer, _ = signer_or_none(env)
                store = RunStore(root, signer=signer)
                # Runs whose process died get their last word, closed as this one will be.
                close_orphans(store, close=close_certified)
                self._writer = store.create(self._run_meta())
                self.run_id = self._writer.run_id
                self._record(lambda w: w.record_catalogue(self._catalogue))
        except BaseException:
            if self._sink is not None:
                self._sink.close()
            raise
        self._emitter = Emitter(self._sink, self._writer)
        self._t0 = time.monotonic()
        self._emit(_with({
            "event": "mission_started", "schema_version": SCHEMA_VERSION,
            "objective": self.objective, "catalogue": self._names(), "gated": [],
            "max_steps": 0, "history": 0, "sandbox": "none", "audit_ref": None,
        }, run_id=self.run_id))
        self._opened = enter(self)
        return self

    def close(self, exc: BaseException | None = None) -> None:
        """Write ``mission_finished`` and close the recording; safe to call twice."""
        with self._lock:
            if self.closed or self._emitter is None:
                return
            self.closed = True
            for call in list(self._pending):  # a stream the agent never read to its end
                call.abandon()
            self.outcome, self.reason = self._ending(exc)
            elapsed = round(time.monotonic() - self._t0, 3)
            self._emit(_with({"event": "mission_finished", "outcome": self.outcome,
                              "steps": self._steps, "max_steps": 0,
                              "usage": self._usage.totals(), "elapsed_s": elapsed},
                             reason=self.reason))
            try:
                if self._writer is not None:
                    try:
                        closing = self.replay.closing() if self.replay is not None else {}
                        self._writer.update_meta(outcome=self.outcome, reason=self.reason,
                                                 steps=self._steps, elapsed_s=elapsed,
                                                 **closing)
                    finally:
                        from evalkit.gate.certificates import close_certified

                        close_certified(self._writer)  # as the runtime closes its runs
            except RecordingFailed as failed:
                self._unrecorded = self._unrecorded or failed.message
            finally:
                if self._sink is not None:
                    self._sink.close()
                self._forget()

    def _ending(self, exc: BaseException | None) -> tuple[str, str | None]:
        if self._unrecorded is not None:
            return "incomplete", f"recording failed: {self._unrecorded}"
        if exc is None or (isinstance(exc, SystemExit) and not isinstance(exc, Terminated)
                           and exc.code in (0, None)):  # sys.exit() after the work is done
            if self.answer_text is not None:
                return "answered", None
            ran_off = self.replay.backend.ran_off if self.replay is not None else None
            return "incomplete", str(ran_off) if ran_off is not None else NO_ANSWER
        if isinstance(exc, (KeyboardInterrupt, Terminated, asyncio.CancelledError)):
            return "incomplete", "cancelled"
        if isinstance(exc, ScriptExhausted):  # a replay ran off its recording, or a
            return "incomplete", str(exc)      # recorded failure failed again
        if self._fault is not None and self._fault[0] is exc:
            return "incomplete", self._fault[1]
        return "incomplete", f"crashed: {type(exc).__name__}: {exc}"

    def _forget(self) -> None:
        if self._opened is not None:
            leave(self, self._opened)

    # -- what the agent did ---------------------------------------------------------------

    def model_call(self, request: Mapping[str, Any], *,
                   tools: Iterable[Mapping[str, Any]] | None = None) -> ModelCall:
        """A model call begins: its step opens now (``step_started``), before any reply.

        ``request`` is what model.jsonl keeps (``{messages, extra}``); ``tools``: the
        ``{name, description, parameters}`` offered, which update the catalogue.
        """
        with self._lock:
            self._check_open()
            changed = self._offer(tools)
            index = self._open_step(changed)
            call = ModelCall(self, index, jsonable(dict(request)))
            self._pending.add(call)
            return call

    def tool_call(self, name: str, arguments: Mapping[str, Any]) -> ToolCall:
        """A tool call begins: ``tool_call`` is written before the tool runs."""
        args = jsonable(dict(arguments))
        with self._lock:
            self._check_open()
            if self._index is None:
                self._open_step(None)
            index, ordinal = self._index, self._ordinal
            self._ordinal += 1
            self._emit(_with({"event": "tool_call", "index": index, "tool": name,
                              "arguments": args}, usage=self._take_usage(),
                             call=ordinal or None))
            return ToolCall(self, index, ordinal, name, args)

    def tool(self, name: str, arguments: Mapping[str, Any], fn: Any) -> Any:
        """Call ``fn(**arguments)`` as the tool ``name``, recording the call and its result
        or error (re-raised). An ``async`` function gives an awaitable."""
        import inspect

        if inspect.iscoroutinefunction(fn):
            return self._tool_async(name, arguments, fn)
        call = self.tool_call(name, arguments)
        try:
            value = fn(**arguments)
        except Exception as exc:
            call.failed(exc)
            raise
        call.returned(value)
        return value

    async def _tool_async(self, name: str, arguments: Mapping[str, Any], fn: Any) -> Any:
        call = self.tool_call(name, arguments)
        try:
            value = await fn(**arguments)
        except Exception as exc:
            call.failed(exc)
            raise
        call.returned(value)
        return value

    def answer(self, text: str) -> None:
        """The mission's answer (``answer``, outcome ``answered``); given once."""
        with self._lock:
            self._check_open()
            if self.answer_text is not None:
                raise EvalkitError("this mission has its answer already; a mission answers "
                                   "once")
            text = text if isinstance(text, str) else str(text)
            self._emit(_with({"event": "answer", "text": text, "outcome": "answered"},
                             usage=self._take_usage()))
            self.answer_text = text

    # -- the parts the calls report to ----------------------------------------------------

    def _model_done(self, call: ModelCall, reply: dict[str, Any],
                    usage: dict[str, Any] | None) -> None:
        with self._lock:
            self._pending.discard(call)
            if call.index == self._index:
                self._turn_usage = usage
            self._usage.add(usage)
            self._record(lambda w: w.record_model_call(MISSION_CALL, call.request, reply,
                                                            call.started))

    def _model_failed(self, call: ModelCall, error: dict[str, Any],
                      exc: BaseException | None) -> None:
        with self._lock:
            self._pending.discard(call)
            if exc is not None and error.get("fault"):
                self._fault = (exc, f"{error['fault']} fault: {error['error']}")
            self._record(lambda w: w.record_model_call(MISSION_CALL, call.request, error,
                                                            call.started))

    def _tool_done(self, call: ToolCall, result: ToolResult) -> None:
        with self._lock:
            handle = self._results.put(result.output)
            self._record(lambda w: w.record_tool_call(call.name, call.arguments,
                                                      result.as_record()))
            if self.closed:
                return  # the mission ended while the tool ran: its stream is closed
            self._emit(_with({"event": "tool_result", "index": call.index, "tool": call.name,
                              "arguments": call.arguments, "ok": result.ok,
                              "exit_code": result.exit_code, "output": result.output,
                              "error": result.error, "handle": handle, "truncated": False},
                             call=call.ordinal or None))

    def _open_step(self, catalogue: list[str] | None) -> int:
        index = self._steps
        self._steps += 1
        self._index, self._ordinal, self._turn_usage = index, 0, None
        self._emit(_with({"event": "step_started", "index": index}, catalogue=catalogue))
        return index

    def _offer(self, tools: Iterable[Mapping[str, Any]] | None) -> list[str] | None:
        """The new catalogue's names when ``tools`` offers a tool not offered yet."""
        if not tools:
            return None
        known = set(self._names())
        fresh = [_descriptor(t) for t in tools]
        fresh = [t for t in fresh if t["name"] not in known]
        if not fresh:
            return None
        self._catalogue = [*self._catalogue, *fresh]
        self._record(lambda w: w.record_catalogue(self._catalogue))
        return self._names()

    def _take_usage(self) -> dict[str, Any] | None:
        usage, self._turn_usage = self._turn_usage, None
        return usage

    def _emit(self, record: dict[str, Any]) -> None:
        assert self._emitter is not None
        try:
            self._emitter.emit(record)
        except RecordingFailed as exc:  # the disk, not the agent: the sink still hears it
            self._unrecorded = self._unrecorded or exc.message
            self._emitter.stream(record)

    def _record(self, write: Any) -> None:
        if self._writer is None:
            return
        try:
            write(self._writer)
        except RecordingFailed as exc:
            self._unrecorded = self._unrecorded or exc.message
        except EvalkitError:
            pass  # the run is closed: a straggling call has nowhere to go

    def _check_open(self) -> None:
        if self._emitter is None:
            raise EvalkitError("this mission is not open: use it as `with mission(...) as m:`")
        if self.closed:
            raise EvalkitError("this mission is closed; nothing more can be recorded")

    def _names(self) -> list[str]:
        return [t["name"] for t in self._catalogue]

    def _run_meta(self) -> dict[str, Any]:
        replayed = self.replay.meta() if self.replay is not None else {}
        return {"objective": self.objective, "recorder": "evalkit.record",
                "suite_key": self.suite_key, "max_steps": 0, **replayed,
                **jsonable(self._meta)}


def _descriptor(tool: str | Mapping[str, Any]) -> dict[str, Any]:
    """A catalogue entry: a name, or a descriptor (an OpenAI function tool too)."""
    if isinstance(tool, str):
        return {"name": tool, "description": "", "parameters": {}}
    spec = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
    return {"name": str(spec.get("name") or ""),
            "description": str(spec.get("description") or ""),
            "parameters": jsonable(spec.get("parameters") or {})}


def _open_sink(spec: str) -> EventSink:
    """The event sink; an inherited descriptor is duplicated first, so that closing this
    mission's sink leaves it open for the next mission of the same process."""
    if spec.startswith("fd:") and spec[3:].isdigit():
        try:
            return EventSink.open(f"fd:{os.dup(int(spec[3:]))}")
        except OSError:
            pass  # not open here: the sink's own sentence says so
    return EventSink.open(spec)


def _with(record: dict[str, Any], **optional: Any) -> dict[str, Any]:
    """``record`` plus each optional field that has a value (absent, never null)."""
    record.update({k: v for k, v in optional.items() if v is not None})
    return record
