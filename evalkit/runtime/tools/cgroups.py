"""A pids cgroup per sandboxed call: the only process cap the kernel holds root to.

RLIMIT_NPROC does not bind uid 0 (the kernel exempts root's user even with
every capability dropped and inside a user namespace), so a fork bomb run as
root is bounded only by the pids controller. Each call gets its own child
cgroup under ``<pids hierarchy>/evalkit``: the cap is per call, like the
rlimit it stands in for, and a call's cgroup is gone when the call is.

The launcher is a few lines of Python run *outside* the sandbox, as the
caller: a forked child joins the fresh cgroup and execs bubblewrap (so every
process the sandbox starts is counted from the first); the parent, a child
subreaper, waits for every descendant and then removes the empty cgroup. A
launcher killed by a timeout leaves an empty folder behind; the next call
sweeps it (``rmdir`` refuses a populated cgroup, so a sweep never disturbs a
call in flight).
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from evalkit.store.leftovers import running

#: The folder, in the pids hierarchy, that holds one cgroup per sandboxed call.
PARENT_NAME = "evalkit"

_CALL_PREFIX = "call-"

# argv: the call cgroup's path less the launcher's pid, pids.max, then the command.
# A sweep spares the folder of a live launcher, but one in another pid namespace
# cannot tell: if the folder is removed while it is joined (gone, or ENODEV from a
# file of a removed cgroup), it is made again. A call that cannot be capped never
# runs uncapped.
_LAUNCHER = r"""
import ctypes, errno, os, sys, time
prefix, limit, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
cgroup = prefix + str(os.getpid())
try:  # PR_SET_CHILD_SUBREAPER: bwrap's orphaned pid 1 comes back here to be reaped
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
except (OSError, AttributeError):
    pass
child = os.fork()
if child == 0:
    problem = "the folder kept vanishing"
    for _ in range(100):
        try:
            try:
                os.mkdir(cgroup)
            except FileExistsError:
                pass
            # Join first: a populated cgroup cannot be removed. Nothing else runs in it
            # until the exec below, so the cap still counts every process of the call.
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
            with open(os.path.join(cgroup, "pids.max"), "w") as f:
                f.write(limit)
            problem = None
            break
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENODEV):
                continue
            problem = exc.strerror or str(exc)
            break
    if problem is not None:
        sys.stderr.write("evalkit: refused: could not cap this call's processes in the pids "
                         "cgroup %s (%s)\n" % (cgroup, problem))
        os._exit(126)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write("evalkit: could not start %s: %s\n" % (argv[0], exc.strerror or exc))
        os._exit(127)
# bwrap reports the exit status before its pid 1 has taken the namespace down: wait for
# every descendant, so the call returns with nothing of it alive, then drop the cgroup.
status = 0
while True:
    try:
        pid, raw = os.wait()
    except ChildProcessError:
        break
    if pid == child:
        status = raw
for _ in range(200):
    try:
        os.rmdir(cgroup)
        break
    except FileNotFoundError:
        break
    except OSError:
        time.sleep(0.005)
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


@dataclass(frozen=True)
class PidsCgroups:
    """The folder under which each sandboxed call gets a pids cgroup of its own."""

    parent: Path

    def launcher(self, limit: int) -> list[str]:
        """The argv prefix that runs what follows it in a fresh cgroup capped at ``limit``."""
        self.sweep()
        return [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(self.parent / _CALL_PREFIX),
                str(limit)]

    def sweep(self) -> None:
        """Remove the call cgroups a killed launcher left empty; populated ones stay, and so
        does a live launcher's (it is empty between making its folder and joining it)."""
        try:
            names = os.listdir(self.parent)
        except OSError:
            return
        for name in names:
            if name.startswith(_CALL_PREFIX) and not _launcher_alive(name):
                try:
                    os.rmdir(self.parent / name)
                except OSError:
                    pass

    def calls(self) -> list[Path]:
        """The call cgroups that exist now (what a test or an operator inspects)."""
        try:
            return sorted(p for p in self.parent.iterdir() if p.name.startswith(_CALL_PREFIX))
        except OSError:
            return []


