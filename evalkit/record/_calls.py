"""A model call or a tool call under way, ended by whoever watches it.

The openai wrapper, ``@tool`` and the LangChain handler each see a call begin and
end in their own way (a return, a stream read out, a callback); these two objects
are how they tell the mission, which records them. Ending a call twice is a no-op,
so a stream closed after it was read out is recorded once.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from evalkit.record._jsonable import jsonable
from evalkit.runtime.tools.descriptor import ToolResult
from evalkit.store.runstore import now_iso

if TYPE_CHECKING:
    from evalkit.record._mission import Mission


class ModelCall:
    """One model call under way; the openai wrapper and the LangChain handler end it."""

    def __init__(self, mission: Mission, index: int, request: dict[str, Any]) -> None:
        self.mission, self.index, self.request = mission, index, request
        self._t0 = time.perf_counter()
        #: When it began, as the store writes times: model.jsonl's ``started``, as the
        #: built-in runtime keeps it (the tables time the call from it).
        self.started = now_iso()
        self._ended = False

    def replied(self, reply: dict[str, Any]) -> None:
        """The reply (``{content, tool_calls, usage, extras?}``), with its latency added."""
        if self._ended:
            return
        self._ended = True
        reply = dict(reply)
        reply["extras"] = {**(reply.get("extras") or {}), "latency_s": self._latency()}
        self.mission._model_done(self, reply, reply.get("usage"))

    def failed(self, error: str, *, fault: str | None = None,
               exc: BaseException | None = None) -> None:
        """The call failed; ``fault`` (``transport``/``configuration``) when the wire did it."""
        if self._ended:
            return
        self._ended = True
        said: dict[str, Any] = {"error": error, "latency_s": self._latency()}
        if fault is not None:
            said["fault"] = fault
        self.mission._model_failed(self, said, exc)

    def abandon(self) -> None:
        self.failed("the reply was never read to its end")

    def _latency(self) -> float:
        return round(time.perf_counter() - self._t0, 3)


class ToolCall:
    """One tool call under way: ``returned(value)`` or ``failed(exc)`` ends it."""

    def __init__(self, mission: Mission, index: int, ordinal: int, name: str,
                 arguments: dict[str, Any]) -> None:
        self.mission, self.index, self.ordinal = mission, index, ordinal
        self.name, self.arguments = name, arguments

    def returned(self, value: Any) -> None:
        """The tool's return value: text as it is, anything else as JSON text and
        kept typed in the tool log's ``structured``."""
        if isinstance(value, str):
            result = ToolResult.success(value)
        else:
            data = jsonable(value)
            result = ToolResult.success(json.dumps(data, ensure_ascii=False), structured=data)
        self.mission._tool_done(self, result)

    def failed(self, exc: BaseException | str) -> None:
        """The tool raised (or said it failed, as text): a failing result."""
        said = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        self.mission._tool_done(self, ToolResult.failure(said))
