"""The fork server: one interpreter with a mission's modules imported, forking a process
per request that then runs ``python -m MODULE`` as a spawned one would.

Importing the ``mcp`` SDK is most of what a mission of the built-in runtime
costs, in the mission and in its stub server alike; a forked child finds it
imported. The child is otherwise what a spawn would have made: its own pid, a
session of its own, the requested descriptors at the requested numbers and no
others, the requested environment and working directory, fresh standard
streams, and the module run as ``__main__`` through ``runpy`` as ``-m`` runs
it, ending as the interpreter ends a program (thread joins, atexit, flushes), less
the teardown of every imported module (``_leave``).

What is shared, and why it is safe: this process imports modules and nothing
else (no threads, no event loop, no signal handlers, no caches filled from the
environment), so a child inherits no lock, no thread and no stale fact; the
modules ``SERVED`` reads no process state when imported. A request is refused —
and spawned the ordinary way — when it would not start the same interpreter
(``wire.interpreter_shape``), or its working directory holds a module named like
one imported here (``-m`` puts that directory first on the path, so a spawn
would import it instead). Where a fork still differs from a spawn: the child's
parent is this server, ``/proc/PID/cmdline`` and ``sys.flags`` are this
server's (the ``wire.APPLIED`` variables are applied after the fork), and the
hash seed is this server's (random either way).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import gc
import importlib
import importlib.machinery
import io
import os
import runpy
import selectors
import signal
import socket
import struct
import sys
import threading
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from evalkit.forkserver import client
from evalkit.forkserver.wire import SERVED, die_as, interpreter_shape, receive, send, served

#: What a mission of the built-in runtime with the stub plane imports, and the stub server:
#: a child imports whatever is missing itself, so this list decides speed, never behaviour.
PRELOAD = (
    "click", "yaml", "re2", "jsonschema", "mcp", "mcp.client.stdio", "mcp.server.stdio",
    "mcp_types", "anyio._backends._asyncio", "anyio._core._subprocesses", "asyncio.subprocess",
    "cryptography.hazmat.primitives.serialization",
    "cryptography.hazmat.primitives.asymmetric.ed25519",
    "evalkit.runtime.command", "evalkit.runtime.mission", "evalkit.runtime.doors",
    "evalkit.runtime.console", "evalkit.runtime.backends.scripted", "evalkit.runtime.repair",
    "evalkit.runtime.supervisor", "evalkit.runtime.native_protocol", "evalkit.runtime.swarm",
    "evalkit.runtime.governance.approvals", "evalkit.runtime.governance.mcpscopes",
    "evalkit.runtime.governance.profiles", "evalkit.runtime.governance.reach",
    "evalkit.runtime.governance.skills", "evalkit.runtime.tools",
    "evalkit.runtime.tools.mcp_client", "evalkit.grounding", "evalkit.signals",
    "evalkit.store.emitter", "evalkit.store.runstore", "evalkit.store.sink",
    "evalkit.store.orphans", "evalkit.store.seal", "evalkit.planes.stub.server",
    "evalkit.gate.certificates", "evalkit.extras", "rfc8785",
)

_PEER = struct.Struct("3i")


@dataclass
class Child:
    """A request this process forked for: what the child becomes."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    fds: list[int]
    targets: list[int]
    new_session: bool
    address: str
    #: The server's own sockets and descriptors: closed before the child is anything else.
    inherited: list[Any] = field(default_factory=list)

    def run(self) -> NoReturn:
        """Become the requested process, run its module and exit as it would (``_leave``)."""
        for thing in self.inherited:
            thing.close() if hasattr(thing, "close") else os.close(thing)
        _place(self.fds, self.targets)
        if self.new_session:
            os.setsid()
        try:
            os.chdir(self.cwd)
        except OSError as exc:  # it was a directory a moment ago, in the server
            os.write(2, f"cannot enter {self.cwd}: {exc.strerror}\n".encode())
            os._exit(127)
        os.environ.clear()
        os.environ.update(self.env)
        sys.dont_write_bytecode = bool(self.env.get("PYTHONDONTWRITEBYTECODE"))
        _fresh_stdio(unbuffered=bool(self.env.get("PYTHONUNBUFFERED")))
        if not sys.flags.safe_path:
            sys.path[0] = os.getcwd()  # what -m puts first: the directory, symlinks resolved
        sys.argv = ["-m", *self.argv[3:]]
        sys.orig_argv = list(self.argv)
        sys.modules["__main__"] = types.ModuleType("__main__")
        client.forked_by = self.address
        try:
            runpy._run_module_as_main(self.argv[2])  # type: ignore[attr-defined]  # what -m runs
        except SystemExit as exc:
            _leave(_status_of(exc))
        except KeyboardInterrupt as exc:
            _uncaught(exc)
            _leave(1, interrupted=True)
        except BaseException as exc:
            _uncaught(exc)
            _leave(1)
        _leave(0)


