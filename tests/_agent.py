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