def _launcher_alive(name: str) -> bool:
    """Whether the launcher a call cgroup is named after (``call-<pid>``) still runs."""
    pid = name[len(_CALL_PREFIX):]
    return pid.isdigit() and running(int(pid))


@functools.cache
def find(uid: int) -> PidsCgroups | None:
    """Where this process, running as ``uid``, can make per-call pids cgroups; None if nowhere.

    Cached per uid: the answer is a property of the host and the caller, and
    costs a few file reads and a probe cgroup to learn.
    """
    mountinfo = _read("/proc/self/mountinfo")
    membership = _read("/proc/self/cgroup")
    for base in candidates(mountinfo, membership):
        parent = _prepare(base)
        if parent is not None:
            return PidsCgroups(parent)
    return None


def candidates(mountinfo: str, membership: str) -> list[Path]:
    """The cgroups, v2 first, under which an ``evalkit`` folder may hold pids cgroups.

    cgroup v2: the hierarchy's root as mounted here, when it offers the pids
    controller (a non-root v2 cgroup that holds processes cannot hand
    controllers down, so our own cgroup rarely qualifies). cgroup v1: our own
    cgroup in the pids hierarchy, which may hold children freely.
    """
    v2: list[Path] = []
    v1: list[Path] = []
    for line in mountinfo.splitlines():
        mount = _mount(line)
        if mount is None:
            continue
        root, point, fstype, options = mount
        if fstype == "cgroup2" and "pids" in _read(str(point / "cgroup.controllers")).split():
            v2.append(point)
        elif fstype == "cgroup" and "pids" in options:
            own = _own_v1_path(membership)
            v1.append(_beneath(point, root, own))
    return v2 + v1


def _mount(line: str) -> tuple[str, Path, str, list[str]] | None:
    """(root within the hierarchy, mount point, fs type, super options) of one mountinfo line."""
    left, sep, right = line.partition(" - ")
    fields, tail = left.split(), right.split()
    if not sep or len(fields) < 5 or len(tail) < 3:
        return None
    return (_unescape(fields[3]), Path(_unescape(fields[4])), tail[0], tail[2].split(","))


def _unescape(text: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code in ("040", "011", "012", "134"):
        text = text.replace("\\" + code, chr(int(code, 8)))
    return text


def _own_v1_path(membership: str) -> str | None:
    """This process's cgroup in the v1 pids hierarchy, from /proc/self/cgroup."""
    for line in membership.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and "pids" in parts[1].split(","):
            return parts[2]
    return None


def _beneath(point: Path, root: str, own: str | None) -> Path:
    """Our cgroup's folder under a mount of its hierarchy, or the mount itself."""
    if own is None or not (own == root or own.startswith(root.rstrip("/") + "/")):
        return point
    relative = own[len(root.rstrip("/")):].strip("/")
    return point / relative if relative else point


def _prepare(base: Path) -> Path | None:
    """``base/evalkit``, made ready to hold capped children; None where that is refused."""
    parent = base / PARENT_NAME
    try:
        if (base / "cgroup.subtree_control").exists():  # v2: hand pids down two levels
            _enable_pids(base)
            parent.mkdir(exist_ok=True)
            _enable_pids(parent)
        else:
            parent.mkdir(exist_ok=True)
        probe = parent / f"probe-{os.getpid()}"
        probe.mkdir(exist_ok=True)
        try:
            # The kernel makes pids.max in a real pids cgroup; a plain folder would not have it.
            if not (probe / "pids.max").is_file():
                return None
            (probe / "pids.max").write_text("max")
        finally:
            probe.rmdir()
    except OSError:
        return None
    return parent


def _enable_pids(cgroup: Path) -> None:
    control = cgroup / "cgroup.subtree_control"
    if "pids" not in control.read_text().split():
        control.write_text("+pids")


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return ""
