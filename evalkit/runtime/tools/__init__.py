"""The tool plane: descriptors, results, built-ins, MCP servers, sandboxes.

``ToolPlane`` is the bus the mission loop dispatches through; everything a
caller needs is importable from here. See ``docs/INTERFACES.md``.
"""

from __future__ import annotations

from evalkit.runtime.tools.builtins import BUILTIN_NAMES
from evalkit.runtime.tools.descriptor import BUILTIN_PLANE, ResultStore, ToolDescriptor, ToolResult
from evalkit.runtime.tools.mcp_client import McpServerSpec, parse_mcp_specs
from evalkit.runtime.tools.mcp_scopes import Declared
from evalkit.runtime.tools.plane import ToolPlane
from evalkit.runtime.tools.sandbox import Bwrap, NoSandbox, Sandbox

__all__ = [
    "BUILTIN_NAMES",
    "BUILTIN_PLANE",
    "Bwrap",
    "Declared",
    "McpServerSpec",
    "NoSandbox",
    "ResultStore",
    "Sandbox",
    "ToolDescriptor",
    "ToolPlane",
    "ToolResult",
    "parse_mcp_specs",
]
