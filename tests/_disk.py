"""A disk that fills up half way through one file, for tests of files replaced whole.

Plain functions (no fixtures) so any test module can import them.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import pytest

from evalkit.store import replace


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
