"""Temporary folders named for the process that made them.

A process killed with -9 cleans nothing up: an ingest leaves a half-written
dataset beside the real one, a score of a million runs 1.5 GB of rendered
parts in the temp directory. Naming each such folder ``PREFIX HOST-PID``
lets a later process on the same machine tell the abandoned ones (their
process is gone) from those still in use, and remove only the former. A
folder named on another host is never touched: its process cannot be seen.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterable
from pathlib import Path


def tagged(prefix: str) -> str:
    """``prefix`` followed by this machine's name and this process's id."""
    return f"{prefix}{socket.gethostname()}-{os.getpid()}"


def remove_left_behind(folder: Path, prefixes: Iterable[str]) -> list[str]:
    """Remove what ``tagged`` named in ``folder`` for a process gone from this machine.

    A name with no host (``PREFIX PID``, as ingest named them before) counts as
    from here. Returns the names removed.
    """
    here = socket.gethostname()
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    removed = []
    for name in names:
        for prefix in prefixes:
            if not name.startswith(prefix):
                continue
            host, _, pid = name[len(prefix):].rpartition("-")
            if host in ("", here) and pid.isdigit() and not running(int(pid)):
                shutil.rmtree(folder / name, ignore_errors=True)
                removed.append(name)
            break
    return removed


def running(pid: int) -> bool:
    """Whether a process with this id exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # there, but not ours to signal
    return True
