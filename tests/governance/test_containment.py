"""The bubblewrap sandbox tried the way a graded agent would try it, as root and as a user.

Every attempt goes through the real ``CodeRunner`` and ``run_process`` with the
real ``Bwrap``. The user case, when the tests run as root, forks this process
and drops to an unprivileged account (made here if it is missing) before
calling the runner: the interpreter may live where that account cannot
execute it (``/root/.pyenv``), so a fresh ``runuser python`` could not start.
Each attempt is refused or bounded, and the host file it aims at never appears.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import select
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from evalkit.forkserver.client import ForkServer
from evalkit.runtime.tools import sandbox as sandbox_module
from evalkit.runtime.tools.cgroups import candidates, find
from evalkit.runtime.tools.codetools import CodeRunner
from evalkit.runtime.tools.sandbox import ROOT_NEEDS_PIDS_CGROUP, Bwrap, NoSandbox

pytestmark = pytest.mark.slow

needs_bwrap = pytest.mark.skipif(not Bwrap.available(), reason=Bwrap.unavailable() or "")

USER = "evalkit-escape"
CAP = 32            # a small process cap: the fork bomb stays kind to a shared host
DRIVER_SECONDS = 90


# -- who runs the attempts ------------------------------------------------------------------


@dataclass(frozen=True)
class Who:
    """The account the attempts run as; ``fork`` when this process must drop to it."""

    name: str
    uid: int
    gid: int
    fork: bool

    def run(self, attempts: Callable[[], Any]) -> Any:
        """``attempts()`` as this account; the test is skipped where the host cannot."""
        result = _as_account(self, attempts) if self.fork else {"value": attempts()}
        if "skip" in result:
            pytest.skip(result["skip"])
        if "error" in result:
            raise AssertionError(f"the attempts failed as {self.name}: {result['error']}")
        return result["value"]


def _unprivileged() -> Who:
    if os.getuid() != 0:
        return Who(pwd.getpwuid(os.getuid()).pw_name, os.getuid(), os.getgid(), fork=False)
    try:
        entry = pwd.getpwnam(USER)
    except KeyError:
        useradd = shutil.which("useradd")
        if useradd is None:
            pytest.skip("running as root without useradd: cannot make a user to try as")
        made = subprocess.run([useradd, "--system", "--no-create-home", "--shell",
                               "/usr/sbin/nologin", USER], capture_output=True, text=True)
        if made.returncode != 0 and "already exists" not in made.stderr:
            pytest.skip(f"running as root, useradd {USER} failed: {made.stderr.strip()}")
        entry = pwd.getpwnam(USER)
    return Who(USER, entry.pw_uid, entry.pw_gid, fork=True)


@pytest.fixture(params=["root", "user"])
def who(request: pytest.FixtureRequest) -> Who:
    problem = Bwrap.unavailable()
    if problem is not None:
        pytest.skip(problem)
    if request.param == "root":
        if os.getuid() != 0:
            pytest.skip("the root case needs the tests to run as root")
        return Who("root", 0, 0, fork=False)
    return _unprivileged()


def _as_account(who: Who, attempts: Callable[[], Any]) -> dict[str, Any]:
    """Fork, drop to ``who`` for good, run ``attempts`` there; its JSON-able answer."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns into pytest
        try:
            os.close(reader)
            os.setgroups([])
            os.setgid(who.gid)
            os.setuid(who.uid)
            problem = Bwrap.unavailable()
            payload = {"skip": f"bwrap cannot run as {who.name} here: {problem}"} if problem \
                else {"value": attempts()}
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, never raised
            payload = {"error": f"{type(exc).__name__}: {exc}"}
        try:
            os.write(writer, json.dumps(payload).encode())
        finally:
            os._exit(0)
    os.close(writer)
    chunks: list[bytes] = []
    deadline = time.monotonic() + DRIVER_SECONDS
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([reader], [], [], 1)
            if ready:
                chunk = os.read(reader, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
        else:
            os.kill(pid, signal.SIGKILL)
    finally:
        os.close(reader)
        os.waitpid(pid, 0)
    if not chunks:
        return {"error": f"no answer within {DRIVER_SECONDS} s"}
    return json.loads(b"".join(chunks))


# -- the places an attempt aims at ------------------------------------------------------------


@dataclass(frozen=True)
class Arena:
    """A mission root, a host folder beside it that ``who`` may write, and a file there."""

    root: Path
    outside: Path
    victim: Path
    token: str

    VICTIM_TEXT = "the host's own file\n"

    def untouched(self) -> bool:
        return (sorted(p.name for p in self.outside.iterdir()) == [self.victim.name]
                and self.victim.read_text() == self.VICTIM_TEXT)


@pytest.fixture
def arena(who: Who) -> Iterator[Arena]:
    # Under /var/tmp, not /tmp: the sandbox's /tmp is its own tmpfs, and a write aimed
    # there could never reach the host whatever the sandbox allowed.
    base = Path(tempfile.mkdtemp(prefix="evalkit-escape-", dir="/var/tmp"))
    root, outside = base / "root", base / "outside"
    root.mkdir()
    (root / "sub").mkdir()
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text(Arena.VICTIM_TEXT)
    for path in (base, root, root / "sub", outside, victim):
        os.chown(path, who.uid, who.gid)  # the user could write here, were it not sandboxed
    base.chmod(0o755)
    yield Arena(root, outside, victim, secrets.token_hex(6))
    shutil.rmtree(base, ignore_errors=True)


def shell(runner: CodeRunner, command: str) -> dict[str, Any]:
    began = time.monotonic()
    result = runner.shell({"command": command})
    return {"ok": result.ok, "output": result.output, "error": result.error,
            "seconds": time.monotonic() - began}


def processes_with(token: str) -> list[str]:
    """Command lines of live processes that carry ``token`` (the host's view of /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                line = handle.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat", "rb") as handle:
                zombie = handle.read().rsplit(b")", 1)[-1].split()[0] == b"Z"
        except OSError:
            continue
        if token in line and not zombie:
            found.append(line)
    return found


# -- privileged operations -------------------------------------------------------------------


def test_sandboxed_code_holds_no_capability_and_no_user_namespace(who: Who, arena: Arena) -> None:
    def attempt() -> dict[str, Any]:
        runner = CodeRunner(arena.root, Bwrap(), timeout_s=20)
        return {"caps": shell(runner, "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status"),
                "userns": shell(runner, "unshare -U true && echo made")}

    results = who.run(attempt)
    caps = dict(line.split(":") for line in results["caps"]["output"].splitlines())
    assert len(caps) == 5 and {v.strip() for v in caps.values()} == {"0" * 16}, caps
    assert not results["userns"]["ok"] and "made" not in results["userns"]["output"]



def test_mount_operations_and_privileged_writes_are_refused(who: Who, arena: Arena) -> None:
    planted = arena.outside / "planted"
    host_tmp = Path("/tmp") / f"evalkit-escape-{arena.token}"
    attempts = {
        "remount / read-write": f"mount -o remount,rw / && echo x > {planted}",
        "remount / as a writable bind": f"mount -o remount,bind,rw / && echo x > {planted}",
        "umount the private /tmp": f"umount /tmp && echo x > {host_tmp}",
        "lazily umount /tmp": f"umount -l /tmp && echo x > {host_tmp}",
        "bind the host folder into the root":
            f"mkdir -p mnt && mount --bind {arena.outside} mnt && echo x > mnt/planted",
        "bind / into the root": f"mkdir -p all && mount --bind / all && echo x > all{planted}",
        "a nested user namespace":
            f"unshare -Urm sh -c 'mount -o remount,rw / && echo x > {planted}'",
        "a host-wide sysctl":
            "v=$(cat /proc/sys/kernel/panic) && echo $v > /proc/sys/kernel/panic && echo wrote",
        "leave the call's pids cgroup":
            "for f in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/*/cgroup.procs; do "
            "echo $$ 2>/dev/null > $f && echo moved; done; exit 1",
    }

    def attempt() -> dict[str, Any]:
        runner = CodeRunner(arena.root, Bwrap(), timeout_s=20)
        return {name: shell(runner, command) for name, command in attempts.items()}

    results = who.run(attempt)
    for name, result in results.items():
        assert not result["ok"], (who.name, name, result)
        assert "wrote" not in result["output"] and "moved" not in result["output"], (name, result)
    assert not planted.exists() and not host_tmp.exists()
    assert arena.untouched()


# -- the harness's fork server ---------------------------------------------------------------


@pytest.fixture
def fork_server() -> Iterator[ForkServer]:
    """A fork server as ``run`` or a test session starts one on the host: it forks evalkit
    with whatever environment and folder a request names, outside any sandbox."""
    server = ForkServer()
    if not server.start():
        pytest.skip(f"no fork server here: {server.broken}")
    try:
        yield server
    finally:
        server.close()


def test_sandboxed_code_cannot_reach_the_fork_server_even_knowing_its_socket(
        who: Who, arena: Arena, fork_server: ForkServer) -> None:
    """The agent knows the socket (``EVALKIT_FORKSERVER_SOCKET`` may name it) and would ask
    the server to fork ``evalkit`` with a host folder to write: the socket must not be
    there to connect to, by its path, by the folder's pattern or through the server's /proc."""
    socket_path = str(fork_server.address)
    assert fork_server._proc is not None
    zygote = fork_server._proc.pid
    ask = ("import socket; s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); "
           f"s.connect({socket_path!r}); print('CONNECTED')")
    attempts = {
        "the named socket": f"ls -la {socket_path} && echo SEEN",
        "any fork server's folder": "ls -d /tmp/evalkit-fork-* && echo SEEN",
        "the server's root through /proc": f"ls /proc/{zygote}/root/tmp && echo SEEN",
        "a connection": f"python3 -c {shlex.quote(ask)} || python -c {shlex.quote(ask)}",
    }

    def attempt() -> dict[str, Any]:
        runner = CodeRunner(arena.root, Bwrap(), timeout_s=20)
        return {name: shell(runner, command) for name, command in attempts.items()}

    results = who.run(attempt)
    for name, result in results.items():
        said = result["output"] or ""
        assert not result["ok"] and "SEEN" not in said and "CONNECTED" not in said, \
            (who.name, name, result)
    assert arena.untouched()


# -- writes outside the root -------------------------------------------------------------------


def test_writes_outside_the_root_are_refused_through_every_path_shape(who: Who,
                                                                     arena: Arena) -> None:
    out = arena.outside
    attempts = {
        "absolute": f"echo pwned > {out}/absolute",
        "..": "echo pwned > ../outside/dotdot",
        ".. from below": "echo pwned > sub/../../outside/dotdot-below",
        "a symlinked folder made inside the root": f"ln -s {out} door && echo pwned > door/link",
        "a symlinked file made inside the root":
            f"ln -s {arena.victim} lnk && echo pwned >> lnk",
        "/proc/self/root": f"echo pwned > /proc/self/root{out}/self-root",
        "/proc/1/root": f"echo pwned > /proc/1/root{out}/pid1-root",
        "/proc/self/cwd and ..": "echo pwned > /proc/self/cwd/../outside/cwd",
        "a hard link": f"ln {arena.victim} hard && echo pwned >> hard",
        "a hard link through ..": "ln ../outside/victim.txt hard2 && echo pwned >> hard2",
        "a copy then a rename out": f"echo pwned > moved && mv moved {out}/moved",
    }

    def attempt() -> dict[str, Any]:
        runner = CodeRunner(arena.root, Bwrap(), timeout_s=20)
        boxed = {name: shell(runner, command) for name, command in attempts.items()}
        boxed["inside"] = shell(runner, "echo kept > kept.txt && cat kept.txt")
        boxed["uid"] = shell(runner, "id -u")
        listing = sorted(p.name for p in out.iterdir())
        # The control: unsandboxed, the same account does write there.
        control = CodeRunner(arena.root, NoSandbox()).shell(
            {"command": f"echo x > {out}/control"})
        return {"boxed": boxed, "listing": listing, "control": control.ok}

    results = who.run(attempt)
    boxed = results["boxed"]
    assert boxed.pop("inside")["output"] == "kept\n"
    assert boxed.pop("uid")["output"] == f"{who.uid}\n"  # the account it claims to be
    for name, result in boxed.items():
        assert not result["ok"], (who.name, name, result)
    assert results["listing"] == [arena.victim.name], results["listing"]
    assert arena.victim.read_text() == Arena.VICTIM_TEXT
    assert results["control"] and (out / "control").exists()  # the writes were possible


def test_the_private_tmp_never_reaches_the_host(who: Who, arena: Arena) -> None:
    host_tmp = Path("/tmp") / f"evalkit-escape-{arena.token}"

    def attempt() -> dict[str, Any]:
        return shell(CodeRunner(arena.root, Bwrap(), timeout_s=20),
                     f"echo x > {host_tmp} && cat {host_tmp}")

    assert who.run(attempt)["output"] == "x\n"
    assert not host_tmp.exists()


# -- processes that try to outlive their call ------------------------------------------------


def test_no_process_outlives_its_call(who: Who, arena: Arena) -> None:
    token = arena.token

    def survivor(marker: str, delay: float = 1) -> str:
        # The token rides in the command line, so the host can look for the survivor.
        return (f"sh -c 'sleep {delay}; echo alive > {marker}; : {token}' "
                "</dev/null >/dev/null 2>&1")

    settle = "sleep 0.3"  # the survivor is on its own before the call ends
    attempts = {
        "setsid": f"setsid {survivor('late-setsid')} & {settle}",
        "a double fork": f"( {survivor('late-double')} & ) ; {settle}",
        "nohup and disown": f"nohup {survivor('late-nohup')} & disown; {settle}",
        # it outlives the 1 s limit, then writes
        "setsid, then the call times out": f"setsid {survivor('late-timeout', 2)} & sleep 30",
    }

    def attempt() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for name, command in attempts.items():
            timeout = 1 if "times out" in name else 20
            result = shell(CodeRunner(arena.root, Bwrap(), timeout_s=timeout), command)
            time.sleep(0.1)  # past a timeout's kill, the kernel takes the namespace down
            seen[name] = {**result, "left": processes_with(token)}
        control = shell(CodeRunner(arena.root, NoSandbox()),
                        f"setsid {survivor('late-control')} & {settle}")
        time.sleep(2.5)  # every survivor would have written its marker by now
        markers = sorted(p.name for p in arena.root.iterdir() if p.name.startswith("late-"))
        return {"calls": seen, "control": control, "markers": markers}

    results = who.run(attempt)
    for name, result in results["calls"].items():
        assert result["left"] == [], (who.name, name, result)
        assert result["seconds"] < 10, (name, result)
    assert results["markers"] == ["late-control"], results["markers"]  # unsandboxed, it lived


# -- the process cap -------------------------------------------------------------------------


def test_a_fork_bomb_is_bounded(who: Who, arena: Arena) -> None:
    token = arena.token
    # dash, not bash: bash sleeps and retries a refused fork, dash gives up at once. The
    # count uses only builtins, so it works when the cap is reached.
    flood = ("exec /bin/sh -c 'sleep 1 & s=$!\n"
             f"( while :; do sh -c \"sleep 30; : {token}\" & done ) 2>/dev/null &\n"
             "wait $s; set -- /proc/[0-9]*; echo \"processes=$#\"'")
    bomb = f"bomb() {{ bomb | bomb & }}; bomb; : {token}"

    def attempt() -> dict[str, Any]:
        runner = CodeRunner(arena.root, Bwrap(processes=CAP), timeout_s=10)
        results = {}
        for name, command in (("flood", flood), ("bomb", bomb)):
            result = shell(runner, command)
            time.sleep(0.1)
            results[name] = {**result, "left": processes_with(token)}
        return results

    results = who.run(attempt)
    capped = not (who.uid == 0 and find(0) is None)
    for name, result in results.items():
        assert result["seconds"] < 15, (who.name, name, result)
        assert result["left"] == [], (name, result)
        if not capped:
            assert result["error"] == ROOT_NEEDS_PIDS_CGROUP
    if capped:
        said = results["flood"]["output"]
        assert said.startswith("processes="), results["flood"]
        assert 2 < int(said.split("=")[1]) <= CAP, said
    assert subprocess.run(["true"]).returncode == 0  # the host still starts processes


@needs_bwrap
def test_as_root_without_a_pids_cgroup_the_tools_refuse_in_one_sentence(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sandbox_module, "find_pids_cgroups", lambda uid: None)
    monkeypatch.setattr(sandbox_module, "_runs_as_root", lambda: True)
    result = CodeRunner(tmp_path, Bwrap()).shell({"command": "touch made"})
    assert not result.ok and result.error == ROOT_NEEDS_PIDS_CGROUP
    assert result.output == ROOT_NEEDS_PIDS_CGROUP + "\n"  # one sentence, no traceback
    assert not (tmp_path / "made").exists()


@needs_bwrap
@pytest.mark.skipif(os.getuid() != 0 or find(0) is None,
                    reason="needs root and a pids cgroup evalkit can make here")
def test_as_root_each_call_gets_a_pids_cgroup_that_goes_with_it(tmp_path: Path) -> None:
    cgroups = find(0)
    assert cgroups is not None
    mark = 29  # an unusual cap tells this call's cgroup from a concurrent run's
    before = set(cgroups.calls())
    runner = CodeRunner(tmp_path, Bwrap(processes=mark), timeout_s=20)
    seen: dict[Path, int] = {}
    worker = threading.Thread(target=runner.shell, args=({"command": "sleep 1.5"},))
    worker.start()
    while worker.is_alive():  # the most processes each new cgroup of this cap counted
        for call in set(cgroups.calls()) - before:
            try:
                if (call / "pids.max").read_text().strip() == str(mark):
                    counted = int((call / "pids.current").read_text())
                    seen[call] = max(seen.get(call, 0), counted)
            except OSError:
                continue
        time.sleep(0.05)
    worker.join()
    assert len(seen) == 1, seen
    (call, counted), = seen.items()
    assert counted >= 2  # bwrap and what it runs are all counted
    assert not call.exists()  # removed as the call returned


#: The tests below make or remove call cgroups by hand; one removes every empty one for as
#: long as it runs, so they take turns in one worker (a folder this test makes is empty).
_CGROUPS_BY_HAND = pytest.mark.xdist_group("call-cgroups-by-hand")


@needs_bwrap
@_CGROUPS_BY_HAND
@pytest.mark.skipif(os.getuid() != 0 or find(0) is None,
                    reason="needs root and a pids cgroup evalkit can make here")
def test_a_sweep_spares_the_empty_cgroup_of_a_live_launcher() -> None:
    """A launcher's folder is empty between its mkdir and its join; a sweep by another
    mission at that moment once removed it, and the call was refused (seen in CI)."""
    cgroups = find(0)
    assert cgroups is not None
    dead = subprocess.Popen(["true"])
    dead.wait()
    live, gone = cgroups.parent / f"call-{os.getpid()}", cgroups.parent / f"call-{dead.pid}"
    for folder in (live, gone):
        folder.mkdir(exist_ok=True)
    try:
        cgroups.sweep()
        assert live.exists() and not gone.exists()
    finally:
        for folder in (live, gone):
            with contextlib.suppress(OSError):
                folder.rmdir()


@needs_bwrap
@_CGROUPS_BY_HAND
@pytest.mark.skipif(os.getuid() != 0 or find(0) is None,
                    reason="needs root and a pids cgroup evalkit can make here")
def test_calls_run_while_every_empty_cgroup_is_removed_under_them(tmp_path: Path) -> None:
    """A sweeper that cannot see the launcher's pid (another pid namespace) removes its
    folder mid-join: the launcher makes it again, and no call is refused."""
    cgroups = find(0)
    assert cgroups is not None
    stop = threading.Event()

    def remove_every_empty_call_cgroup() -> None:
        while not stop.is_set():
            for call in cgroups.calls():
                with contextlib.suppress(OSError):
                    call.rmdir()

    results: list[Any] = []
    sweeper = threading.Thread(target=remove_every_empty_call_cgroup)
    sweeper.start()
    try:
        def calls(n: int) -> None:
            runner = CodeRunner(tmp_path, Bwrap(), timeout_s=30)
            results.extend(runner.shell({"command": "echo ran"}) for _ in range(n))

        workers = [threading.Thread(target=calls, args=(6,)) for _ in range(3)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        stop.set()
        sweeper.join()
    refused = [r.output for r in results if not r.ok]
    assert len(results) == 18 and refused == []


# -- hidden folders ----------------------------------------------------------------------------


def test_hidden_folders_are_empty_unreadable_and_unwritable(who: Who, arena: Arena) -> None:
    inner = arena.root / "state"   # inside the mission root
    inner.mkdir()
    secret = f"secret-{arena.token}"
    for folder in (inner, arena.outside):
        (folder / "secret.txt").write_text(secret)
        os.chown(folder, who.uid, who.gid)
        os.chown(folder / "secret.txt", who.uid, who.gid)
    attempts = {
        "list": f"ls -A state {arena.outside}",
        "read inside": "cat state/secret.txt",
        "read outside": f"cat {arena.outside}/secret.txt",
        "read through /proc": f"cat /proc/self/root{inner}/secret.txt",
        "write inside": "echo pwned > state/new.txt",
        "write outside": f"echo pwned > {arena.outside}/new.txt",
        "remove inside": "rm -rf state",
        "replace inside": "mv state gone",
    }

    def attempt() -> dict[str, Any]:
        runner = CodeRunner(arena.root, Bwrap(hide=[inner, arena.outside]), timeout_s=20)
        results = {name: shell(runner, command) for name, command in attempts.items()}
        results["the root still works"] = shell(runner, "echo ok > fine.txt && cat fine.txt")
        return results

    results = who.run(attempt)
    assert results.pop("the root still works")["output"] == "ok\n"
    assert sorted(results.pop("list")["output"].split()) == sorted(["state:", f"{arena.outside}:"])
    for name, result in results.items():
        assert not result["ok"], (who.name, name, result)
        assert secret not in result["output"], (name, result)
    for folder in (inner, arena.outside):
        assert (folder / "secret.txt").read_text() == secret
        assert sorted(p.name for p in folder.iterdir()) == ["secret.txt"] + \
            (["victim.txt"] if folder == arena.outside else [])


@needs_bwrap
def test_a_hidden_folder_holding_the_root_hides_all_but_the_root(tmp_path: Path) -> None:
    base = Path(tempfile.mkdtemp(prefix="evalkit-hide-", dir="/var/tmp"))
    try:
        root = base / "work" / "root"
        root.mkdir(parents=True)
        (base / "work" / "secret.txt").write_text("sibling secret")
        (base / "work" / "inner").mkdir()  # hidden twice over: covered once
        runner = CodeRunner(root, Bwrap(hide=[base / "work", base / "work" / "inner",
                                              base / "work" / "missing"]))
        seen = runner.shell({"command": f"ls -A {base}/work; cat {base}/work/secret.txt"})
        assert seen.output.startswith("root\n") and "sibling secret" not in seen.output
        wrote = runner.shell({"command": f"echo x > {base}/work/new; echo kept > kept && cat kept"})
        assert wrote.stdout == "kept\n" and "Read-only file system" in wrote.stderr
        assert sorted(p.name for p in (base / "work").iterdir()) == ["inner", "root", "secret.txt"]
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- where bwrap cannot run ------------------------------------------------------------------


def test_a_bwrap_that_cannot_build_its_sandbox_is_unavailable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    assert not Bwrap.available()
    problem = Bwrap.unavailable()
    assert problem is not None and "setting up uid map: Permission denied" in problem
    assert "\n" not in problem
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert Bwrap.unavailable() == "bubblewrap (bwrap) is not installed"


# -- finding a pids hierarchy ----------------------------------------------------------------

V1 = ("39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
      "35 31 0:32 /../.. /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n")
V2_LINE = "41 31 0:38 / {point} rw,relatime - cgroup2 cgroup2 rw\n"


def test_the_pids_hierarchy_is_found_where_it_is_mounted(tmp_path: Path) -> None:
    assert candidates(V1, "8:pids:/ci/job\n4:memory:/x\n") == \
        [Path("/sys/fs/cgroup/pids/ci/job")]
    assert candidates(V1, "8:pids:/\n") == [Path("/sys/fs/cgroup/pids")]
    with_pids = tmp_path / "v2"
    with_pids.mkdir()
    (with_pids / "cgroup.controllers").write_text("cpu io memory pids\n")
    without = tmp_path / "v2-bare"
    without.mkdir()
    (without / "cgroup.controllers").write_text("hugetlb\n")
    mounts = V2_LINE.format(point=with_pids) + V2_LINE.format(point=without) + V1
    assert candidates(mounts, "0::/\n8:pids:/\n") == [with_pids, Path("/sys/fs/cgroup/pids")]
    assert candidates(V2_LINE.format(point=without), "0::/\n") == []
