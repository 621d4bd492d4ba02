"""The fork server's wire, and the relay that stands in for a server it forks.

One request per connection (``SOCK_SEQPACKET``, so a message arrives whole,
with the descriptors it carries): the argv, environment and working
directory a spawn would get, the target number of each descriptor, whether
to start a new session. Replies: ``{"pid": N}`` then ``{"exit": CODE}``
(``subprocess``'s return code, negative for a signal), or ``{"refused":
WHY}`` — the caller then spawns the ordinary way. While the child runs the
requester may send ``{"signal": N}``; a requester that goes away takes its
child's process group with it.

Stdlib only, and runnable as a file: an MCP client spawns
``python -S wire.py ADDRESS -- ARGV`` where it would spawn ``ARGV``. The
relay hands its own stdin, stdout and stderr to a child forked with ``ARGV``,
lets go of them (so the pipes end when the child does), passes on the
signals it gets and exits as the child did. Refused or unreachable, it
becomes ``ARGV`` itself (``execv``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from typing import Any

#: A request carries an environment: far below a seqpacket socket's default buffer.
MAX_MESSAGE = 128 * 1024
MAX_FDS = 8
#: Variables a child applies after the fork (stdio buffering, writing bytecode).
APPLIED = ("PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE")
#: The modules a fork server runs as ``python -m MODULE``: the built-in runtime's command
#: line and the stub MCP server, whose imports were checked to read no process state
#: (environment, working directory, clock) when imported.
SERVED = ("evalkit.cli", "evalkit.planes.stub")
#: Signals the relay passes on to the child it stands in for.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
             signal.SIGUSR1, signal.SIGUSR2)


def send(sock: socket.socket, message: Mapping[str, Any], fds: Sequence[int] = ()) -> None:
    data = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


def receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and the descriptors it carried; ``(None, [])`` when the peer is gone."""
    data, fds, flags, _ = socket.recv_fds(sock, MAX_MESSAGE, MAX_FDS)
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or (fds and not data):
        for fd in fds:
            os.close(fd)
        raise ValueError("a message did not fit")
    if not data:
        return None, []
    return json.loads(data), fds


def served(argv: Sequence[str], modules: Sequence[str] = SERVED) -> bool:
    """Whether ``argv`` is ``python -m MODULE ...`` of this interpreter for one of ``modules``."""
    return len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m" and argv[2] in modules


def interpreter_shape(env: Mapping[str, str]) -> dict[str, str | None]:
    """What in an environment decides the interpreter a spawn starts, past what a child
    applies itself: two environments of the same shape start the same interpreter.

    ``PYTHON*`` (path, hash seed, flags), ``HOME`` (the user site), ``TZ`` (read at
    import) and the locale text is read and written in, as the first of ``LC_ALL``,
    ``LC_CTYPE`` and ``LANG`` names it. A Python process's environment holds the locale
    it coerced a C locale to, so the relay's (``LC_CTYPE=C.UTF-8``) matches a harness's
    ``LANG=C.UTF-8``; a bare C locale matches only itself.
    """
    shape: dict[str, str | None] = {k: v for k, v in env.items()
                                    if k.startswith("PYTHON") and k not in APPLIED}
    shape["HOME"] = env.get("HOME")
    shape["TZ"] = env.get("TZ")
    shape[" text locale"] = env.get("LC_ALL") or env.get("LC_CTYPE") or env.get("LANG")
    return shape


def relay(address: str, argv: list[str]) -> None:
    """Stand in for ``argv`` forked by the server at ``address``; else become ``argv``."""
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sock.connect(address)
        send(sock, {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(),
                    "fds": [0, 1, 2], "new_session": True}, [0, 1, 2])
        reply, _ = receive(sock)
    except (OSError, ValueError):
        reply = None
    if reply is None or "pid" not in reply:
        os.execv(argv[0], argv)
    pid = int(reply["pid"])
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)

    def forward(number: int, _frame: Any) -> None:
        try:
            send(sock, {"signal": number})
        except OSError:
            pass

    for number in FORWARDED:
        signal.signal(number, forward)
    while True:
        try:
            message, _ = receive(sock)
        except (OSError, ValueError):
            message = None
        if message is None:  # the server died: its child goes with it, as killed
            _signal_group(pid, signal.SIGKILL)
            die_as(-signal.SIGKILL)
        elif "exit" in message:
            die_as(int(message["exit"]))


def _signal_group(pid: int, number: int) -> None:
    try:
        os.killpg(pid, number)
    except OSError:
        pass


def die_as(code: int) -> None:
    """Exit as a child that returned ``code`` did: with its status, or by its signal."""
    if code < 0:
        if -code != signal.SIGKILL:
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code if code >= 0 else 128 - code)

if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: python -S wire.py ADDRESS -- ARGV")
    relay(sys.argv[1], sys.argv[3:])
