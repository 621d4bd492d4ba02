"""How a code tool's argv is confined: no sandbox, or bubblewrap.

A sandbox only rewrites an argv, so the process runner stays one code path
and a new sandbox is one small class. Choosing which one a run gets
(profiles, ``EVALKIT_SANDBOX``, skill manifests) is governance's business;
this module only promises that ``Bwrap`` really confines, as root and as an
ordinary user: no capabilities and no nested user namespace, its own PID
namespace (every process a call started dies with it), the host read-only
(``/proc`` included), the mission root the one writable place, ``/tmp``
private, hidden folders empty, the network unshared unless asked for, and
CPU, memory and process counts capped. The process cap is RLIMIT_NPROC for an
ordinary user and a pids cgroup per call wherever one can be made; as root,
where none can, the code tools refuse (see ``ROOT_NEEDS_PIDS_CGROUP``).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from evalkit.runtime.tools.cgroups import find as find_pids_cgroups

#: Default caps for sandboxed code: CPU seconds, address space, processes (bwrap's own two
#: processes count towards the last).
DEFAULT_CPU_SECONDS = 300
DEFAULT_MEMORY_BYTES = 4 * 1024 * 1024 * 1024
DEFAULT_PROCESSES = 1024

#: What a code tool answers, run as root where no pids cgroup can be made.
ROOT_NEEDS_PIDS_CGROUP = (
    "refused: as root the sandbox can cap processes only with a pids cgroup, and none can be "
    "made here; mount the pids controller writable (cgroup v2 with pids in the root's "
    "cgroup.controllers, or cgroup v1's pids hierarchy) or run evalkit as an ordinary user")

_PROBE_SECONDS = 10

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
    """Bubblewrap: no capabilities, own namespaces, host read-only, mission root writable.

    ``hide`` names folders the sandboxed code must not see: each one that
    exists when a call starts is covered by an empty read-only tmpfs, mounted
    after the mission root so it wins even inside the root (a hidden folder
    that holds the mission root hides everything in it but the root).
    """

    name = "bwrap"

    def __init__(self, executable: str | None = None, *, cpu_seconds: int = DEFAULT_CPU_SECONDS,
                 memory_bytes: int = DEFAULT_MEMORY_BYTES,
                 processes: int = DEFAULT_PROCESSES,
                 hide: Sequence[str | Path] = ()) -> None:
        found = executable or shutil.which("bwrap")
        if not found:
            raise FileNotFoundError("bubblewrap (bwrap) is not installed")
        self.executable = found
        self.cpu_seconds = cpu_seconds
        self.memory_bytes = memory_bytes
        self.processes = processes
        self.hide = tuple(Path(folder) for folder in hide)
        self._prlimit = shutil.which("prlimit")

    @staticmethod
    def available() -> bool:
        """True when bwrap is installed and can build its sandbox here (probed once)."""
        return Bwrap.unavailable() is None

    @staticmethod
    def unavailable() -> str | None:
        """Why bwrap cannot confine code on this host, in one sentence; None when it can."""
        found = shutil.which("bwrap")
        if not found:
            return "bubblewrap (bwrap) is not installed"
        return _probe(found, os.getuid())

    def wrap(self, argv: list[str], root: Path, network: bool) -> list[str]:
        mission_root = str(Path(root).resolve())
        options = _confinement(self.executable, mission_root, network, self.hide)
        confined = [self.executable, *options, "--", *self._limits(), *argv]
        cgroups = find_pids_cgroups(os.getuid())
        if cgroups is not None:
            return cgroups.launcher(self.processes) + confined
        if _runs_as_root():
            return _refusal(ROOT_NEEDS_PIDS_CGROUP)
        return confined  # RLIMIT_NPROC binds every uid but 0

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


def _confinement(executable: str, root: str, network: bool, hide: Sequence[Path]) -> list[str]:
    """bwrap's options, in the order they must apply, for code confined to ``root``.

    As root the user namespace maps uid 0 to uid 0, so what stops the code is
    the dropped capabilities plus read-only mounts: ``/proc`` is remounted
    read-only too (its ``sys`` would otherwise take host-wide sysctl writes
    from uid 0), and no nested user namespace may hand capabilities back.
    """
    around, elsewhere = _hidden(hide, root)
    options = [
        "--ro-bind", "/", "/",
        # /tmp first: a mission root under /tmp must be bound over the fresh tmpfs.
        "--tmpfs", "/tmp",
        *_interpreter_binds(),
        "--dev", "/dev",
        "--proc", "/proc",
        "--remount-ro", "/proc",
    ]
    for folder in around:  # the root's mount point is made before the cover turns read-only
        options += ["--tmpfs", folder, "--dir", root, "--remount-ro", folder]
    options += ["--bind", root, root]
    for folder in elsewhere:
        options += ["--tmpfs", folder, "--remount-ro", folder]
    options += [
        "--chdir", root,
        "--setenv", "TMPDIR", "/tmp",
        "--unshare-all", "--unshare-user", *_no_nested_user_namespace(executable),
        "--cap-drop", "ALL",
    ]
    if network:
        options.append("--share-net")
    return options + ["--die-with-parent", "--new-session"]


def _hidden(hide: Sequence[Path], root: str) -> tuple[list[str], list[str]]:
    """The folders to cover: (those holding the root, the rest), each existing one once.

    A folder inside another hidden folder is already hidden (and its mount
    point could not be made in a read-only cover), unless the mission root
    lies between them and brings it back into view.
    """
    folders = sorted({os.path.realpath(f) for f in hide if os.path.isdir(f)}, key=len)
    kept: list[str] = []
    for folder in folders:
        if any(_within(folder, outer) and not (_within(root, outer) and _within(folder, root))
               for outer in kept):
            continue
        kept.append(folder)
    around = [f for f in kept if _within(root, f) and f != root]
    return around, [f for f in kept if f not in around]


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


@functools.cache
def _no_nested_user_namespace(executable: str) -> tuple[str, ...]:
    """``--disable-userns`` where this bwrap knows it (0.8.0 on).

    A second wall, not the only one: without it a nested user namespace
    regains capabilities only over mounts it cannot unlock (they stay
    read-only), so an older bwrap still confines and is not refused for it.
    """
    try:
        said = subprocess.run([executable, "--help"], capture_output=True,
                              timeout=_PROBE_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return ("--disable-userns",) if b"--disable-userns" in said.stdout + said.stderr else ()


def _runs_as_root() -> bool:
    """The kernel exempts uid 0 from RLIMIT_NPROC by the real uid; either one counts here."""
    return 0 in (os.getuid(), os.geteuid())


def _refusal(sentence: str) -> list[str]:
    """An argv that only says why the call is refused: the tool's result is that sentence."""
    return [sys.executable, "-I", "-S", "-c", "import sys; sys.exit(sys.argv[1])", sentence]


