"""Helpers for tests that drive real missions with scripted agents (json protocol)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalkit.planes import stub_command

#: The stub MCP server's command line, for --mcp-stdio.
STUB = stub_command()


def call(tool: str, **arguments: Any) -> str:
    """A scripted json-protocol reply that calls one tool."""
    return json.dumps({"tool": tool, "arguments": arguments})


def answer(text: str) -> str:
    """A scripted json-protocol reply that answers."""
    return json.dumps({"answer": text})


def write_script(path: Path, items: Sequence[Any]) -> Path:
    path.write_text(json.dumps(list(items)), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


class LeftBehind:
    """What a finished mission left behind, looked up: its records by event, its call logs.

    A mixin for the result dataclasses of the test packages; each has ``records``
    (the stream) and ``run_dir`` (None when nothing was recorded).
    """

    records: list[dict[str, Any]]
    run_dir: Path | None

    def events(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["event"] == name]

    @property
    def names(self) -> list[str]:
        return [r["event"] for r in self.records]

    @property
    def model_calls(self) -> list[dict[str, Any]]:
        return read_jsonl(self.run_dir / "model.jsonl") if self.run_dir else []

    @property
    def tool_lines(self) -> list[dict[str, Any]]:
        return read_jsonl(self.run_dir / "tools.jsonl") if self.run_dir else []
