"""Who is executing an action, and whether they still can be.

The ledger records the owner of every started action — host, pid and that
pid's start time (from ``/proc``) — so recovery can tell an owner that died
from one still running, even when the pid was reused by a later process.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any


def _process_start(pid: int) -> int | None:
    """A process's start time in clock ticks since boot (Linux), to tell a reused pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def this_owner() -> dict[str, Any]:
    """Who is executing: host, pid and that pid's start time."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "start": _process_start(pid)}


def owner_alive(owner: Any) -> bool:
    """Whether ``owner`` may still be running. Another host's owner cannot be judged here
    and counts as alive; on this host, a gone pid or a pid reused by a later process is dead."""
    if not isinstance(owner, Mapping) or owner.get("host") != socket.gethostname():
        return True
    pid = owner.get("pid")
    if not isinstance(pid, int):
        return False
    started = _process_start(pid)
    if started is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return owner.get("start") is None
    if started != owner.get("start"):
        return False
    try:  # a zombie (killed, not yet reaped) holds its pid but runs nothing
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")
    except OSError:
        return False
