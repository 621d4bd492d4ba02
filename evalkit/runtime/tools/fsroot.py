"""The ``fs`` built-in: read, list and write files under the mission root.

Every path is resolved the way the kernel would (symlinks followed, ``..``
applied after them) and must land inside the root; anything else is refused
with a sentence saying why — absolute path, ``..`` out of the root, or a
symlink (of the file or of a parent directory) that points out. Only regular
files and folders are opened: a FIFO, socket or device could hold the
mission forever (a FIFO's open waits for its other end), so it is refused,
decided on the opened descriptor itself. A refusal is an ordinary failing
tool result, never an exception: an agent that tries the wrong path learns
and tries again.
"""

from __future__ import annotations

import errno
import os
import stat
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
    if action == "write" and "content" not in arguments:
        return ToolResult.failure("fs write needs 'content' (the text to write)")
    try:
        target = resolve_in_root(root, path)
        if action == "read":
            return _read(target, path)
        if action == "list":
            return _list(target, path)
        return _write(target, path, arguments["content"])
    except PathRefused as refused:
        return ToolResult.failure(str(refused))
    except OSError as exc:
        return ToolResult.failure(_failed(action, path, exc))


#: What each kind of file fs does not open is called in its refusal.
_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket",
          stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}


def _open(target: Path, shown: str, flags: int) -> tuple[int, os.stat_result]:
    """A descriptor on ``target`` and its ``fstat``; anything but a file or folder is refused.

    The open never waits: with ``O_NONBLOCK`` a FIFO opens at once (or fails,
    for writing with no reader) instead of holding the mission until someone
    opens its other end. What is then read, listed or written is decided on
    the ``fstat`` of this very descriptor, so a file swapped for a FIFO
    between a look and the open cannot slip through. ``O_NOFOLLOW``: the path
    is resolved already, so a symlink found there now was swapped in.
    """
    try:
        fd = os.open(target, flags | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC,
                     0o644)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket, or a FIFO nobody reads: nothing was opened
            raise _not_regular(shown, _lstat_mode(target)) from None
        if exc.errno == errno.ELOOP:
            raise PathRefused(f"path refused: {shown!r} became a symlink while it was being "
                              "opened") from None
        raise
    info = os.fstat(fd)
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        os.close(fd)
        raise _not_regular(shown, info.st_mode)
    return fd, info


def _not_regular(shown: str, mode: int) -> PathRefused:
    kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
    return PathRefused(f"{shown!r} is {kind}; only regular files and folders are opened")


def _lstat_mode(target: Path) -> int:
    try:
        return os.lstat(target).st_mode
    except OSError:
        return 0


def _failed(action: str, shown: str, exc: OSError) -> str:
    if exc.errno == errno.ENOENT:
        return f"no such {'directory' if action == 'list' else 'file'}: {shown!r}"
    if exc.errno == errno.EISDIR:
        return f"{shown!r} is a directory; name a file to write"
    return f"fs {action} {shown!r} failed: {exc.strerror or exc}"


def read_regular(target: Path, shown: str, limit: int) -> bytes:
    """Up to ``limit`` bytes of the regular file ``target``; never waits on what is not one.

    For in-process tools besides ``fs`` that read files the agent may have
    made: a FIFO, socket or device is refused (``PathRefused``), a folder is
    ``IsADirectoryError``.
    """
    fd, info = _open(target, shown, os.O_RDONLY)
    if stat.S_ISDIR(info.st_mode):
        os.close(fd)
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), shown)
    with os.fdopen(fd, "rb") as handle:
        return handle.read(limit)


def _read(target: Path, shown: str) -> ToolResult:
    fd, info = _open(target, shown, os.O_RDONLY)
    if stat.S_ISDIR(info.st_mode):
        os.close(fd)
        return ToolResult.failure(f"{shown!r} is a directory; use action 'list'")
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_READ_BYTES + 1)
    text = data[:MAX_READ_BYTES].decode("utf-8", errors="replace")
    if len(data) > MAX_READ_BYTES:
        text += f"\n[evalkit: {shown} is {info.st_size} bytes; the first {MAX_READ_BYTES} are shown]"
    return ToolResult.success(text)


def _list(target: Path, shown: str) -> ToolResult:
    fd, info = _open(target, shown, os.O_RDONLY)
    try:
        if not stat.S_ISDIR(info.st_mode):
            return ToolResult.failure(f"{shown!r} is a file; use action 'read'")
        lines = []
        for entry in sorted(os.scandir(fd), key=lambda e: e.name):
            if hidden(os.path.realpath(os.path.join(target, entry.name))):
                continue
            if entry.is_symlink():
                lines.append(f"{entry.name} -> {os.readlink(entry.name, dir_fd=fd)}")
            elif entry.is_dir():
                lines.append(f"{entry.name}/")
            else:
                lines.append(entry.name)
    finally:
        os.close(fd)
    return ToolResult.success("\n".join(lines) if lines else "(empty directory)")


def _write(target: Path, shown: str, content: str) -> ToolResult:
    target.parent.mkdir(parents=True, exist_ok=True)
    data = content.encode("utf-8")
    # Emptied only once the descriptor is known to be a regular file (O_TRUNC acts at open).
    fd, _ = _open(target, shown, os.O_WRONLY | os.O_CREAT)
    with os.fdopen(fd, "wb") as handle:
        handle.truncate(0)
        handle.write(data)
    return ToolResult.success(f"wrote {len(data)} bytes to {shown}")
