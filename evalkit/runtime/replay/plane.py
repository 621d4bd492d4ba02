"""The tool side of replay: recorded results served in place of every dispatch.

``RecordedPlane`` stands where a ``ToolPlane`` stands and offers the
catalogue the recording offered. A dispatch is matched by its canonical
(tool, arguments) key — the arguments scrubbed and written as canonical JSON,
exactly as ``tools.jsonl`` holds them — and served that key's recorded
results in their recorded order. A call the recording does not hold (or
whose recorded results are all served) gets a failing result that says
``not_in_recording``; nothing is ever run. A catalogue that changed during
the recorded run changes again after the same number of dispatches.
"""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Any

from evalkit.redact import redact_obj
from evalkit.runtime.tools import ResultStore, ToolDescriptor, ToolResult
from evalkit.runtime.tools.mcp_scopes import hints_of

#: The word every refusal of an unrecorded call starts with.
NOT_IN_RECORDING = "not_in_recording"


def call_key(tool: str, arguments: Any) -> str:
    """The canonical key of one call, as a recording line would spell it."""
    args = json.dumps(redact_obj(arguments), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)
    return f"{tool}\x00{args}"


def descriptor_of(tool: dict[str, Any]) -> ToolDescriptor:
    """A catalogue entry of ``tools.jsonl`` back into the descriptor it was written from."""
    return ToolDescriptor(
        name=str(tool.get("name")), description=str(tool.get("description") or ""),
        parameters=dict(tool.get("parameters") or {}), scopes=tuple(tool.get("scopes") or ()),
        plane=str(tool.get("plane") or "builtin"), code=bool(tool.get("code")),
        action_scopes={k: tuple(v) for k, v in (tool.get("action_scopes") or {}).items()},
        network=bool(tool.get("network")),
        scopes_from=_text(tool.get("scopes_from")), declared_by=_text(tool.get("declared_by")),
        annotations=hints_of(tool.get("annotations")))


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


class _Named:
    """A stand-in sandbox: only its name is ever read (for ``mission_started.sandbox``)."""

    def __init__(self, name: str) -> None:
        self.name = name


class RecordedPlane:
    """``tools.jsonl`` as a tool plane: ``catalogue``/``refresh``/``dispatch``, no side effects."""

    def __init__(self, lines: list[dict[str, Any]], results: ResultStore, *,
                 sandbox: str = "none", root: Path | None = None) -> None:
        self.results = results
        self.sandbox = _Named(sandbox)
        self.root = Path(root) if root is not None else Path.cwd()
        #: (dispatches served before it, catalogue) for each catalogue line, in order.
        self._catalogues: list[tuple[int, list[ToolDescriptor]]] = []
        self._queues: dict[str, deque[dict[str, Any]]] = {}
        self._counts: dict[str, int] = {}
        dispatched = 0
        for line in lines:
            if line.get("call") == 0 and isinstance(line.get("catalogue"), list):
                self._catalogues.append(
                    (dispatched, [descriptor_of(t) for t in line["catalogue"] if isinstance(t, dict)]))
                continue
            if not isinstance(line.get("tool"), str):
                continue
            key = call_key(line["tool"], line.get("arguments") or {})
            self._queues.setdefault(key, deque()).append(line.get("result") or {})
            self._counts[key] = self._counts.get(key, 0) + 1
            dispatched += 1
        self.recorded = dispatched
        self.served = 0
        self.refused = 0
        self._shown = 0  # index of the catalogue in force
        self._tools = {d.name: d for d in self._current()}

    # -- the ToolPlane surface ----------------------------------------------------------------

    def start(self) -> RecordedPlane:
        return self

    def close(self) -> None:
        pass

    def __enter__(self) -> RecordedPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def catalogue(self) -> list[ToolDescriptor]:
        return list(self._current())

    def descriptor(self, name: str) -> ToolDescriptor | None:
        return self._tools.get(name)

    def refresh(self) -> bool:
        """Move to the next recorded catalogue once as many calls were served as before it."""
        moved = False
        while (self._shown + 1 < len(self._catalogues)
               and self._catalogues[self._shown + 1][0] <= self.served + self.refused):
            self._shown += 1
            moved = True
        if moved:
            self._tools = {d.name: d for d in self._current()}
        return moved

    def dispatch(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        key = call_key(name, arguments)
        queue = self._queues.get(key)
        if not queue:
            self.refused += 1
            recorded = self._counts.get(key, 0)
            why = ("was never called with these arguments" if not recorded else
                   f"was called {recorded} time(s) with these arguments, all served already")
            return ToolResult.failure(
                f"{NOT_IN_RECORDING}: {name} {why} in the recording this replay serves; "
                "nothing was run", None)
        self.served += 1
        return ToolResult.from_record(queue.popleft())

    def stats(self) -> dict[str, int]:
        """What ``meta.replay_tools`` says: recorded, served and refused dispatches."""
        return {"recorded": self.recorded, "served": self.served,
                NOT_IN_RECORDING: self.refused}

    def _current(self) -> list[ToolDescriptor]:
        return self._catalogues[self._shown][1] if self._catalogues else []
