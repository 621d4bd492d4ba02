"""The built-in tools: their descriptors, and ``mission_result``.

Descriptors are written out by hand — they are what the model reads, so
every word is chosen — and their schemas close over their arguments
(``additionalProperties: false``) so a misspelt argument is named back to
the model instead of silently ignored. ``fs`` lives in ``fsroot``, the code
tools in ``codetools``; ``mission_result`` is small enough to live here.
"""

from __future__ import annotations

import json
from typing import Any

from evalkit.runtime.tools import coding, jsonpath, research
from evalkit.runtime.tools.descriptor import (
    ResultStore,
    ToolDescriptor,
    ToolResult,
    object_schema,
)

#: The default built-ins (a plane given no ``builtins`` list), in catalogue order.
BUILTIN_NAMES: tuple[str, ...] = ("fs", "run_python_code", "run_shell_command", "mission_result")

#: Built-ins offered only when a plane's ``builtins`` list names them: the mission packs'
#: coding tools (``coding.py``) and research tool (``research.py``).
OPT_IN_NAMES: tuple[str, ...] = coding.CODING_NAMES + research.RESEARCH_NAMES


FS = ToolDescriptor(
    name="fs",
    description=(
        "Read a file, list a directory, or write a file under the mission root (the working "
        "directory). Paths are relative to the root; absolute paths, '..' out of the root and "
        "symlinks leading out are refused."
    ),
    parameters=object_schema({
        "action": {"type": "string", "enum": ["read", "list", "write"],
                   "description": "read a file, list a directory, or write a file"},
        "path": {"type": "string", "description": "relative to the mission root; default '.'"},
        "content": {"type": "string", "description": "the text to write (write only)"},
    }, ["action"]),
    scopes=("fs.read",),
    action_scopes={"write": ("fs.write",)},
)

RUN_PYTHON_CODE = ToolDescriptor(
    name="run_python_code",
    description=(
        "Run a Python program in the mission root and return its stdout, stderr and exit code. "
        "Print what you want to see."
    ),
    parameters=object_schema({
        "code": {"type": "string", "description": "the whole program"},
    }, ["code"]),
    scopes=("python.exec",),
    code=True,
)

RUN_SHELL_COMMAND = ToolDescriptor(
    name="run_shell_command",
    description=(
        "Run one shell command line (bash) in the mission root and return its stdout, stderr "
        "and exit code."
    ),
    parameters=object_schema({
        "command": {"type": "string", "description": "the command line"},
    }, ["command"]),
    scopes=("shell.exec",),
    code=True,
)

MISSION_RESULT = ToolDescriptor(
    name="mission_result",
    description=(
        "Read a stored tool result by its handle (r1, r2, ...), whole or in part: a JSON path "
        "such as 'rows.3.name' or '$.rows[3].name' picks one value of a JSON result; offset and "
        "length pick a slice of the text. Use it to read past a truncated result."
    ),
    parameters=object_schema({
        "handle": {"type": "string", "pattern": "^r[1-9][0-9]*$",
                   "description": "the handle a truncated result named"},
        "path": {"type": "string", "description": "a JSON path into the result (optional)"},
        "offset": {"type": "integer", "minimum": 0,
                   "description": "first character to return (optional, default 0)"},
        "length": {"type": "integer", "minimum": 1,
                   "description": "how many characters to return (optional, default all)"},
    }, ["handle"]),
)

#: Every built-in by name, in catalogue order (the pack tools before ``mission_result``).
DESCRIPTORS: dict[str, ToolDescriptor] = {
    d.name: d for d in (FS, RUN_PYTHON_CODE, RUN_SHELL_COMMAND,
                        *coding.DESCRIPTORS.values(), *research.DESCRIPTORS.values(),
                        MISSION_RESULT)
}


def mission_result(results: ResultStore, arguments: dict[str, Any]) -> ToolResult:
    """Run one validated ``mission_result`` call."""
    handle = arguments["handle"]
    stored = results.get(handle)
    if stored is None:
        count = len(results)
        known = f"r1..r{count}" if count else "none yet"
        return ToolResult.failure(f"no stored result {handle!r} (handles so far: {known})")
    text = stored
    path = arguments.get("path")
    if path:
        try:
            document = json.loads(stored)
        except ValueError:
            return ToolResult.failure(
                f"result {handle} is not JSON, so a path cannot index it; "
                "read it without a path (offset and length pick a slice)"
            )
        try:
            value = jsonpath.lookup(document, path)
        except jsonpath.PathError as exc:
            return ToolResult.failure(f"{handle}: {exc}")
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    offset = arguments.get("offset", 0)
    length = arguments.get("length")
    if offset or length is not None:
        if offset >= len(text) and text:
            return ToolResult.failure(
                f"offset {offset} is past the end ({len(text)} characters)")
        text = text[offset:] if length is None else text[offset:offset + length]
    return ToolResult.success(text)
