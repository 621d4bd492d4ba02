"""OTLP/JSON GenAI traces as evalkit runs, written by the run store's own writer.

Each run is a ``RunWriter`` from ``RunStore.create`` — the writer the built-in
runtime and ``evalkit.record`` use — so envelopes, the redactor (a key planted in
a span attribute never reaches the disk), the tool and model logs and the seal
are the store's, not a second copy. The words are the contract's; what a trace
carries and does not is ``evalkit.contract.OTEL_CARRIES`` / ``OTEL_NOT_CARRIED``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evalkit.contract import OTEL_NO_ANSWER, OUTCOMES, SCHEMA_VERSION, conforms
from evalkit.errors import EvalkitError
from evalkit.otel.messages import arguments as _arguments
from evalkit.otel.messages import messages as _messages
from evalkit.otel.messages import parts as _parts
from evalkit.otel.messages import text as _text
from evalkit.otel.otlp import Span, read_spans
from evalkit.runtime.tools.descriptor import ToolResult
from evalkit.runtime.usage import UsageLedger
from evalkit.store.runstore import RunStore, RunWriter

AGENT, CHAT, TOOL = "invoke_agent", "chat", "execute_tool"
#: The model.jsonl ``kind`` of a model call, the built-in loop's word for a turn.
MISSION_CALL = "mission"


@dataclass
class Imported:
    """One run written: its key, where, and from which trace."""

    key: str
    run_dir: Path
    trace_id: str
    outcome: str


@dataclass
class _Trace:
    """The spans one run is made of: its agent span (None: a whole trace) and the rest."""

    trace_id: str
    agent: Span | None
    spans: list[Span] = field(default_factory=list)


def files_of(source: Path) -> list[Path]:
    """The OTLP/JSON files a FILE|DIR argument names (``*.json``/``*.jsonl`` of a folder)."""
    if source.is_dir():
        found = sorted(p for p in source.rglob("*") if p.is_file()
                       and p.suffix in (".json", ".jsonl"))
        if not found:
            raise EvalkitError(f"{source} holds no .json or .jsonl file to import")
        return found
    if not source.exists():
        raise EvalkitError(f"{source} does not exist")
    return [source]


def import_traces(source: Path, out: Path, *, key: str | None = None,
                  environ: dict[str, str] | None = None) -> list[Imported]:
    """Write one run per agent span (or per trace) found in ``source`` under ``out/<key>/``."""
    spans: list[Span] = []
    files = files_of(source)
    for path in files:
        spans += read_spans(path)
    traces = _runs_of(spans)
    if not traces:
        raise EvalkitError(f"{source} holds no GenAI span (no gen_ai.operation.name of "
                           f"{AGENT}, {CHAT} or {TOOL}); nothing to import")
    if key is not None and len(traces) > 1:
        raise EvalkitError(f"--key names one run, but {source} holds {len(traces)} "
                           "(agent spans or traces); leave --key out to key each by its "
                           "gen_ai.agent.name")
    keyed = [(key or _key_of(t), t) for t in traces]
    for k, _ in keyed:
        if not k or "/" in k or k.startswith(".") or k != k.strip():
            raise EvalkitError(f"{k!r} cannot name a mission folder; give --key")
    from evalkit.store.seal import signer_or_none

    signer, _ = signer_or_none(os.environ if environ is None else environ)
    written = []
    for k, trace in keyed:
        store = RunStore(out / k, signer=signer)
        written.append(_write(store, k, trace, ", ".join(str(f) for f in files)))
    return written


def _runs_of(spans: list[Span]) -> list[_Trace]:
    """Group GenAI spans into runs: below each outermost agent span, else per trace."""
    by_id = {s.span_id: s for s in spans}
    genai = [s for s in spans if s.operation in (AGENT, CHAT, TOOL)]
    runs: dict[tuple[str, str | None], _Trace] = {}
    for s in sorted(genai, key=lambda s: (s.start_ns, s.span_id)):
        agent = _outer_agent(s, by_id)
        slot = (s.trace_id, agent.span_id if agent else None)
        run = runs.setdefault(slot, _Trace(s.trace_id, agent))
        if s is not agent:
            run.spans.append(s)
    return sorted(runs.values(), key=lambda t: (t.agent.start_ns if t.agent else
                                                min((s.start_ns for s in t.spans), default=0)))


def _outer_agent(span: Span, by_id: dict[str, Span]) -> Span | None:
    found, seen, here = None, set(), span
    while here is not None and here.span_id not in seen:
        seen.add(here.span_id)
        if here.operation == AGENT:
            found = here
        here = by_id.get(here.parent_id) if here.parent_id else None
    return found


def _key_of(trace: _Trace) -> str:
    for s in [trace.agent, *trace.spans]:
        if s is None:
            continue
        for name in ("evalkit.suite_key", "gen_ai.agent.name"):
            if isinstance(s.attributes.get(name), str) and s.attributes[name]:
                return s.attributes[name]
    raise EvalkitError(f"trace {trace.trace_id} names no agent (no gen_ai.agent.name); give "
                       "--key KEY to file its run under RUNS/KEY")


def _usage(span: Span) -> dict[str, Any] | None:
    a = span.attributes
    usage = {}
    if isinstance(a.get("gen_ai.usage.input_tokens"), int):
        usage["prompt_tokens"] = a["gen_ai.usage.input_tokens"]
    if isinstance(a.get("gen_ai.usage.output_tokens"), int):
        usage["completion_tokens"] = a["gen_ai.usage.output_tokens"]
    if len(usage) == 2:
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return usage or None


def _totals(agent: Span | None, ledger: UsageLedger) -> dict[str, Any]:
    """The run's usage: evalkit's own totals when its export wrote them (a model call that
    ended in a gate reports usage on no step), else the agent span's, else the chat spans'."""
    said = agent.attributes.get("evalkit.usage") if agent else None
    if isinstance(said, str):
        try:
            said = json.loads(said)
        except ValueError:
            said = None
    if isinstance(said, dict):
        return said
    totals = ledger.totals()
    own = _usage(agent) if agent else None
    return {**own, "calls": totals["calls"]} if own else totals


def _iso(ns: int) -> str | None:
    if not ns:
        return None
    stamp = datetime.fromtimestamp(ns / 1e9, timezone.utc).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


class _Writer:
    """Appends the run's records in contract order, checking each against the contract."""

    def __init__(self, writer: RunWriter) -> None:
        self.w, self.steps, self.ordinal, self.usage = writer, 0, 0, UsageLedger()
        self.index: int | None = None
        self.turn_usage: dict[str, Any] | None = None
        self.handles = 0

    def emit(self, record: dict[str, Any]) -> None:
        problems = conforms(record)
        if problems:  # a bug here, never the trace's: the records are built in this module
            raise AssertionError(f"imported record does not conform: {problems}")
        self.w.append(record)

    def step(self, usage: dict[str, Any] | None) -> None:
        self.index, self.ordinal, self.turn_usage = self.steps, 0, usage
        self.steps += 1
        self.emit({"event": "step_started", "index": self.index})

    def take_usage(self) -> dict[str, Any]:
        usage, self.turn_usage = self.turn_usage, None
        return {"usage": usage} if usage else {}

    def tool(self, name: str, arguments: dict[str, Any], result: ToolResult | None) -> None:
        if self.index is None:
            self.step(None)
        ordinal = self.ordinal
        self.ordinal += 1
        call = {"call": ordinal} if ordinal else {}
        self.emit({"event": "tool_call", "index": self.index, "tool": name,
                   "arguments": arguments, **self.take_usage(), **call})
        if result is None:
            return
        self.handles += 1
        self.w.record_tool_call(name, arguments, result.as_record())
        self.emit({"event": "tool_result", "index": self.index, "tool": name,
                   "arguments": arguments, "ok": result.ok, "exit_code": None,
                   "output": result.output, "error": result.error,
                   "handle": f"r{self.handles}", "truncated": False, **call})