def _uncaught(exc: BaseException) -> None:
    """Print the traceback a spawn prints: from ``runpy`` down, not from ``Child.run``."""
    tb = exc.__traceback__
    exc.with_traceback(tb.tb_next if tb is not None else None)  # the hook prints the exception's
    sys.excepthook(type(exc), exc, exc.__traceback__)


def _status_of(raised: SystemExit) -> int:
    """The exit status the interpreter gives an uncaught ``SystemExit``: its code when an
    int, 0 for None, else 1 with the code printed to stderr."""
    code = raised.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    with contextlib.suppress(Exception):  # as the interpreter, which says nothing more either
        print(code, file=sys.stderr)
    return 1


def _leave(status: int, *, interrupted: bool = False) -> NoReturn:
    """End the child as the interpreter ends a program, less the teardown of its modules.

    The steps with an effect a program can rely on are taken, in the interpreter's
    order: non-daemon threads are joined, ``atexit`` functions run (``logging``'s
    flush and ``weakref.finalize`` among them), and the standard streams are
    flushed (a flush that fails is status 120). What is skipped is freeing
    every object the server imported, which in a forked child copies each page it
    touches: about 40 ms of a mission's and of its stub server's exit apiece.
    An uncaught ``KeyboardInterrupt`` (``interrupted``) ends by SIGINT, as there.
    """
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None and not stream.closed:
                stream.flush()
        except Exception as exc:  # noqa: BLE001 - a stream that cannot flush is status 120
            status = 120
            if stream is sys.stdout:  # said as the interpreter says it; stderr's goes unsaid
                _say_ignored(stream, exc)
    if interrupted:
        die_as(-signal.SIGINT)
    os._exit(status & 0xFF)


def _say_ignored(stream: Any, exc: Exception) -> None:
    with contextlib.suppress(Exception):
        sys.stderr.write(f"Exception ignored in: {stream!r}\n"
                         + "".join(traceback.format_exception_only(exc)))
        sys.stderr.flush()


def _place(fds: list[int], targets: list[int]) -> None:
    """Put each received descriptor at its target number and close every other one."""
    floor = max([*fds, *targets, 2]) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for fd in fds]
    for source, target in zip(moved, targets, strict=True):
        os.dup2(source, target)  # inheritable, as a spawn's descriptors are
    low = 0
    for keep in sorted(set(targets)):
        if low < keep:  # closerange(n, n) closes every descriptor from n (close_range(n, ~0))
            os.closerange(low, keep)
        low = keep + 1
    os.closerange(low, max(low + 1, os.sysconf("SC_OPEN_MAX")))


def _fresh_stdio(*, unbuffered: bool) -> None:
    """Standard streams over descriptors 0-2, made as the interpreter makes them at start."""
    made = []
    for fd, old, mode, name in ((0, sys.__stdin__, "r", "<stdin>"),
                                (1, sys.__stdout__, "w", "<stdout>"),
                                (2, sys.__stderr__, "w", "<stderr>")):
        raw = io.FileIO(fd, mode + "b", closefd=False)
        raw.name = name  # type: ignore[misc]
        direct = unbuffered and mode == "w"
        buffered: Any = raw if direct else (io.BufferedReader(raw) if mode == "r"
                                             else io.BufferedWriter(raw))
        stream = io.TextIOWrapper(buffered, encoding=getattr(old, "encoding", None),
                                  errors=getattr(old, "errors", None), newline="\n",
                                  line_buffering=not unbuffered and (raw.isatty() or fd == 2),
                                  write_through=unbuffered)
        stream.mode = mode  # type: ignore[misc]
        made.append(stream)
    sys.stdin, sys.stdout, sys.stderr = made
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = made  # type: ignore[misc]


