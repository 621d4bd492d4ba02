"""A Python start-up hook that refuses every non-Unix socket, for replay tests.

Replay must need no network; a child process started with ``blocking_site``
on its ``PYTHONPATH`` fails loudly ("network blocked ...") on any attempt.
"""

from __future__ import annotations

from pathlib import Path

BLOCK_SOCKETS = '''
import socket

class _NoNetwork(socket.socket):
    def __init__(self, family=-1, type=-1, proto=-1, fileno=None):
        if family != socket.AF_UNIX and fileno is None:
            raise OSError("network blocked by an evalkit replay test")
        super().__init__(family, type, proto, fileno)

def _refuse(*args, **kwargs):
    raise OSError("network blocked by an evalkit replay test")

socket.socket = _NoNetwork
socket.create_connection = _refuse
socket.getaddrinfo = _refuse
'''


def blocking_site(folder: Path) -> Path:
    """``folder`` holding a ``sitecustomize.py`` that blocks the network (created if needed)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(BLOCK_SOCKETS, encoding="utf-8")
    return folder
