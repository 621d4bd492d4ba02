"""A tiny MCP server over stdio, written with the official SDK's FastMCP (``MCPServer`` in mcp 2),
whose tools cover every way a server can annotate a tool.

It keeps a list of notes in memory, so a test can ask (``peek``) whether a
denied write really never ran. Nothing here reaches outside the process:
``lookup`` only says it does, which is what its annotations are tested for.

Run as ``python annotated_server.py``.
"""

from __future__ import annotations

import json

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("annotated")
notes: list[str] = []


@server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
def peek() -> str:
    """Read-only, closed world: the notes kept so far, as a JSON list."""
    return json.dumps(notes)


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                         idempotent_hint=False, open_world_hint=False))
def note(text: str) -> int:
    """Writes, only adding: keep one more note."""
    notes.append(text)
    return len(notes)


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True,
                                         idempotent_hint=True, open_world_hint=False))
def wipe() -> int:
    """Destructive: forget every note."""
    gone = len(notes)
    notes.clear()
    return gone


@server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True))
def lookup(query: str) -> str:
    """Read-only, open world: would ask the web (answers from nowhere but here)."""
    return f"nothing found for {query}"


@server.tool(annotations=ToolAnnotations(read_only_hint=False))
def stamp() -> int:
    """Says only that it is not read-only: a writer, and nothing more is assumed."""
    notes.append("stamp")
    return len(notes)


@server.tool()
def bare(text: str) -> str:
    """No annotations at all."""
    return text


if __name__ == "__main__":
    server.run()
