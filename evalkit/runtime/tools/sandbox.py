"""How a code tool's argv is confined: no sandbox, or bubblewrap.

A sandbox only rewrites an argv, so the process runner stays one code path
and a new sandbox is one small class. Choosing which one a run gets
(profiles, ``EVALKIT_SANDBOX``, skill manifests) is governance's business;
this module only promises that ``Bwrap`` really confines: the host is
read-only, the mission root is the one writable place, ``/tmp`` is private,
the network is unshared unless asked for, and CPU, memory and process
counts are capped.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Protocol, runtime_checkable

#: Default rlimits for sandboxed code: CPU seconds, address space, processes.
DEFAULT_CPU_SECONDS = 300
DEFAULT_MEMORY_BYTES = 4 * 1024 * 1024 * 1024
DEFAULT_PROCESSES = 1024

# Used when util-linux's prlimit is absent: set the limits, then exec the command.
_RLIMIT_SHIM = (
    "import os, resource, sys\n"
    "for name, value in ((resource.RLIMIT_CPU, int(sys.argv[1])),"
    " (resource.RLIMIT_AS, int(sys.argv[2])), (resource.RLIMIT_NPROC, int(sys.argv[3]))):\n"
    "    hard = resource.getrlimit(name)[1]\n"
    "    value = value if hard == resource.RLIM_INFINITY else min(value, hard)\n"
    "    resource.setrlimit(name, (value, value))\n"
    "os.execvp(sys.argv[4], sys.argv[4:])\n"
)


@runtime_checkable
class Sandbox(Protocol):
    """Rewrites the argv of a tool subprocess so it runs confined."""

    name: str

    def wrap(self, argv: list[str], root: Path, network: bool) -> list[str]:
        """The argv to execute instead of ``argv``, with ``root`` the only writable place."""
        ...


class NoSandbox:
    """No confinement: the argv runs as given (an explicit opt-out, ``--unsandboxed``)."""

    name = "none"

    def wrap(self, argv: list[str], root: Path, network: bool) -> list[str]:
        return list(argv)


class Bwrap:
    """Bubblewrap: host read-only, mission root writable, private /tmp, no network, rlimits."""

    name = "bwrap"

    def __init__(self, executable: str | None = None, *, cpu_seconds: int = DEFAULT_CPU_SECONDS,
                 memory_bytes: int = DEFAULT_MEMORY_BYTES,
                 processes: int = DEFAULT_PROCESSES) -> None:
        found = executable or shutil.which("bwrap")
        if not found:
            raise FileNotFoundError("bubblewrap (bwrap) is not installed")
        self.executable = found
        self.cpu_seconds = cpu_seconds
        self.memory_bytes = memory_bytes
        self.processes = processes
        self._prlimit = shutil.which("prlimit")

    @staticmethod
    def available() -> bool:
        """True when a ``bwrap`` executable is on PATH."""
        return shutil.which("bwrap") is not None

    def wrap(self, argv: list[str], root: Path, network: bool) -> list[str]:
        mission_root = str(Path(root).resolve())
        wrapped = [
            self.executable,
            "--ro-bind", "/", "/",
            # /tmp first: a mission root under /tmp must be bound over the fresh tmpfs.
            "--tmpfs", "/tmp",
            *_interpreter_binds(),
            "--dev", "/dev",
            "--proc", "/proc",
            "--bind", mission_root, mission_root,
            "--chdir", mission_root,
            "--setenv", "TMPDIR", "/tmp",
            "--unshare-all",
        ]
        if network:
            wrapped.append("--share-net")
        wrapped += ["--die-with-parent", "--new-session", "--"]
        return wrapped + self._limits() + list(argv)

    def _limits(self) -> list[str]:
        if self._prlimit:
            return [
                self._prlimit,
                f"--cpu={self.cpu_seconds}",
                f"--as={self.memory_bytes}",
                f"--nproc={self.processes}",
                "--",
            ]
        return [sys.executable, "-c", _RLIMIT_SHIM, str(self.cpu_seconds),
                str(self.memory_bytes), str(self.processes)]


def _interpreter_binds() -> list[str]:
    """Read-only binds for this interpreter when it lives under /tmp (a venv made
    there): the private tmpfs would otherwise hide the program the tools run."""
    import os
    import sys

    binds: list[str] = []
    for path in dict.fromkeys(os.path.realpath(p) for p in (sys.prefix, sys.base_prefix,
                                                            os.path.dirname(sys.executable))):
        if (path == "/tmp" or path.startswith("/tmp/")) and os.path.isdir(path):
            binds += ["--ro-bind", path, path]
    return binds