def _tool_result(span: Span | None, response: Any) -> ToolResult | None:
    """An execute_tool span's result (its status error: a failure), or a captured response."""
    if span is not None:
        raw = span.attributes.get("gen_ai.tool.call.result")
        text = raw if isinstance(raw, str) or raw is None else json.dumps(raw)
        if span.status_code == 2:
            error = span.status_message or span.attributes.get("error.type") or "error"
            return ToolResult.failure(text or str(error), exit_code=None)
        return ToolResult.success(text or "")
    if response is None:
        return None
    return ToolResult.success(response if isinstance(response, str) else json.dumps(response))


def _write(store: RunStore, key: str, trace: _Trace, source: str) -> Imported:
    agent, spans = trace.agent, trace.spans
    chats = [s for s in spans if s.operation == CHAT]
    tools = [s for s in spans if s.operation == TOOL]
    a = agent.attributes if agent else {}
    objective = a.get("evalkit.objective")
    if not isinstance(objective, str):
        firsts = [_messages(agent, "gen_ai.input.messages")] + \
                 [_messages(c, "gen_ai.input.messages") for c in chats[:1]]
        users = [_text(m) for msgs in firsts for m in msgs if m.get("role") == "user"]
        objective = next((u for u in users if u is not None), None)
    catalogue = sorted({str(s.attributes.get("gen_ai.tool.name")) for s in tools
                        if s.attributes.get("gen_ai.tool.name")} |
                       {str(p.get("name")) for c in chats for p in
                        _parts(_messages(c, "gen_ai.output.messages"), "tool_call")
                        if p.get("name")})
    first = min((s.start_ns for s in [agent, *spans] if s is not None), default=0)
    last = max((s.end_ns for s in [agent, *spans] if s is not None), default=0)
    models = [c.attributes.get("gen_ai.response.model") or c.attributes.get(
        "gen_ai.request.model") for c in chats]
    meta = {"objective": objective, "recorder": "evalkit import otel", "suite_key": key,
            "source": source, "trace_id": trace.trace_id,
            "span_id": agent.span_id if agent else None,
            "agent_name": a.get("gen_ai.agent.name"),
            "model": next((m for m in models if isinstance(m, str)), None),
            "provider": next((c.attributes.get("gen_ai.provider.name") or
                              c.attributes.get("gen_ai.system") for c in chats), None),
            "trace_started": _iso(first), "trace_ended": _iso(last), "max_steps": 0,
            "exported_run_id": a.get("evalkit.run_id")}
    writer = store.create(meta)
    try:
        out = _Writer(writer)
        writer.record_catalogue([{"name": n, "description": "", "parameters": {}}
                                 for n in catalogue])
        out.emit({"event": "mission_started", "schema_version": SCHEMA_VERSION,
                  "objective": objective or "", "catalogue": catalogue, "gated": [],
                  "max_steps": 0, "history": 0, "run_id": writer.run_id})
        answer = _steps(out, chats, tools)
        agent_out = [_text(m) for m in _messages(agent, "gen_ai.output.messages")
                     if m.get("role") == "assistant"]
        agent_answer = next((t for t in reversed(agent_out) if t is not None), None)
        if agent_answer is not None or isinstance(a.get("evalkit.outcome"), str):
            answer = agent_answer  # evalkit's export says the answer there, or there was none
        outcome, reason = _outcome(agent, answer)
        grounding = a.get("evalkit.grounding")
        if isinstance(grounding, str):
            try:
                record = json.loads(grounding)
                if isinstance(record, dict) and not conforms(record):
                    out.emit(record)
            except ValueError:
                pass
        if answer is not None:
            out.emit({"event": "answer", "text": answer, "outcome": outcome,
                      **out.take_usage()})
        finished: dict[str, Any] = {"event": "mission_finished", "outcome": outcome,
                                    "steps": out.steps, "max_steps": 0,
                                    "usage": _totals(agent, out.usage)}
        if reason:
            finished["reason"] = reason
        if first and last:
            finished["elapsed_s"] = round((last - first) / 1e9, 3)
        out.emit(finished)
        writer.update_meta(outcome=outcome, reason=reason, steps=out.steps,
                           elapsed_s=finished.get("elapsed_s"))
    finally:
        writer.close()
    return Imported(key, writer.path, trace.trace_id, outcome)