@dataclass
class _Running:
    pid: int
    pidfd: int
    conn: socket.socket | None
    new_session: bool


class Zygote:
    """Accepts requests on ``address`` until its stdin ends; reaps and reports each child."""

    def __init__(self, address: str, modules: tuple[str, ...] = SERVED) -> None:
        self.address = address
        self.modules = modules
        self.shape = interpreter_shape(os.environ)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(address)
        self.listener.listen(64)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, self._accept)
        self.selector.register(sys.stdin.fileno(), selectors.EVENT_READ, self._stdin)
        self.running: dict[int, _Running] = {}  # by pidfd
        self.closing = False
        self.imported: frozenset[str] = frozenset()

    def preload(self) -> None:
        """Import what the served modules of ``SERVED`` use (others are a test's probes)."""
        for name in PRELOAD if set(self.modules) & set(SERVED) else ():
            try:
                importlib.import_module(name)
            except ImportError:
                pass  # a child that needs it fails the ordinary way
        self.imported = frozenset(name.partition(".")[0] for name in sys.modules)

    def serve(self) -> Child | None:
        """Serve until told to stop (None), or return in a child what it is to become."""
        while not self.closing or self.running:
            for key, _ in self.selector.select():
                if self.selector.get_map().get(key.fd) is not key:
                    continue  # let go of by a handler earlier in this round
                handler: Callable[[Any], Child | None] = key.data
                child = handler(key.fileobj)
                if child is not None:
                    child.inherited += [self.selector, self.listener,
                                        *(r.conn for r in self.running.values() if r.conn),
                                        *(r.pidfd for r in self.running.values())]
                    return child
        self.selector.close()
        self.listener.close()
        return None

    def _stdin(self, fd: Any) -> None:
        if os.read(fd, 4096):
            return None
        self.closing = True  # the harness is done, or gone: nothing it started may outlive it
        self.selector.unregister(fd)
        self.selector.unregister(self.listener)
        for running in self.running.values():
            _kill(running)
        return None

    def _accept(self, listener: Any) -> Child | None:
        conn, _ = listener.accept()
        request, fds = self._request(conn)
        if request is None:
            conn.close()
            return None
        try:
            pid = os.fork()
        except OSError:
            pid = None
        if pid == 0:  # the child: no cleanup of the server's may run here
            return Child(argv=request["argv"], env=request["env"], cwd=request["cwd"],
                         fds=fds, targets=request["fds"],
                         new_session=bool(request.get("new_session")),
                         address=self.address, inherited=[conn])
        for fd in fds:
            os.close(fd)
        try:
            pidfd = os.pidfd_open(pid) if pid is not None else None
        except OSError:  # a child nobody could watch is no child: it never ran its module
            os.kill(pid, signal.SIGKILL)  # type: ignore[arg-type]
            os.waitpid(pid, 0)  # type: ignore[arg-type]
            pidfd = None
        if pidfd is None:
            _answer(conn, {"refused": "fork failed"})
            conn.close()
            return None
        running = _Running(pid, pidfd, conn, bool(request.get("new_session")))  # type: ignore[arg-type]
        self.running[running.pidfd] = running
        self.selector.register(running.pidfd, selectors.EVENT_READ, self._reap)
        self.selector.register(conn, selectors.EVENT_READ, self._requester)
        _answer(conn, {"pid": pid})
        return None

    def _request(self, conn: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
        """A request to fork, with its descriptors; (None, []) when refused (and told why)."""
        try:
            conn.settimeout(10)
            _, uid, _ = _PEER.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                     _PEER.size))
            if uid != os.getuid():
                return None, []
            request, fds = receive(conn)
            conn.settimeout(None)
        except (OSError, ValueError):
            return None, []
        if request is None:
            return None, []
        try:
            why = self._refusal(request, fds)
        except (TypeError, ValueError) as exc:
            why = f"a malformed request ({exc})"
        if why is None:
            return request, fds
        for fd in fds:
            os.close(fd)
        _answer(conn, {"refused": why})
        return None, []

    def _refusal(self, request: dict[str, Any], fds: list[int]) -> str | None:
        """Why this request would not make the process a spawn would; None to fork it."""
        argv, env, cwd = request.get("argv"), request.get("env"), request.get("cwd")
        targets = request.get("fds")
        if not isinstance(argv, list) or not served(argv, self.modules):
            return "not python -m of a module this server runs"
        if not isinstance(env, dict) or interpreter_shape(env) != self.shape:
            return "its environment starts a different interpreter"
        if not isinstance(targets, list) or len(targets) != len(fds) \
                or len(set(targets)) != len(targets) or min(targets, default=0) < 0:
            return "its descriptors do not match their numbers"
        if not isinstance(cwd, str) or not os.path.isdir(cwd):
            return "its working directory is not a directory"
        if threading.active_count() != 1:
            return "this server runs a thread, which a child could not inherit safely"
        shadowing = sorted(self.imported & _modules_in(cwd))
        if shadowing:
            return f"its working directory holds {', '.join(shadowing)}, imported here already"
        return None

    def _reap(self, pidfd: Any) -> None:
        running = self.running.pop(pidfd)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(running.pid, 0)
        if running.conn is not None:
            self.selector.unregister(running.conn)
            try:
                send(running.conn, {"exit": os.waitstatus_to_exitcode(status)})
            except OSError:
                pass
            running.conn.close()
        return None

    def _requester(self, conn: Any) -> None:
        running = next(r for r in self.running.values() if r.conn is conn)  # registered: one
        try:
            message, fds = receive(conn)
            for fd in fds:
                os.close(fd)
        except (OSError, ValueError):
            message = None
        if message is None:  # the requester is gone: so is what it started
            self.selector.unregister(conn)
            conn.close()
            running.conn = None
            _kill(running)
        elif isinstance(message.get("signal"), int):
            os.kill(running.pid, message["signal"])  # not reaped yet: still this child's pid
        return None


