"""``subprocess.run`` for an ``evalkit`` command a test starts and waits for: forked from the
session's fork server (``tests/conftest.py``) where it serves the command, as ``evalkit run``
forks its missions.

A forked command is the same program started the same way (its argv, environment, working
folder and file descriptors, in a session of its own), with the server's imports done
already: a mission costs about a tenth of the CPU a spawned one does, and the session starts
some hundred of them. Whatever the server cannot start the same way is spawned, as the
server itself refuses what it would start differently (another interpreter's shape): a
test marked ``spawns``, a ``preexec_fn``, output read while the command runs.
``through`` is the forking itself, for a test with a fork server of its own.
"""

from __future__ import annotations

import contextlib
import locale
import os
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from typing import IO, Any

from evalkit.forkserver.client import SOCKET_ENV, ForkServer, switched_off


def run(argv: Sequence[str], *, capture_output: bool = False, text: bool = False,
        input: str | bytes | None = None, timeout: float | None = None,
        pass_fds: Sequence[int] = (), check: bool = False,
        **options: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(argv, ...)``, the command forked where the session's server can."""
    address = os.environ.get(SOCKET_ENV)
    if set(options) <= {"cwd", "env"} and capture_output and address and not switched_off():
        done = through(ForkServer(address=address), argv, input=input, timeout=timeout,
                       pass_fds=pass_fds, **options)
        if done is not None:
            if text:
                done.stdout, done.stderr = _text(done.stdout), _text(done.stderr)
            if check:
                done.check_returncode()
            return done
    return subprocess.run(argv, capture_output=capture_output, text=text, input=input,
                          timeout=timeout, pass_fds=pass_fds, check=check, **options)


def through(server: ForkServer, argv: Sequence[str], *, input: str | bytes | None = None,
            timeout: float | None = None, pass_fds: Sequence[int] = (),
            **options: Any) -> subprocess.CompletedProcess[bytes] | None:
    """``argv`` forked by ``server``, its output captured as bytes; None when the server
    would not fork it. Past ``timeout`` its process group is killed, as ``subprocess.run``
    kills a child, and ``TimeoutExpired`` raised."""
    with _file(input) as given, _file() as out, _file() as err:
        forked = server.fork(argv, stdin=None if given is None else given.fileno(),
                             stdout=out.fileno(), stderr=err.fileno(), pass_fds=pass_fds,
                             start_new_session=True, **options)
        if forked is None:
            return None
        try:
            code = forked.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(forked.pid, signal.SIGKILL)
            forked.wait()
            raise
        return subprocess.CompletedProcess(list(argv), code, _read(out), _read(err))


@contextlib.contextmanager
def _file(holding: str | bytes | None = b"") -> Any:
    """A temporary file holding ``holding`` from its start; None for None."""
    if holding is None:
        yield None
        return
    with tempfile.TemporaryFile() as file:
        file.write(holding.encode() if isinstance(holding, str) else holding)
        file.seek(0)
        yield file


def _read(file: IO[bytes]) -> bytes:
    file.seek(0)
    return file.read()


def _text(data: bytes) -> str:
    """Output as ``subprocess.run(text=True)`` hands it back: the locale's encoding,
    universal newlines."""
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")
