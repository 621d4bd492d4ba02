"""Ports on 127.0.0.1 for the tests: is one taken, and whose turn it is at the fixed one.

The research pack's pages server listens on the port its suite names
(``serve_port: 8808``), since its recorded URLs carry it. Within one pytest
run the tests that start it share one xdist worker; ``pages_port_turn``
also keeps two test runs on one host (two checkouts, two CI jobs) from
starting it at the same time: each waits for the other's turn to end
rather than failing on a port that is busy for a minute.
"""

from __future__ import annotations

import contextlib
import fcntl
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

#: The research pack's pages server port (``serve_port`` in its missions.yaml).
PAGES_PORT = 8808
#: How long a test waits for another run's turn at the port before it fails.
TURN_WAIT_S = 20 * 60


def port_busy(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def pages_port_turn() -> Iterator[None]:
    """Hold this host's turn at ``PAGES_PORT`` for the block (a lock file in the temp dir).

    Not reentrant: a flock is per open file, so a nested turn would wait for itself.
    """
    lock = Path(tempfile.gettempdir()) / f"evalkit-tests-port-{PAGES_PORT}.lock"
    with open(lock, "a") as handle:
        deadline = time.monotonic() + TURN_WAIT_S
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"another test run has held port {PAGES_PORT} for "
                                f"{TURN_WAIT_S // 60} minutes ({lock})")
                time.sleep(0.5)
        try:
            if port_busy(PAGES_PORT):
                pytest.skip(f"port {PAGES_PORT} (the research pack's pages server) is in use "
                            "on this host by something other than evalkit's tests")
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
