"""The json protocol (the default): one JSON object per reply, in plain text.

Works with any endpoint, even one with no function calling. What counts as
"one object" is deliberately forgiving about wrapping and strict about
ambiguity: the reply must contain exactly one top-level JSON object carrying
``tool`` or ``answer``; anything around it (a ```json fence, a sentence before
or after) is ignored. Two such objects, none, or broken JSON is a
``Rejection`` stating the problem — guessing which of two calls was meant
would be acting on something the model did not clearly say.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any

from evalkit.runtime import prompts
from evalkit.runtime.backends import Reply
from evalkit.runtime.protocol import Answer, Call, Item, Protocol, Rejection

_DECODER = json.JSONDecoder()


def embedded_objects(text: str | None) -> tuple[list[Any], json.JSONDecodeError | None]:
    """Every top-level JSON value that opens with ``{`` in ``text`` (what a fence or a
    sentence wraps), and the first decoding error met on the way (None if none).

    The one scanner for JSON inside model prose: replies, plans, routes, reviews.
    """
    text = text or ""
    values: list[Any] = []
    first_error: json.JSONDecodeError | None = None
    at = text.find("{")
    while at >= 0:
        try:
            value, end = _DECODER.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            first_error = first_error or exc
            at = text.find("{", at + 1)
            continue
        values.append(value)
        at = text.find("{", end)
    return values, first_error


def find_object(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """The one ``tool``/``answer`` object in ``text``, or None and the problem."""
    values, first_error = embedded_objects(text)
    found = [v for v in values if isinstance(v, dict) and ("tool" in v or "answer" in v)]
    others = len(values) - len(found)
    if len(found) == 1:
        return found[0], None
    if len(found) > 1:
        return None, f"the reply holds {len(found)} JSON objects; write exactly one"
    if first_error is not None:
        return None, (f"the reply is not valid JSON ({first_error.msg} at character "
                      f"{first_error.pos})")
    if others:
        return None, 'the JSON object names neither "tool" nor "answer"'
    if not text.strip():
        return None, "the reply is empty"
    return None, "the reply holds no JSON object"


class JsonProtocol(Protocol):
    """Tools described in the system prompt; the model answers in JSON text."""

    name = "json"

    def tools(self, catalogue: Sequence[dict[str, Any]]) -> list[dict[str, Any]] | None:
        return None

    def system_message(self, catalogue: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return {"role": "system", "content": prompts.system_prompt(catalogue, protocol="json")}

    def read(self, reply: Reply, offered: Collection[str]) -> list[Item]:
        obj, problem = find_object(reply.content or "")
        if obj is None:
            return [Rejection(problem or "the reply could not be read")]
        if "tool" in obj and "answer" in obj:
            return [Rejection('write either "tool" or "answer", not both')]
        if "answer" in obj:
            answer = obj["answer"]
            if answer is None:
                return [Rejection('"answer" is null; write the answer as a string')]
            if not isinstance(answer, str):
                answer = json.dumps(answer, ensure_ascii=False)
            return [Answer(answer)]
        tool = obj["tool"]
        if not isinstance(tool, str) or not tool:
            return [Rejection('"tool" must be a tool name (a string)')]
        arguments = obj.get("arguments", {})
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return [Rejection(f'"arguments" of {tool} must be a JSON object', tool=tool)]
        if tool not in offered:
            return [Rejection(f"no tool named {tool!r} is offered; offered: "
                              f"{', '.join(offered) or 'none'}", tool=tool)]
        return [Call(tool, arguments)]

    def assistant_message(self, reply: Reply, items: Sequence[Item]) -> dict[str, Any]:
        return {"role": "assistant", "content": reply.content or ""}

    def rejection_message(self, item: Rejection) -> dict[str, Any]:
        return {"role": "user", "content": prompts.rejection_note(item.problem, protocol="json")}

    def result_message(self, item: Call, text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}

    def catalogue_message(self, catalogue: Sequence[dict[str, Any]], added: Sequence[str],
                          removed: Sequence[str]) -> dict[str, Any]:
        note = prompts.catalogue_note(catalogue, added, removed, protocol="json")
        return {"role": "user", "content": note}
