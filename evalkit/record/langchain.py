"""A LangChain callback handler that records a LangChain or LangGraph agent's calls.

    from evalkit.record.langchain import Handler

    with evalkit.record.mission(objective) as m:
        state = graph.invoke({"messages": [("user", objective)]},
                             config={"callbacks": [Handler()]})
        m.answer(state["messages"][-1].content)

LangChain already tells its callbacks every chat-model call and every tool
call, with what was asked and what came back; the handler passes each to the
open mission (``evalkit.record.current``, or the one it was given), so the
graph's own code is not touched. A chat-model call is one step, as in the
built-in loop; its reply is recorded as the model said it — the raw tool calls
and token counts the provider sent where LangChain kept them, its normalised
ones otherwise. Needs the ``langgraph`` extra.

A model call is recorded once, by one owner. The handler owns it by default. To
replay a graph with no model (``EVALKIT_REPLAY``), the chat model's own ``openai``
client must be served the recording, which only ``wrap_openai`` can do: wrap it
(``wrap_openai(chat.root_client)``, and ``chat.root_async_client`` for async
graphs) and pass ``Handler(models=False)``. The wrapper then records every model
call from the wire (request, reply and usage as the provider sent them) and serves
them in a replay; the handler records the tool calls only.
"""

from __future__ import annotations

import json
import threading
from typing import Any
from uuid import UUID

from evalkit.record._calls import ModelCall, ToolCall
from evalkit.record._current import current
from evalkit.record._jsonable import jsonable
from evalkit.record._mission import Mission

try:
    from langchain_core.callbacks import BaseCallbackHandler
except ImportError as exc:  # pragma: no cover - said in one sentence instead
    raise ImportError("evalkit.record.langchain needs the langgraph extra: "
                      "pip install 'evalkit[langgraph]'") from exc


class Handler(BaseCallbackHandler):
    """Records chat-model and tool calls into ``mission`` (default: the open one);
    ``models=False`` leaves the model calls to ``wrap_openai`` on the model's client."""

    #: Called in the order LangChain calls it, on its thread: steps keep their order.
    run_inline = True
    raise_error = False

    def __init__(self, mission: Mission | None = None, *, models: bool = True) -> None:
        super().__init__()
        self._mission = mission
        self._record_models = models
        self._models: dict[UUID, ModelCall] = {}
        self._tools: dict[UUID, ToolCall] = {}
        self._lock = threading.Lock()

    def _open(self) -> Mission | None:
        found = self._mission or current()
        return found if found is not None and not found.closed else None

    # -- models ---------------------------------------------------------------------------

    def on_chat_model_start(self, serialized: dict[str, Any] | None,
                            messages: list[list[Any]], *, run_id: UUID,
                            **kwargs: Any) -> None:
        mission = self._open() if self._record_models else None
        if mission is None:
            return
        params = dict(kwargs.get("invocation_params") or {})
        tools = [t for t in jsonable(params.get("tools") or []) if isinstance(t, dict)]
        extra = {k: v for k, v in params.items() if k not in ("messages",)}
        extra["provider"] = "langchain"
        request = {"messages": _openai_messages(messages[0] if messages else []),
                   "extra": jsonable(extra)}
        call = mission.model_call(request, tools=tools or None)
        with self._lock:
            self._models[run_id] = call

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            call = self._models.pop(run_id, None)
        if call is not None:
            call.replied(_reply(response))

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            call = self._models.pop(run_id, None)
        if call is not None:
            call.failed(f"{type(error).__name__}: {error}", exc=error)

    # -- tools ----------------------------------------------------------------------------

    def on_tool_start(self, serialized: dict[str, Any] | None, input_str: str, *,
                      run_id: UUID, inputs: dict[str, Any] | None = None,
                      **kwargs: Any) -> None:
        mission = self._open()
        if mission is None:
            return
        name = (serialized or {}).get("name") or kwargs.get("name") or "tool"
        arguments = inputs if isinstance(inputs, dict) else _arguments(input_str)
        call = mission.tool_call(str(name), arguments)
        with self._lock:
            self._tools[run_id] = call

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            call = self._tools.pop(run_id, None)
        if call is None:
            return
        if getattr(output, "status", None) == "error":  # a ToolMessage saying it failed
            call.failed(str(getattr(output, "content", output)))
            return
        content = getattr(output, "content", output)
        call.returned(content)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            call = self._tools.pop(run_id, None)
        if call is not None:
            call.failed(error)


def _openai_messages(messages: list[Any]) -> list[Any]:
    """LangChain messages in the chat-completions shape the built-in runtime records."""
    try:
        from langchain_core.messages import convert_to_openai_messages

        return jsonable(convert_to_openai_messages(messages))
    except Exception:  # an older langchain_core, or a message it cannot convert
        return jsonable(messages)


def _arguments(text: str) -> dict[str, Any]:
    try:
        found = json.loads(text)
    except (TypeError, ValueError):
        return {"input": text}
    return found if isinstance(found, dict) else {"input": found}


def _reply(response: Any) -> dict[str, Any]:
    """The reply half of a model.jsonl line from a LangChain ``LLMResult``."""
    generations = getattr(response, "generations", None) or [[]]
    first = generations[0][0] if generations and generations[0] else None
    message = getattr(first, "message", None)
    content = getattr(message, "content", getattr(first, "text", None))
    raw = (getattr(message, "additional_kwargs", None) or {}).get("tool_calls")
    if raw:  # the provider's own calls, arguments as the JSON text it sent
        calls = [{"name": (c.get("function") or {}).get("name", ""),
                  "arguments": (c.get("function") or {}).get("arguments", ""),
                  **({"id": c["id"]} if c.get("id") else {})} for c in raw]
    else:
        calls = [{"name": c.get("name", ""), "arguments": json.dumps(c.get("args") or {}),
                  **({"id": c["id"]} if c.get("id") else {})}
                 for c in getattr(message, "tool_calls", None) or []]
    extras: dict[str, Any] = {}
    info = getattr(first, "generation_info", None) or {}
    if info.get("finish_reason") is not None:
        extras["finish_reason"] = info["finish_reason"]
    return {"content": jsonable(content) if content not in ("", None) or not calls else None,
            "tool_calls": jsonable(calls), "usage": _usage(response, message),
            **({"extras": extras} if extras else {})}


def _usage(response: Any, message: Any) -> dict[str, Any] | None:
    """As the provider reported it (``llm_output.token_usage``), else LangChain's count."""
    said = (getattr(response, "llm_output", None) or {}).get("token_usage")
    if isinstance(said, dict) and said:
        return {k: v for k, v in jsonable(said).items() if v is not None} or None
    meta = getattr(message, "usage_metadata", None)
    if not meta:
        return None
    usage = {"prompt_tokens": meta.get("input_tokens"),
             "completion_tokens": meta.get("output_tokens"),
             "total_tokens": meta.get("total_tokens")}
    return {k: v for k, v in usage.items() if v is not None} or None
