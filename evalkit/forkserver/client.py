"""The asking side of the fork server: the harness's spawns, and an MCP client's.

``serving()`` makes ``popen`` fork the built-in runtime's missions from a fork
server started on first use and stopped on the way out; anything it cannot
fork (another agent, a refused request, a server that failed) is spawned with
``subprocess.Popen`` as before. A forked mission is its own session, so the
harness signals its process group exactly as it would a spawned one's; only
its exit status comes back over the server's socket (``Forked``).

In a process the server forked, ``relayed`` turns an MCP server's argv into
the relay's (``wire.relay``) when that server can be forked too: the relay is
what the MCP client spawns and speaks stdio to, and it hands that stdio to the
forked server.

The server listens in a private folder under ``/tmp``, which the bubblewrap
sandbox replaces with its own: sandboxed code cannot reach it.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from evalkit.forkserver.wire import SERVED, receive, send, served

#: The fork server this process's MCP servers may be forked from: set in a process that
#: server forked (a test session sets it for its unit tests' stub planes).
forked_by: str | None = None
#: A running fork server's socket (``ForkServer.address``): a process that server did not
#: fork uses it all the same, for its stub MCP servers (``relayed``) and for ``run``'s
#: missions (``serving``), instead of paying for imports of its own. A test session sets
#: it for the commands it spawns. Only a server's owner can reach its socket (a private
#: folder, hidden from sandboxed code); a socket that does not answer means a spawn. What
#: it forks runs where that server runs (namespaces, limits, user), not where the asker does.
SOCKET_ENV = "EVALKIT_FORKSERVER_SOCKET"
#: ``off`` (or 0, no, false) here: spawn everything.
OFF_ENV = "EVALKIT_FORKSERVER"
#: How long the server may take to import what it preloads before missions are spawned.
START_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 10.0
_WIRE = str(Path(__file__).with_name("wire.py"))
_OFF = ("0", "off", "no", "false")

_active: ForkServer | None = None


def relayed(argv: Sequence[str]) -> list[str]:
    """``argv``, or the relay that has ``forked_by`` (else the server ``SOCKET_ENV`` names)
    fork it, when it serves ``argv``."""
    via = forked_by or _named()
    if via is None or not served(argv):
        return list(argv)
    return [sys.executable, "-S", _WIRE, via, "--", *argv]


def _named() -> str | None:
    """The running server ``SOCKET_ENV`` names, unless forking is switched off."""
    return None if switched_off() else os.environ.get(SOCKET_ENV) or None


def switched_off() -> bool:
    """``EVALKIT_FORKSERVER=off``: spawn everything (to compare, or to rule the server out)."""
    return os.environ.get(OFF_ENV, "").lower() in _OFF


@contextlib.contextmanager
def serving() -> Iterator[None]:
    """Fork the built-in runtime's missions while this lasts (``popen``), from the server
    ``SOCKET_ENV`` names, else from one of this process's own."""
    global _active
    if _active is not None or switched_off():
        yield
        return
    named = _named()
    server = _active = ForkServer(address=named) if named else ForkServer()
    try:
        yield
    finally:
        _active = None
        server.close()


@contextlib.contextmanager
def named_to_children() -> Iterator[dict[str, str]]:
    """The environment that has processes this one spawns fork their missions from one
    server while this lasts: the server ``SOCKET_ENV`` names, else one of this process's
    own; or that forking is switched off. So several ``evalkit run`` commands share one
    server instead of each starting and importing its own."""
    if switched_off():
        yield {OFF_ENV: os.environ[OFF_ENV]}
        return
    named = _named()
    if named:
        yield {SOCKET_ENV: named}
        return
    server = ForkServer()
    try:
        yield {SOCKET_ENV: server.address} if server.start() and server.address else {}
    finally:
        server.close()


def popen(argv: Sequence[str], **options: Any) -> Forked | subprocess.Popen[bytes]:
    """A forked process when a fork server is serving and can fork ``argv``, else a spawn."""
    server = _active
    forked = server.fork(argv, **options) if server is not None else None
    return forked if forked is not None else subprocess.Popen(argv, **options)


class Forked:
    """A forked child, as much of ``subprocess.Popen`` as the harness uses."""

    def __init__(self, conn: socket.socket, pid: int, args: Sequence[str],
                 new_session: bool, stderr: int | None = None) -> None:
        self.args = list(args)
        self.pid = pid
        self.returncode: int | None = None
        self._conn = conn
        self._new_session = new_session
        #: A copy of the child's stderr, to say so there if the server dies under it.
        self._stderr = stderr

    def poll(self) -> int | None:
        try:
            return self.wait(0)
        except subprocess.TimeoutExpired:
            return None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        self._conn.settimeout(timeout)
        try:
            message, _ = receive(self._conn)
        except (TimeoutError, BlockingIOError):
            raise subprocess.TimeoutExpired(self.args, timeout) from None
        except (OSError, ValueError):
            message = None
        if message is None or not isinstance(message.get("exit"), int):
            # The server died: the child is as good as lost; it goes as if killed.
            _kill(self.pid, self._new_session)
            self.returncode = -signal.SIGKILL
            if self._stderr is not None:
                _say(self._stderr, "evalkit: the fork server died; this process was killed "
                                   "with it\n")
        else:
            self.returncode = message["exit"]
        self._conn.close()
        if self._stderr is not None:
            os.close(self._stderr)
            self._stderr = None
        return self.returncode


