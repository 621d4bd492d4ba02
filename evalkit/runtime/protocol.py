"""How a reply becomes actions, and how results go back: the shared shape.

A protocol reads one model ``Reply`` into a list of items — ``Call`` (dispatch
a tool), ``Answer`` (finish) or ``Rejection`` (the reply, or one call in it,
could not be acted on) — and writes the messages that carry the outcome of
each item back to the model. The loop never looks inside a reply itself, so
adding a protocol never touches the loop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalkit.runtime.backends import Reply


@dataclass
class Call:
    """A tool the model asked for, with arguments already parsed to a mapping."""

    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass
class Answer:
    """The model's final answer."""

    text: str
    id: str | None = None


@dataclass
class Rejection:
    """A reply (or one call of it) that could not be acted on; it costs the turn."""

    problem: str
    tool: str | None = None
    id: str | None = None


Item = Call | Answer | Rejection


class Protocol(ABC):
    """One way of letting a model call tools (json text or native function calls)."""

    name: str

    @abstractmethod
    def tools(self, catalogue: Sequence[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """The function list sent with each request, or None (tools live in the prompt)."""

    @abstractmethod
    def system_message(self, catalogue: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The system turn opening the conversation."""

    @abstractmethod
    def read(self, reply: Reply, offered: Collection[str]) -> list[Item]:
        """The reply as items, in the order the model wrote them (never empty)."""

    @abstractmethod
    def assistant_message(self, reply: Reply, items: Sequence[Item]) -> dict[str, Any]:
        """The reply as it is appended to the conversation."""

    @abstractmethod
    def rejection_message(self, item: Rejection) -> dict[str, Any]:
        """Tells the model why an item was not acted on."""

    @abstractmethod
    def result_message(self, item: Call, text: str) -> dict[str, Any]:
        """Carries one tool result (already bounded) back to the model."""

    @abstractmethod
    def catalogue_message(self, catalogue: Sequence[dict[str, Any]], added: Sequence[str],
                          removed: Sequence[str]) -> dict[str, Any]:
        """Tells the model the tool catalogue changed between steps."""


def make_protocol(name: str) -> Protocol:
    """The protocol called ``name`` (``json`` or ``native``)."""
    if name == "json":
        from evalkit.runtime.json_protocol import JsonProtocol

        return JsonProtocol()
    if name == "native":
        from evalkit.runtime.native_protocol import NativeProtocol

        return NativeProtocol()
    from evalkit.errors import EvalkitError

    raise EvalkitError(f"unknown protocol {name!r}: use json or native")