def _answer(conn: socket.socket, message: dict[str, Any]) -> None:
    try:
        send(conn, message)
    except OSError:
        pass  # the requester left; its child, if any, is killed when that is noticed


def _kill(running: _Running) -> None:
    if running.new_session:
        try:
            os.killpg(running.pid, signal.SIGKILL)
            return
        except OSError:
            pass
    os.kill(running.pid, signal.SIGKILL)


def _modules_in(folder: str) -> set[str]:
    """The top-level modules a folder first on ``sys.path`` would provide."""
    suffixes = sorted(importlib.machinery.all_suffixes(), key=len, reverse=True)
    names = set()
    try:
        entries = os.listdir(folder)
    except OSError:
        return set()
    for entry in entries:
        path = os.path.join(folder, entry)
        if os.path.isdir(path):
            if any(os.path.exists(os.path.join(path, "__init__" + s)) for s in suffixes):
                names.add(entry)
            continue
        names.update(entry[: -len(s)] for s in suffixes if entry.endswith(s))
    return names


def main(argv: list[str]) -> None:
    """``python -m evalkit.forkserver ADDRESS [MODULE...]``: bind, import, say ``ready``, serve
    ``python -m`` of the modules named (default ``wire.SERVED``).

    Returns when the harness closes stdin; in a forked child, runs the child's module
    and leaves as it does.
    """
    if len(argv) < 2:
        sys.exit("usage: python -m evalkit.forkserver ADDRESS [MODULE...]")
    try:
        os.close(os.pidfd_open(os.getpid()))  # children are watched through pidfds
        zygote = Zygote(argv[1], tuple(argv[2:]) or SERVED)
    except (AttributeError, OSError) as exc:  # not Linux 5.3+, or no seqpacket Unix sockets
        sys.exit(f"evalkit fork server: cannot serve here ({exc}); missions are spawned")
    zygote.preload()
    gc.freeze()  # this process's objects are every child's: never collected, never copied
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    child = zygote.serve()
    if child is not None:
        child.run()
