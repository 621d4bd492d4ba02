"""``run_python_code`` and ``run_shell_command``: subprocesses in the mission root.

Both go through one runner: the argv is handed to the sandbox to wrap, the
process starts in its own session in the mission root with credential-named
environment variables removed, stdout and stderr are read concurrently into
bounded buffers (a chatty program cannot exhaust memory, and the bytes past
the bound are counted, not kept), and a wall-time limit kills the whole
process group. Every outcome — a non-zero exit, a timeout, a program that
could not start — is an ordinary result the model reads.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

from evalkit.redact import is_credential_name
from evalkit.runtime.inflight import undo_on_abandon
from evalkit.runtime.tools.descriptor import ToolResult
from evalkit.runtime.tools.sandbox import NoSandbox, Sandbox

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024

_CHUNK = 65536


def tool_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment minus credential-named variables: agent code never sees keys."""
    source = dict(os.environ if environ is None else environ)
    env = {k: v for k, v in source.items() if not is_credential_name(k)}
    env["PYTHONIOENCODING"] = "utf-8"
    return env


class _Capture:
    """Reads one pipe to its end, keeping at most ``limit`` bytes and counting the rest."""

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        self.kept = bytearray()
        self.total = 0
        self._stream = stream
        self._limit = limit
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        fd = self._stream.fileno()
        try:
            while chunk := os.read(fd, _CHUNK):
                self.total += len(chunk)
                room = self._limit - len(self.kept)
                if room > 0:
                    self.kept += chunk[:room]
        except OSError:
            pass
        finally:
            self._stream.close()

    def text(self, name: str) -> str:
        self.thread.join(timeout=5)
        text = bytes(self.kept).decode("utf-8", errors="replace")
        if self.total > len(self.kept):
            text += _note(text, f"{name} cut at {len(self.kept)} bytes of {self.total}")
        return text


def _note(text: str, what: str) -> str:
    return ("" if not text or text.endswith("\n") else "\n") + f"[evalkit: {what}]\n"


def _feed(stream: IO[bytes], data: bytes) -> None:
    try:
        stream.write(data)
    except OSError:
        pass  # the program exited or closed stdin without reading it all
    finally:
        try:
            stream.close()
        except OSError:
            pass


def run_process(argv: list[str], *, cwd: Path, stdin: bytes | None = None,
                timeout_s: float = DEFAULT_TIMEOUT_S,
                max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
                env: dict[str, str] | None = None) -> ToolResult:
    """Run ``argv`` to completion or to the wall-time limit; never raises for the program's sake."""
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=tool_environment() if env is None else env,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            # Nothing but the three pipes: an inheritable descriptor the harness holds
            # (a run store, an audit log) must never reach the code it judges.
            close_fds=True,
            pass_fds=(),
        )
    except OSError as exc:
        return ToolResult.failure(f"could not start {argv[0]}: {exc.strerror or exc}", None)
    assert proc.stdout is not None and proc.stderr is not None
    out = _Capture(proc.stdout, max_output_bytes)
    err = _Capture(proc.stderr, max_output_bytes)
    if stdin is not None and proc.stdin is not None:
        threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True).start()
    timed_out = False
    try:
        with undo_on_abandon(lambda: _abandon(proc)):
            proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        # Also after a normal exit: whatever the program left running in its
        # group goes with it (bwrap does the same to its pid namespace).
        _kill_group(proc)
    stdout = out.text("stdout")
    stderr = err.text("stderr")
    if timed_out:
        stderr += _note(stderr, f"timed out after {timeout_s:g} s; killed")
        return ToolResult.of(None, stdout, stderr)
    return ToolResult.of(proc.returncode, stdout, stderr)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _abandon(proc: subprocess.Popen[bytes]) -> None:
    """The mission's seconds ran out: kill the group now (the waiting thread then reaps it)."""
    if proc.returncode is None:  # once reaped, its pid may be someone else's
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class CodeRunner:
    """The two code tools over one sandbox, root and set of limits."""

    def __init__(self, root: Path, sandbox: Sandbox | None = None, *,
                 timeout_s: float = DEFAULT_TIMEOUT_S,
                 max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
                 network: bool = False) -> None:
        self.root = Path(root)
        self.sandbox = sandbox or NoSandbox()
        self.timeout_s = timeout_s
        self.max_output_bytes = max_output_bytes
        self.network = network

    def _run(self, argv: list[str], stdin: bytes | None = None) -> ToolResult:
        wrapped = self.sandbox.wrap(argv, self.root, self.network)
        return run_process(wrapped, cwd=self.root, stdin=stdin, timeout_s=self.timeout_s,
                           max_output_bytes=self.max_output_bytes)

    def python(self, arguments: dict[str, Any]) -> ToolResult:
        """``run_python_code``: the code is fed on stdin to this interpreter (no argv size limit)."""
        return self._run([sys.executable, "-"], stdin=arguments["code"].encode("utf-8"))

    def shell(self, arguments: dict[str, Any]) -> ToolResult:
        """``run_shell_command``: one command line through bash (sh where bash is absent)."""
        shell = shutil.which("bash") or "/bin/sh"
        return self._run([shell, "-c", arguments["command"]])
