"""Owners: recovery tells a dead owner from a live one, and a reused pid from its first owner."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from evalkit.gate.owner import owner_alive, this_owner


def test_this_process_is_alive_and_a_finished_one_is_not() -> None:
    me = this_owner()
    assert me["pid"] == os.getpid() and me["host"] == socket.gethostname()
    assert owner_alive(me)
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    gone = {**me, "pid": int(child.stdout)}
    assert not owner_alive(gone)


def test_a_reused_pid_is_a_dead_owner_and_another_host_is_not_judged() -> None:
    me = this_owner()
    assert not owner_alive({**me, "start": (me["start"] or 0) + 1})
    assert owner_alive({**me, "host": "elsewhere", "pid": 1})
    assert not owner_alive({"host": socket.gethostname(), "pid": "x"})
