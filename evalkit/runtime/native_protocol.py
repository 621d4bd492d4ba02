"""The native protocol (``--protocol native``): the provider's function calling.

Tools are declared as functions beside a synthetic ``mission_answer(text)``,
with ``tool_choice`` required and parallel calls allowed, so one turn may
dispatch several tools. Function names must match ``[A-Za-z0-9_-]{1,64}``,
which ``mcp.echo`` does not, so names are mapped both ways (the stream and the
recording always carry the catalogue's own names). Whatever extra keys a
provider put on a tool call (signatures, indices of its own) are echoed back
verbatim in the assistant message: some providers refuse a conversation whose
calls lost them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from typing import Any

from evalkit.runtime import prompts
from evalkit.runtime.backends import Reply
from evalkit.runtime.protocol import Answer, Call, Item, Protocol, Rejection

ANSWER_TOOL = "mission_answer"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_CALL_KEYS = frozenset({"id", "name", "arguments"})

_ANSWER_FUNCTION = {
    "type": "function",
    "function": {
        "name": ANSWER_TOOL,
        "description": "Finish the mission with your final answer. Call it alone.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "the final answer"}},
            "required": ["text"],
        },
    },
}


class NativeProtocol(Protocol):
    """Function calling, with ``mission_answer`` as the way to finish."""

    name = "native"

    def __init__(self) -> None:
        self._to_wire: dict[str, str] = {}
        self._from_wire: dict[str, str] = {}
        self._ids = 0

    def tools(self, catalogue: Sequence[dict[str, Any]]) -> list[dict[str, Any]] | None:
        self._to_wire, self._from_wire = {}, {}
        functions = []
        for tool in catalogue:
            wire = self._wire_name(tool["name"])
            functions.append({"type": "function", "function": {
                "name": wire,
                "description": tool.get("description") or "",
                "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
            }})
        return functions + [_ANSWER_FUNCTION]

    def _wire_name(self, name: str) -> str:
        base = _UNSAFE.sub("_", name)[:60] or "tool"
        wire, n = base, 2
        while wire in self._from_wire or wire == ANSWER_TOOL:
            wire, n = f"{base}_{n}", n + 1
        self._to_wire[name], self._from_wire[wire] = wire, name
        return wire

    def system_message(self, catalogue: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return {"role": "system", "content": prompts.system_prompt(catalogue, protocol="native")}

    def read(self, reply: Reply, offered: Collection[str]) -> list[Item]:
        calls = reply.tool_calls
        if not calls:
            return [Rejection(f"the reply called no function; call a tool, or {ANSWER_TOOL} "
                              "alone to finish")]
        items: list[Item] = []
        for call in calls:
            call_id = call.get("id") or self._new_id()
            call["id"] = call_id  # the echo and the tool message must agree on it
            wire = str(call.get("name") or "")
            name = self._from_wire.get(wire, wire)
            arguments, problem = _arguments(call.get("arguments"))
            if problem:
                items.append(Rejection(f"arguments of {name or 'the call'} {problem}",
                                       tool=name or None, id=call_id))
            elif name == ANSWER_TOOL:
                text = arguments.get("text")
                if len(calls) > 1:
                    items.append(Rejection(f"{ANSWER_TOOL} must be the only call of its turn; "
                                           "the other calls were made, answer again alone",
                                           tool=name, id=call_id))
                elif not isinstance(text, str):
                    items.append(Rejection(f"{ANSWER_TOOL} needs text (a string)", tool=name,
                                           id=call_id))
                else:
                    items.append(Answer(text, id=call_id))
            elif name not in offered:
                items.append(Rejection(f"no tool named {name!r} is offered", tool=name or None,
                                       id=call_id))
            else:
                items.append(Call(name, arguments, id=call_id))
        return items

    def _new_id(self) -> str:
        self._ids += 1
        return f"call_evalkit_{self._ids}"

    def assistant_message(self, reply: Reply, items: Sequence[Item]) -> dict[str, Any]:
        echoed = []
        for call in reply.tool_calls:
            arguments = call.get("arguments")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments if arguments is not None else {},
                                       ensure_ascii=False)
            entry = {"id": call["id"], "type": "function",
                     "function": {"name": call.get("name") or "", "arguments": arguments}}
            entry.update({k: v for k, v in call.items() if k not in _CALL_KEYS})
            echoed.append(entry)
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if echoed:
            message["tool_calls"] = echoed
        return message

    def rejection_message(self, item: Rejection) -> dict[str, Any]:
        note = prompts.rejection_note(item.problem, protocol="native")
        if item.id is None:
            return {"role": "user", "content": note}
        return {"role": "tool", "tool_call_id": item.id, "content": note}

    def result_message(self, item: Call, text: str) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": item.id, "content": text}

    def catalogue_message(self, catalogue: Sequence[dict[str, Any]], added: Sequence[str],
                          removed: Sequence[str]) -> dict[str, Any]:
        note = prompts.catalogue_note(catalogue, added, removed, protocol="native")
        return {"role": "user", "content": note}


def _arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """Parse a call's arguments (JSON text or a mapping) to a mapping, or say why not."""
    if raw is None or raw == "":
        return {}, None
    if isinstance(raw, dict):
        return raw, None
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            return {}, f"are not valid JSON ({exc.msg} at character {exc.pos})"
        if isinstance(value, dict):
            return value, None
    return {}, "must be a JSON object"

