"""evalkit runs as OTLP/JSON spans that follow the GenAI semantic conventions.

One trace per run: an ``invoke_agent`` span (the mission), a ``chat`` span per
step that reported a model call, an ``execute_tool`` span per tool call. What the
conventions have no word for rides the ``evalkit.*`` namespace (the outcome word
and its reason, the run id, the suite key, the verdict when a ``report.json``
scored the runs, the grounding record), so ``evalkit import otel`` reads the same
run back. Ids are derived from the run id, so exporting twice gives the same file.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.otel.otlp import key_values
from evalkit.store.layout import resolve_events
from evalkit.store.reader import read_events_file

SCOPE = {"name": "evalkit.otel", "version": "1"}


def runs_of(runs: Path) -> list[tuple[str, Path]]:
    """(mission key, events file) for each mission folder under ``runs``, as score finds them."""
    if not runs.is_dir():
        raise EvalkitError(f"{runs} is not a folder of runs")
    found = []
    for folder in sorted(p for p in runs.iterdir() if p.is_dir() and not p.name.startswith(".")):
        events = resolve_events(folder)
        if events is not None:
            found.append((folder.name, events))
    if not found:
        raise EvalkitError(f"{runs} holds no mission folder with a recorded stream")
    return found


def _verdicts(runs: Path) -> dict[str, bool]:
    """Pass/fail by mission key from ``runs/report.json``, when the runs were scored there."""
    try:
        report = json.loads((runs / "report.json").read_text("utf-8"))
        return {v["key"]: bool(v["passed"]) for v in report.get("verdicts") or []
                if not v.get("missing")}
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return {}


def _id(seed: str, size: int) -> str:
    return hashlib.blake2b(seed.encode(), digest_size=size).hexdigest()


def _ns(at: Any) -> int:
    try:
        return int(datetime.fromisoformat(str(at).replace("Z", "+00:00")).timestamp() * 1e9)
    except ValueError:
        return 0


def _meta(events: Path) -> dict[str, Any]:
    try:
        return json.loads((events.parent / "meta.json").read_text("utf-8")).get("meta") or {}
    except (OSError, ValueError, AttributeError):
        return {}


def export(runs: Path) -> dict[str, Any]:
    """The ``TracesData`` of every mission under ``runs``."""
    verdicts = _verdicts(runs)
    spans = []
    for key, events in runs_of(runs):
        spans += _spans(key, events, verdicts.get(key))
    return {"resourceSpans": [{
        "resource": {"attributes": key_values({"service.name": "evalkit"})},
        "scopeSpans": [{"scope": SCOPE, "spans": spans}]}]}


def _spans(key: str, events: Path, passed: bool | None) -> list[dict[str, Any]]:
    read = read_events_file(events)
    meta = _meta(events)
    records = read.records
    # Plus the record's index in nanoseconds: envelopes keep milliseconds, and spans that
    # share one must still sort in stream order when the importer reads them back.
    times = [_ns((read.envelopes.get(i) or {}).get("at")) + i for i in range(len(records))]
    start = next((r for r in records if r.get("event") == "mission_started"), {})
    run_id = start.get("run_id") or meta.get("run_id") or f"{key}:{events}"
    trace = _id(run_id, 16)
    root = _id(run_id + "/agent", 8)
    t0 = next((t for t in times if t), 0)
    t1 = max(times, default=0) or t0
    model = meta.get("model")
    out: list[dict[str, Any]] = []
    answer = finished = grounding = None
    chat: dict[str, Any] | None = None
    tools: dict[tuple[int, int], dict[str, Any]] = {}
    for i, r in enumerate(records):
        kind, at = r.get("event"), times[i] or t0
        if kind == "step_started":
            chat = _span(trace, _id(f"{run_id}/step/{r.get('index')}", 8), root,
                         f"chat {model or ''}".strip(), at, at,
                         {"gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                          "gen_ai.provider.name": meta.get("provider"),
                          "evalkit.step": r.get("index")})
            chat["_calls"], chat["_text"] = [], None
            out.append(chat)
        elif kind in ("tool_call", "answer") and chat is not None and r.get("usage"):
            usage = r["usage"]
            chat["attributes"] += key_values({
                "gen_ai.usage.input_tokens": usage.get("prompt_tokens"),
                "gen_ai.usage.output_tokens": usage.get("completion_tokens")})
        if kind == "tool_call":
            call_id = f"call_{r.get('index')}_{r.get('call', 0)}"
            span = _span(trace, _id(f"{run_id}/tool/{call_id}", 8), root,
                         f"execute_tool {r.get('tool')}", at, at,
                         {"gen_ai.operation.name": "execute_tool",
                          "gen_ai.tool.name": r.get("tool"), "gen_ai.tool.call.id": call_id,
                          "gen_ai.tool.call.arguments": json.dumps(r.get("arguments") or {},
                                                                   ensure_ascii=False)})
            tools[(r.get("index"), r.get("call", 0))] = span
            if chat is not None:
                chat["_calls"].append({"type": "tool_call", "id": call_id,
                                       "name": r.get("tool"), "arguments": r.get("arguments")})
                chat["endTimeUnixNano"] = str(at)
            out.append(span)
        elif kind == "tool_result":
            span = tools.get((r.get("index"), r.get("call", 0)))
            if span is not None:
                span["endTimeUnixNano"] = str(at)
                span["attributes"] += key_values({"gen_ai.tool.call.result": r.get("output")})
                if not r.get("ok"):
                    span["status"] = {"code": 2, "message": r.get("error") or ""}
        elif kind == "answer":
            answer = r
            if chat is not None:
                chat["_text"], chat["endTimeUnixNano"] = r.get("text"), str(at)
        elif kind == "grounding":
            grounding = r
        elif kind == "mission_finished":
            finished = r
    for s in out:
        calls, text = s.pop("_calls", None), s.pop("_text", None)
        if calls or text is not None:
            parts = calls or [{"type": "text", "content": text}]
            s["attributes"] += key_values({"gen_ai.output.messages": [
                {"role": "assistant", "parts": parts,
                 "finish_reason": "tool_call" if calls else "stop"}]})
    objective = start.get("objective")
    usage = (finished or {}).get("usage") or {}
    agent = _span(trace, root, None, f"invoke_agent {key}", t0, t1, {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": key,
        "gen_ai.request.model": model,
        "gen_ai.input.messages": [{"role": "user", "parts": [
            {"type": "text", "content": objective}]}] if objective else None,
        "gen_ai.output.messages": [{"role": "assistant", "parts": [
            {"type": "text", "content": answer.get("text")}], "finish_reason": "stop"}]
        if answer else None,
        "gen_ai.usage.input_tokens": usage.get("prompt_tokens"),
        "gen_ai.usage.output_tokens": usage.get("completion_tokens"),
        "evalkit.run_id": start.get("run_id"), "evalkit.suite_key": key,
        "evalkit.objective": objective,
        "evalkit.outcome": (finished or {}).get("outcome"),
        "evalkit.reason": (finished or {}).get("reason"),
        "evalkit.verdict": None if passed is None else ("pass" if passed else "fail"),
        "evalkit.grounding": grounding, "evalkit.usage": usage or None})
    return [agent, *out]


def _span(trace: str, span_id: str, parent: str | None, name: str, start: int, end: int,
          attrs: dict[str, Any]) -> dict[str, Any]:
    span = {"traceId": trace, "spanId": span_id, "name": name,
            "kind": 1, "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(end), "attributes": key_values(attrs), "status": {}}
    if parent:
        span["parentSpanId"] = parent
        if attrs.get("gen_ai.operation.name") == "chat":
            span["kind"] = 3  # SPAN_KIND_CLIENT, as instrumentations write a model call
    return span
