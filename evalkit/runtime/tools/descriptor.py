"""What a tool is, what a call returns, and where whole results are kept.

These three types are the tool plane's vocabulary: the loop shows
``ToolDescriptor.as_dict()`` to the model and to ``tools.jsonl``, receives a
``ToolResult`` from every dispatch, and keeps each result whole in a
``ResultStore`` so an agent can read past a truncation with
``mission_result``.

A result's recorded form (``as_record()``) holds only the raw facts —
exit code, stdout, stderr, typed payload — and ``ToolResult.from_record``
rebuilds the very same result from it, so replay serves exactly what the live
run saw.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: The ``plane`` of every built-in tool; MCP tools carry their namespace.
BUILTIN_PLANE = "builtin"


@dataclass(frozen=True)
class ToolDescriptor:
    """One offered tool.

    ``scopes`` are what any call needs; ``action_scopes`` adds what a call
    needs for one value of its ``action`` argument (``fs`` writes need
    ``fs.write``). Governance asks ``scopes_for(arguments)`` per call.
    ``code`` marks a shell or interpreter on this host; ``network`` marks a
    tool that needs the network (``fetch_page``), so the sandbox policy can allow it.

    An MCP tool's scopes are decided, not fixed (``mcp_scopes``), so it also
    says how: ``scopes_from`` (``annotations``, ``default`` or ``operator``),
    ``declared_by`` for an operator's declaration, and the ``annotations``
    hints its server set. The audit and the recorded catalogue repeat them, so
    a reader can tell a read-only tool from one an operator called read-only.
    Built-ins leave all three unset: their scopes are evalkit's own.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    scopes: tuple[str, ...] = ()
    plane: str = BUILTIN_PLANE
    code: bool = False
    action_scopes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    network: bool = False
    scopes_from: str | None = None
    declared_by: str | None = None
    annotations: Mapping[str, bool] | None = None

    def scopes_for(self, arguments: Mapping[str, Any] | None) -> tuple[str, ...]:
        """The scopes one call with these arguments needs, in declaration order."""
        needed = list(self.scopes)
        action = (arguments or {}).get("action")
        if isinstance(action, str):
            needed += [s for s in self.action_scopes.get(action, ()) if s not in needed]
        return tuple(needed)

    def as_dict(self) -> dict[str, Any]:
        """What the model and the catalogue line of ``tools.jsonl`` see."""
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "parameters": copy.deepcopy(self.parameters),
            "scopes": list(self.scopes),
            "plane": self.plane,
            "code": self.code,
        }
        if self.action_scopes:
            out["action_scopes"] = {k: list(v) for k, v in sorted(self.action_scopes.items())}
        if self.network:  # only when set, so catalogues of tools without it are unchanged
            out["network"] = True
        out.update(self.scope_origin())
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out

    def scope_origin(self) -> dict[str, str]:
        """Where this tool's scopes came from, as the audit and the catalogue write it."""
        origin = {"scopes_from": self.scopes_from, "declared_by": self.declared_by}
        return {k: v for k, v in origin.items() if v is not None}


def compose_output(stdout: str, stderr: str) -> str:
    """The whole text of a result: stdout, then stderr on a line of its own."""
    if not stderr:
        return stdout
    if not stdout:
        return stderr
    return stdout + ("" if stdout.endswith("\n") else "\n") + stderr


def error_of(exit_code: int | None, stdout: str, stderr: str) -> str | None:
    """A one-line reason for a failing result: the last line said, or the exit code."""
    if exit_code == 0:
        return None
    for text in (stderr, stdout):
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if lines:
            return lines[-1]
    return "failed" if exit_code is None else f"exit code {exit_code}"


@dataclass(frozen=True)
class ToolResult:
    """What one dispatch returned, kept whole.

    ``output`` is the full text (stdout then stderr); ``structured`` is the
    typed payload where the tool has one (an MCP ``CallToolResult`` as a
    dict). ``exit_code`` is the process's code for code tools, 0/1 for MCP
    (``isError``) and built-ins, ``None`` when nothing ran (unknown tool,
    invalid arguments) or a process was killed before exiting on its own.
    """

    ok: bool
    exit_code: int | None
    output: str
    error: str | None
    stdout: str = ""
    stderr: str = ""
    structured: Any = None

    @classmethod
    def of(cls, exit_code: int | None, stdout: str = "", stderr: str = "",
           structured: Any = None) -> ToolResult:
        """Build a result from the raw facts; ``ok``, ``output`` and ``error`` follow from them."""
        return cls(
            ok=exit_code == 0,
            exit_code=exit_code,
            output=compose_output(stdout, stderr),
            error=error_of(exit_code, stdout, stderr),
            stdout=stdout,
            stderr=stderr,
            structured=structured,
        )

    @classmethod
    def success(cls, text: str, structured: Any = None) -> ToolResult:
        """A built-in's successful answer."""
        return cls.of(0, stdout=text, structured=structured)

    @classmethod
    def failure(cls, message: str, exit_code: int | None = 1) -> ToolResult:
        """An ordinary failing result: the message is both the output and the error."""
        return cls.of(exit_code, stderr=message)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> ToolResult:
        """Rebuild a result from its ``tools.jsonl`` form; the inverse of ``as_record``."""
        return cls.of(
            record.get("exit_code"),
            stdout=record.get("stdout") or "",
            stderr=record.get("stderr") or "",
            structured=record.get("structured"),
        )

    def as_record(self) -> dict[str, Any]:
        """The ``result`` of a ``tools.jsonl`` line."""
        return {
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "structured": self.structured,
        }


class ResultStore:
    """Whole tool outputs by handle (``r1``, ``r2``, …), for reading past a truncation.

    Thread-safe: parallel branches of one mission share one store.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[str] = []

    def put(self, output: str) -> str:
        """Keep one output whole; returns its handle."""
        with self._lock:
            self._items.append(output)
            return f"r{len(self._items)}"

    def get(self, handle: str) -> str | None:
        """The output kept under ``handle``, or None for a handle never given out."""
        if not (isinstance(handle, str) and handle[:1] == "r" and handle[1:].isdigit()):
            return None
        index = int(handle[1:])
        if handle != f"r{index}":
            return None
        with self._lock:
            return self._items[index - 1] if 1 <= index <= len(self._items) else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


def object_schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """The JSON schema of a tool's arguments: these properties, no others."""
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