def _steps(out: _Writer, chats: list[Span], tools: list[Span]) -> str | None:
    """Steps, tool calls and the model log; returns the last tool-free reply's text."""
    answer: str | None = None
    pending = sorted(tools, key=lambda s: s.start_ns)
    asked: dict[str, dict[str, Any]] = {}  # tool-call id -> the tool_call part, unanswered
    for n, chat in enumerate(chats):
        upto = chats[n + 1].start_ns if n + 1 < len(chats) else None
        inputs = _messages(chat, "gen_ai.input.messages")
        if not tools:  # results only as the next request's captured tool messages
            for p in _parts(inputs, "tool_call_response"):
                part = asked.pop(str(p.get("id")), None)
                if part is not None:
                    out.tool(str(part.get("name")), _arguments(part.get("arguments")),
                             _tool_result(None, p.get("response")))
        while pending and pending[0].start_ns < chat.start_ns:  # tools before this call
            _tool_span(out, pending.pop(0))
        usage = _usage(chat)
        out.usage.add(usage)
        out.step(usage)
        outputs = _messages(chat, "gen_ai.output.messages")
        calls = _parts(outputs, "tool_call")
        texts = [t for t in (_text(m) for m in outputs) if t is not None]
        a = chat.attributes
        reply = {"content": "".join(texts) if texts else None,
                 "tool_calls": [{"id": p.get("id"), "name": p.get("name"),
                                 "arguments": _arguments(p.get("arguments"))} for p in calls],
                 "usage": usage,
                 "extras": {"latency_s": round((chat.end_ns - chat.start_ns) / 1e9, 3)
                            if chat.end_ns and chat.start_ns else None,
                            "response_model": a.get("gen_ai.response.model"),
                            "finish_reasons": a.get("gen_ai.response.finish_reasons")}}
        request = {"messages": inputs,
                   "extra": {"model": a.get("gen_ai.request.model"),
                             "provider": a.get("gen_ai.provider.name") or a.get("gen_ai.system")}}
        if chat.status_code == 2:
            reply = {"error": chat.status_message or str(a.get("error.type") or "error")}
        out.w.record_model_call(MISSION_CALL, request, reply, _iso(chat.start_ns))
        answer = reply.get("content") if not calls else None
        for p in calls:
            asked[str(p.get("id"))] = p
        while pending and (upto is None or pending[0].start_ns < upto):
            _tool_span(out, pending.pop(0))
    if not tools:  # asked for, never answered in a later request: the call alone
        for part in asked.values():
            out.tool(str(part.get("name")), _arguments(part.get("arguments")), None)
    for span in pending:
        _tool_span(out, span)
    return answer


def _tool_span(out: _Writer, span: Span) -> None:
    a = span.attributes
    out.tool(str(a.get("gen_ai.tool.name") or span.name), _arguments(
        a.get("gen_ai.tool.call.arguments")), _tool_result(span, None))


def _outcome(agent: Span | None, answer: str | None) -> tuple[str, str | None]:
    said = agent.attributes.get("evalkit.outcome") if agent else None
    if isinstance(said, str) and said in OUTCOMES:
        reason = agent.attributes.get("evalkit.reason") if agent else None
        return said, reason if isinstance(reason, str) else None
    if answer is not None:
        return "answered", None
    if agent is not None and agent.status_code == 2:
        return "incomplete", f"{OTEL_NO_ANSWER}: the agent span ended in error" + (
            f" ({agent.status_message})" if agent.status_message else "")
    return "incomplete", OTEL_NO_ANSWER