class ForkServer:
    """One fork server process, started on the first request it can serve (``python -m``
    of one of ``modules``): run by ``wrap`` when given (a command that runs the rest of
    its line, such as ``unshare -rn``: what the server forks is where it is), with
    ``env`` when given (else this process's environment). Given an ``address``, it is
    the running server listening there instead: asked, never started or stopped here."""

    def __init__(self, modules: tuple[str, ...] = SERVED, *, wrap: Sequence[str] = (),
                 env: Mapping[str, str] | None = None, address: str | None = None) -> None:
        self.modules = modules
        self.wrap, self.env = tuple(wrap), env
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._folder: str | None = None
        self.address: str | None = address
        self._owned = address is None
        #: Why it does not serve (it failed to start, or died); None while it may.
        self.broken: str | None = None
        #: Why the last request was spawned instead (for tests and diagnosis).
        self.last_refusal: str | None = None

    def fork(self, argv: Sequence[str], *, stdin: Any = None, stdout: Any = None,
             stderr: Any = None, cwd: str | os.PathLike[str] | None = None,
             env: Mapping[str, str] | None = None, pass_fds: Sequence[int] = (),
             start_new_session: bool = False, **other: Any) -> Forked | None:
        """Fork ``argv`` with these ``Popen`` options, or None when it should be spawned."""
        if other or not served(argv, self.modules) or not self.start():
            return None
        if not all(s is None or s == subprocess.DEVNULL or (isinstance(s, int) and s >= 0)
                   for s in (stdin, stdout, stderr)):
            return None  # pipes to this process: Popen's business
        nulls: list[int] = []

        def fd_of(stream: Any, number: int) -> int:
            if stream is None:
                return number
            if stream == subprocess.DEVNULL:
                nulls.append(os.open(os.devnull, os.O_RDONLY if number == 0 else os.O_WRONLY))
                return nulls[-1]
            return int(stream)

        try:
            fds = [fd_of(stream, n) for n, stream in enumerate((stdin, stdout, stderr))]
            return self._ask(argv, fds + list(pass_fds), [0, 1, 2, *pass_fds],
                             os.path.abspath(cwd if cwd is not None else os.getcwd()),
                             dict(os.environ if env is None else env), start_new_session)
        finally:
            for fd in nulls:
                os.close(fd)

    def _ask(self, argv: Sequence[str], fds: list[int], targets: list[int], cwd: str,
             env: dict[str, str], new_session: bool) -> Forked | None:
        request = {"argv": list(argv), "env": env, "cwd": cwd, "fds": targets,
                   "new_session": new_session}
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            conn.connect(self.address)  # type: ignore[arg-type]
            send(conn, request, fds)
            reply, _ = receive(conn)
        except (OSError, ValueError) as exc:
            conn.close()
            self.broken = f"the fork server stopped answering ({exc})"
            return None
        if reply is None or not isinstance(reply.get("pid"), int):
            conn.close()
            self.last_refusal = (reply or {}).get("refused") or "no answer"
            return None
        return Forked(conn, reply["pid"], argv, new_session, os.dup(fds[2]))

    def start(self) -> bool:
        """Start the server (one this object owns) if it is not running yet: True while it
        serves, False once it failed to start or was closed (``broken`` says why)."""
        with self._lock:
            if self._owned and self._proc is None and self.broken is None:
                self._start()
            return self.broken is None

    def _start(self) -> None:
        self._folder = tempfile.mkdtemp(prefix="evalkit-fork-", dir="/tmp")
        self.address = os.path.join(self._folder, "socket")
        try:
            self._proc = subprocess.Popen(
                [*self.wrap, sys.executable, "-m", "evalkit.forkserver", self.address,
                 *(self.modules if self.modules != SERVED else ())],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=self._folder,
                env=None if self.env is None else dict(self.env), start_new_session=True)
        except OSError as exc:
            self.broken = f"the fork server did not start: {exc}"
            return
        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], START_TIMEOUT_S)
        if not ready or self._proc.stdout.readline() != b"ready\n":
            self.broken = "the fork server did not get ready"
            self._stop()

    def close(self) -> None:
        with self._lock:
            self.broken = self.broken or "closed"
            self._stop()

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.close()  # the server's signal to stop
            try:
                proc.wait(_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stdout.close()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


def _say(fd: int, line: str) -> None:
    try:
        os.write(fd, line.encode())
    except OSError:
        pass


def _kill(pid: int, group: bool) -> None:
    try:
        os.killpg(pid, signal.SIGKILL) if group else os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
