"""A disk that fills up half way through one file: files replaced whole, and the run
store's append-only logs.

Plain functions (no fixtures) so any test module can import them.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, BinaryIO

import pytest

from evalkit.store import replace, runstore


def fills_on(monkeypatch: pytest.MonkeyPatch, name: str, room: int = 10) -> None:
    """Writing ``name`` takes ``room`` bytes, then fails with ENOSPC; other files are written.

    What ``replace_file`` writes goes through ``replace.write_parts`` into a
    temporary sibling ``.NAME.PID.tmp``; a write in place bypasses it, so a
    writer that still writes in place fails the test by succeeding.
    """
    written = replace.write_parts

    def write_parts(stream: BinaryIO, parts: Sequence[replace.Part]) -> None:
        if not Path(stream.name).name.startswith(f".{name}."):
            written(stream, parts)
            return
        data = replace.joined(parts)
        written(stream, [data[:room]])
        stream.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(replace, "write_parts", write_parts)


def leftovers(folder: Path) -> list[str]:
    """Temporary siblings left in ``folder`` (there should be none)."""
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def appends_fill(monkeypatch: pytest.MonkeyPatch, name: str, *, lines: int,
                 room: int = 5) -> list[int]:
    """The run store's ``name`` (``events.jsonl``, ``model.jsonl`` …) takes ``lines``
    whole lines, then ``room`` bytes of the next, then refuses every write with ENOSPC.

    The store's own ``os.write`` is replaced (no other module's): the file is told by
    the path its descriptor has, so the real short write and the real errno reach the
    writer. Returns a list that grows by one for each write refused.
    """
    real = runstore.os
    taken = [0]
    refused: list[int] = []

    def write(fd: int, data: Any) -> int:
        if not os.readlink(f"/proc/self/fd/{fd}").endswith(f"/{name}"):
            return real.write(fd, data)
        if taken[0] < lines:
            taken[0] += 1
            return real.write(fd, data)
        if taken[0] == lines:
            taken[0] += 1
            return real.write(fd, bytes(data[:room]))  # the short write of a disk nearly full
        refused.append(len(data))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    names = {attr: getattr(real, attr) for attr in dir(real) if not attr.startswith("__")}
    monkeypatch.setattr(runstore, "os", SimpleNamespace(**{**names, "write": write}))
    return refused
