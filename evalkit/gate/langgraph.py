"""Govern a LangGraph agent's tools through the gate sidecar (the ``langgraph`` extra).

``governed_tools(client, tools)`` registers each LangChain tool's body with the
gate and returns stand-ins with the same name, description and argument schema.
Put the stand-ins in the graph (``ToolNode(governed)``, ``model.bind_tools(governed)``):
when the model calls one, the stand-in only *proposes* the call (``govern``); the
real body runs when the gate, after arbitration, asks for it (``run_tool``), at
most once per idempotency key.

The key is the prefix (the gate's run id unless given) and the model's tool call
id, so the same tool call handled twice — a node retried, a graph resumed from a
checkpoint, a model repeating its call after a hold — is one action: it runs once
and every later attempt gets the recorded outcome, or the hold's current state.

A call that does not complete becomes a tool error the model reads (``ToolMessage``
with status ``error``): ``rejected (unknown_tool): …``, ``pending_approval
(requires_approval): … approval by 2026-…``. Nothing of LangGraph's own is changed.

LangChain is imported here, lazily by whoever imports this module: the rest of
``evalkit.gate`` needs none of it.
"""

from __future__ import annotations

import contextvars
import uuid
from collections.abc import Iterable
from typing import Any

from evalkit.extras import GATE_LANGGRAPH, require

require(GATE_LANGGRAPH)  # one sentence naming the extra, not an ImportError

from langchain_core.tools import BaseTool, ToolException  # noqa: E402
from pydantic import ConfigDict  # noqa: E402

from evalkit.gate.client import Client, GovernResult  # noqa: E402

#: The tool call id of the call being handled, for the key (set around ``run``).
_CALL_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("evalkit_gate_call",
                                                                      default=None)


class GovernedTool(BaseTool):
    """A LangChain tool whose every call goes through the gate first."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: Any
    key_prefix: str
    wait_ms: int = 0
    handle_tool_error: bool = True

    def run(self, tool_input: Any, *args: Any, tool_call_id: str | None = None,
            **kwargs: Any) -> Any:
        token = _CALL_ID.set(tool_call_id)
        try:
            return super().run(tool_input, *args, tool_call_id=tool_call_id, **kwargs)
        finally:
            _CALL_ID.reset(token)

    async def arun(self, tool_input: Any, *args: Any, tool_call_id: str | None = None,
                   **kwargs: Any) -> Any:
        # The synchronous _run then runs in an executor, which copies this context.
        token = _CALL_ID.set(tool_call_id)
        try:
            return await super().arun(tool_input, *args, tool_call_id=tool_call_id, **kwargs)
        finally:
            _CALL_ID.reset(token)

    def _run(self, *args: Any, run_manager: Any = None, **kwargs: Any) -> Any:
        call_id = _CALL_ID.get()
        key = f"{self.key_prefix}:{call_id}" if call_id else f"{self.key_prefix}:{uuid.uuid4()}"
        result: GovernResult = self.client.govern(self.name, kwargs, idempotency_key=key,
                                                  wait_ms=self.wait_ms)
        if result.completed:
            return result.result
        said = f"{result.phase} ({result.kind}): {result.reason}"
        if result.error:
            said += f": {result.error}"
        if result.phase == "pending_approval":
            said += f"; a person may approve it until {result.deadline} (key {key})"
        raise ToolException(said)


def governed_tools(client: Client, tools: Iterable[BaseTool], *,
                   key_prefix: str | None = None, wait_ms: int = 0) -> list[GovernedTool]:
    """Register each tool's body with the gate; the governed stand-ins, in order.

    ``key_prefix`` scopes the idempotency keys (default: the gate's run id): use one
    per conversation (thread id) when one gate serves several. ``wait_ms``: how long
    a call of a held tool waits for a signed decision before answering.
    """
    prefix = key_prefix or client.run_id or uuid.uuid4().hex
    governed = []
    for tool in tools:
        client.register_tool(tool.name, _body(tool), description=tool.description or "")
        governed.append(GovernedTool(name=tool.name, description=tool.description or "",
                                     args_schema=tool.args_schema, client=client,
                                     key_prefix=prefix, wait_ms=wait_ms))
    return governed


def _body(tool: BaseTool) -> Any:
    """The real body: the original tool, invoked with the arguments the gate decided on."""
    def body(**arguments: Any) -> Any:
        return tool.invoke(arguments)

    return body
