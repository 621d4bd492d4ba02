"""Drift: where the prompt a replay hands the model first differs from the recorded one.

Replay never refuses a difference — a changed system prompt, objective or
grammar is exactly what one replays to measure — it reports the first one:
``{call, kind, message, detail}``, where ``call`` is the 1-based model call,
``kind`` that call's kind (``mission`` or ``plain``), ``message`` the 0-based
index of the first differing message (None when the messages agree and the
function list does not), and ``detail`` one sentence.

The recording holds messages as canonical JSON with credentials scrubbed, so
the live side is put through the same redactor and JSON round trip before
comparing. One thing more is normalised: the ``arguments`` text of an
assistant message's tool calls is compared by meaning, as parsed JSON. The
model log keeps a reply's arguments with sorted keys, so a replayed turn
echoes them back in another key order than the live run did; that is the
same call, and calling it drift would blame a prompt change nobody made.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from evalkit.redact import redact_obj

#: Characters of context shown on each side of a differing spot.
_CONTEXT = 40


def as_recorded(value: Any) -> Any:
    """``value`` the way the recording would hold it: scrubbed, through JSON."""
    return json.loads(json.dumps(redact_obj(value), ensure_ascii=False))


class MessageCache:
    """Recorded-form copies of the loop's messages, reused while the message objects are.

    The loop only appends to its conversation, so each message is scrubbed
    and round-tripped once per replay rather than once per call.
    """

    def __init__(self) -> None:
        self._objects: list[Any] = []
        self._forms: list[Any] = []

    def forms(self, messages: Sequence[Any]) -> list[Any]:
        out = []
        for at, message in enumerate(messages):
            if at < len(self._objects) and self._objects[at] is message:
                out.append(self._forms[at])
                continue
            form = as_recorded(message)
            del self._objects[at:], self._forms[at:]
            self._objects.append(message)
            self._forms.append(form)
            out.append(form)
        return out


def first_difference(recorded: dict[str, Any], messages: list[Any], tools: Any, *,
                     call: int, kind: str) -> dict[str, Any] | None:
    """The first difference between a recorded request and the live one, or None."""
    request = recorded.get("request") if isinstance(recorded.get("request"), dict) else {}
    old = request.get("messages") if isinstance(request.get("messages"), list) else []

    def found(message: int | None, detail: str) -> dict[str, Any]:
        return {"call": call, "kind": kind, "message": message, "detail": detail}

    if recorded.get("kind", kind) != kind:
        return found(None, f"the recording made a {recorded.get('kind')!r} call here, "
                           f"the replay a {kind!r} call")
    for at, (then, now) in enumerate(zip(old, messages, strict=False)):
        if then != now and _meaning(then) != _meaning(now):
            return found(at, describe(_meaning(then), _meaning(now)))
    if len(old) != len(messages):
        at = min(len(old), len(messages))
        return found(at, f"the recording sent {len(old)} message(s) on this call, "
                         f"the replay {len(messages)}")
    extra = request.get("extra") if isinstance(request.get("extra"), dict) else {}
    old_tools = extra.get("tools")
    new_tools = as_recorded(tools)
    if old_tools != new_tools:
        return found(None, "the function list differs: " + _tool_change(old_tools, new_tools))
    return None


def _meaning(message: Any) -> Any:
    """``message`` with its tool calls' JSON argument texts parsed (left as text if not JSON)."""
    if not isinstance(message, dict) or not isinstance(message.get("tool_calls"), list):
        return message
    calls = []
    for call in message["tool_calls"]:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and isinstance(function.get("arguments"), str):
            try:
                parsed = json.loads(function["arguments"])
            except ValueError:
                parsed = function["arguments"]
            call = {**call, "function": {**function, "arguments": parsed}}
        calls.append(call)
    return {**message, "tool_calls": calls}


def describe(then: Any, now: Any) -> str:
    """One sentence on how two messages differ."""
    if not isinstance(then, dict) or not isinstance(now, dict):
        return "the message is of a different shape"
    if then.get("role") != now.get("role"):
        return f"role: recorded {then.get('role')!r}, now {now.get('role')!r}"
    for key in sorted(set(then) | set(now)):
        a, b = then.get(key), now.get(key)
        if a == b:
            continue
        if isinstance(a, str) and isinstance(b, str):
            return f"{key} of a {then.get('role')} message differs: {text_diff(a, b)}"
        return f"{key} of a {then.get('role')} message differs"
    return "the message differs"


def text_diff(a: str, b: str) -> str:
    """Where two texts part, with a little context from each."""
    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    start = max(0, at - _CONTEXT // 2)

    def snippet(text: str) -> str:
        piece = text[start:at + _CONTEXT]
        return json.dumps(("…" if start else "") + piece
                          + ("…" if at + _CONTEXT < len(text) else ""), ensure_ascii=False)

    return f"at character {at}, recorded {snippet(a)}, now {snippet(b)}"


def _tool_change(old: Any, new: Any) -> str:
    def names(tools: Any) -> list[str]:
        if not isinstance(tools, list):
            return []
        return [str(((t or {}).get("function") or {}).get("name")) for t in tools
                if isinstance(t, dict)]

    if old is None or new is None:
        return "recorded with none" if old is None else "the replay sends none"
    before, after = names(old), names(new)
    added = [n for n in after if n not in before]
    gone = [n for n in before if n not in after]
    if added or gone:
        said = []
        if added:
            said.append("added " + ", ".join(added))
        if gone:
            said.append("gone " + ", ".join(gone))
        return "; ".join(said)
    changed = [n for n, a, b in zip(before, old, new, strict=False) if a != b]
    return "changed " + ", ".join(changed) if changed else "the functions are reordered"
