"""The ``fs`` built-in: read, list and write files under the mission root.

Every path is resolved the way the kernel would (symlinks followed, ``..``
applied after them) and must land inside the root; anything else is refused
with a sentence saying why — absolute path, ``..`` out of the root, or a
symlink (of the file or of a parent directory) that points out. A refusal
is an ordinary failing tool result, never an exception: an agent that tries
the wrong path learns and tries again.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from evalkit.runtime.tools.descriptor import ToolResult

#: Bytes of one file ``fs read`` returns; the rest is named, not shown.
MAX_READ_BYTES = 8 * 1024 * 1024

#: Folders no tool path may reach, even inside a mission root: evalkit's own state (run
#: store, audit, approvals, keys) when an operator points it there (``hide``).
_HIDDEN: set[str] = set()


def hide(folders: Iterable[Path | str]) -> None:
    """Make ``folders`` unreachable to every tool path of this process from now on."""
    _HIDDEN.update(os.path.realpath(f) for f in folders)


def hidden(real: str) -> bool:
    """Whether the real path ``real`` is, or is inside, a hidden folder."""
    return any(real == h or real.startswith(h + os.sep) for h in _HIDDEN)


class PathRefused(ValueError):
    """A path the fs tool will not touch; the message is for the model."""


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root


def resolve_in_root(root: Path | str, path: str) -> Path:
    """The real path ``path`` names under ``root``; raises ``PathRefused`` when it leaves it.

    Absolute paths are refused outright (the mission root is the only
    frame of reference), ``..`` that climbs out is refused, and a path that
    stays inside on paper but leaves through a symlink is refused too.
    """
    if not isinstance(path, str):
        raise PathRefused("path must be a string")
    if "\x00" in path:
        raise PathRefused("path contains a NUL byte")
    if os.path.isabs(path):
        raise PathRefused(
            f"absolute path refused: {path!r}; give a path relative to the mission root"
        )
    real_root = os.path.realpath(root)
    joined = os.path.join(real_root, path or ".")
    if not _inside(os.path.normpath(joined), real_root):
        raise PathRefused(f"path refused: {path!r} leads out of the mission root through '..'")
    real = os.path.realpath(joined)
    if not _inside(real, real_root):
        raise PathRefused(f"path refused: {path!r} leads out of the mission root through a symlink")
    if hidden(real):
        raise PathRefused(f"path refused: {path!r} is evalkit's own state (run store, audit, "
                          "approvals), which no tool may touch")
    return Path(real)


def fs_tool(root: Path, arguments: dict[str, Any]) -> ToolResult:
    """Run one validated ``fs`` call."""
    action = arguments["action"]
    path = arguments.get("path", ".")
    try:
        target = resolve_in_root(root, path)
    except PathRefused as refused:
        return ToolResult.failure(str(refused))
    try:
        if action == "read":
            return _read(target, path)
        if action == "list":
            return _list(target, path)
        if "content" not in arguments:
            return ToolResult.failure("fs write needs 'content' (the text to write)")
        return _write(target, path, arguments["content"])
    except OSError as exc:
        return ToolResult.failure(f"fs {action} {path!r} failed: {exc.strerror or exc}")


def _read(target: Path, shown: str) -> ToolResult:
    if target.is_dir():
        return ToolResult.failure(f"{shown!r} is a directory; use action 'list'")
    if not target.exists():
        return ToolResult.failure(f"no such file: {shown!r}")
    with open(target, "rb") as handle:
        data = handle.read(MAX_READ_BYTES + 1)
    text = data[:MAX_READ_BYTES].decode("utf-8", errors="replace")
    if len(data) > MAX_READ_BYTES:
        size = target.stat().st_size
        text += f"\n[evalkit: {shown} is {size} bytes; the first {MAX_READ_BYTES} are shown]"
    return ToolResult.success(text)


def _list(target: Path, shown: str) -> ToolResult:
    if not target.exists():
        return ToolResult.failure(f"no such directory: {shown!r}")
    if not target.is_dir():
        return ToolResult.failure(f"{shown!r} is a file; use action 'read'")
    lines = []
    for entry in sorted(os.scandir(target), key=lambda e: e.name):
        if hidden(os.path.realpath(entry.path)):
            continue
        if entry.is_symlink():
            lines.append(f"{entry.name} -> {os.readlink(entry.path)}")
        elif entry.is_dir():
            lines.append(f"{entry.name}/")
        else:
            lines.append(entry.name)
    return ToolResult.success("\n".join(lines) if lines else "(empty directory)")


def _write(target: Path, shown: str, content: str) -> ToolResult:
    if target.is_dir():
        return ToolResult.failure(f"{shown!r} is a directory; name a file to write")
    target.parent.mkdir(parents=True, exist_ok=True)
    data = content.encode("utf-8")
    # O_NOFOLLOW: a symlink swapped in after the check above is refused, not followed.
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return ToolResult.success(f"wrote {len(data)} bytes to {shown}")