@functools.cache
def _probe(executable: str, uid: int) -> str | None:
    """Run ``true`` under the very options ``wrap`` uses; why it failed, or None.

    On PATH is not enough: without user namespaces for this user, or on a
    kernel that refuses one of the options, every call would fail instead.
    """
    del uid  # part of the cache key only: the answer differs between users
    with tempfile.TemporaryDirectory(prefix="evalkit-bwrap-probe-") as root:
        argv = [executable, *_confinement(executable, root, False, ()), "--", "true"]
        try:
            done = subprocess.run(argv, cwd=root, stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=_PROBE_SECONDS, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bubblewrap ({executable}) could not be run here: {exc}"
    if done.returncode == 0:
        return None
    said = [line.strip() for line in done.stderr.decode(errors="replace").splitlines()
            if line.strip()]
    why = said[-1] if said else f"exit code {done.returncode}"
    return (f"bubblewrap ({executable}) cannot build its sandbox on this host ({why}); "
            "it needs user namespaces for this user")


def _interpreter_binds() -> list[str]:
    """Read-only binds for this interpreter when it lives under /tmp (a venv made
    there): the private tmpfs would otherwise hide the program the tools run."""
    binds: list[str] = []
    for path in dict.fromkeys(os.path.realpath(p) for p in (sys.prefix, sys.base_prefix,
                                                            os.path.dirname(sys.executable))):
        if (path == "/tmp" or path.startswith("/tmp/")) and os.path.isdir(path):
            binds += ["--ro-bind", path, path]
    return binds
