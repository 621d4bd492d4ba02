"""The messages a GenAI span captured, in the parts shape of ``gen_ai.*.messages``.

Instrumentations capture content in two ways: the current conventions as the
``gen_ai.input.messages``/``gen_ai.output.messages`` attributes (JSON text of
``{role, parts: [{type: text|tool_call|tool_call_response, …}]}``), the older ones as
span events (``gen_ai.user.message``, ``gen_ai.choice``, … with a JSON ``body``).
Both are read into the first shape, so the importer has one shape to walk; a span
that captured nothing gives no message, never an invented one.
"""

from __future__ import annotations

import json
from typing import Any

from evalkit.otel.otlp import Span


def messages(span: Span | None, attribute: str) -> list[dict[str, Any]]:
    """Captured messages: the attribute (JSON text or a list), else span events that the
    older conventions used (``gen_ai.user.message``, ``gen_ai.choice``, …)."""
    if span is None:
        return []
    raw = span.attributes.get(attribute)
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raw = None
    if isinstance(raw, list):
        return [m for m in raw if isinstance(m, dict)]
    wanted = ("gen_ai.choice",) if attribute.endswith("output.messages") else (
        "gen_ai.system.message", "gen_ai.user.message", "gen_ai.assistant.message",
        "gen_ai.tool.message")
    out = []
    for e in span.events:
        if e["name"] in wanted:
            body = e["attributes"].get("body") or e["attributes"].get("gen_ai.event.content")
            if isinstance(body, str):
                try:
                    body = json.loads(body)
                except ValueError:
                    body = {"content": body}
            if isinstance(body, dict):
                out.append(_legacy(e["name"], body))
    return out


def _legacy(name: str, body: dict[str, Any]) -> dict[str, Any]:
    """An event-borne message in the parts shape of ``gen_ai.*.messages``."""
    message = body.get("message") if isinstance(body.get("message"), dict) else body
    role = message.get("role") or name.split(".")[1]
    parts: list[dict[str, Any]] = []
    if isinstance(message.get("content"), str):
        kind = "tool_call_response" if role == "tool" else "text"
        parts.append({"type": kind, "content": message["content"], "response":
                      message["content"], "id": message.get("id") or body.get("id")})
    for c in message.get("tool_calls") or []:
        fn = c.get("function") or {}
        parts.append({"type": "tool_call", "id": c.get("id"), "name": fn.get("name"),
                      "arguments": fn.get("arguments")})
    return {"role": "assistant" if role == "choice" else role, "parts": parts,
            "finish_reason": body.get("finish_reason")}


def parts(messages: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [p for m in messages for p in (m.get("parts") or []) if isinstance(p, dict)
            and p.get("type") == kind]


def text(message: dict[str, Any]) -> str | None:
    texts = [p.get("content") for p in message.get("parts") or []
             if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("content"), str)]
    return "".join(texts) if texts else None


def arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {"input": raw}
    return raw if isinstance(raw, dict) else ({} if raw is None else {"input": raw})
