"""The fork server makes the process a spawn would have made, or says no and is not used.

A probe module, served by a fork server started for it, reports what its process
looks like from inside; the same probe spawned with ``subprocess.Popen`` and the
same options must report the same, but for its pid.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalkit.forkserver import client
from evalkit.forkserver.client import Forked, ForkServer
from evalkit.forkserver.wire import SERVED, interpreter_shape
from evalkit.runtime.tools.sandbox import Bwrap

pytestmark = [pytest.mark.slow, pytest.mark.spawns]

PROBE = '''
import json, os, signal, sys, threading, time
report = int(sys.argv[1])
if sys.argv[2:] == ["sleep"]:
    os.write(report, b"sleeping")
    time.sleep(60)
if sys.argv[2:3] == ["exit"]:
    sys.exit(int(sys.argv[3]))
if sys.argv[2:3] == ["end"]:  # how a program ends, and what its process does then
    import atexit
    how = sys.argv[3]
    atexit.register(lambda: print("atexit ran", file=sys.stderr))
    def later():
        time.sleep(0.2)
        print("the thread ended", file=sys.stderr)
    threading.Thread(target=later).start()
    print("still in the buffer", end="")  # stdout is a file: flushed at exit, or lost
    if how == "message":
        sys.exit("a message for stderr")
    if how == "raise":
        raise ValueError("uncaught")
    if how == "interrupt":
        raise KeyboardInterrupt
    if how == "wide":
        sys.exit(256 + 3)
    if how == "negative":  # a status, not a signal: 254
        sys.exit(-2)
    if how == "full":  # stdout's last flush fails: status 120, and the interpreter says why
        os.dup2(os.open("/dev/full", os.O_WRONLY), 1)
    sys.exit(None)

def handler(h):
    return getattr(h, "__name__", None) or str(h)

def stream(s):
    raw = getattr(s.buffer, "raw", s.buffer)
    return [s.fileno(), s.encoding, s.errors, s.line_buffering, s.write_through, s.mode,
            raw.name, s.isatty(), type(s.buffer).__name__]

fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
os.write(report, json.dumps({
    "pid": os.getpid(), "sid": os.getsid(0), "pgid": os.getpgid(0), "fds": fds,
    "inheritable": [os.get_inheritable(fd) for fd in (0, 1, 2, report)],
    "env": dict(os.environ), "cwd": os.getcwd(), "argv": sys.argv, "path0": sys.path[0],
    "main": [__name__, os.path.basename(sys.modules["__main__"].__file__)],
    "stdio": [stream(s) for s in (sys.stdin, sys.stdout, sys.stderr)],
    "dunder": [sys.stdin is sys.__stdin__, sys.stdout is sys.__stdout__,
               sys.stderr is sys.__stderr__],
    "dont_write_bytecode": sys.dont_write_bytecode,
    "signals": {name: handler(signal.getsignal(getattr(signal, name)))
                for name in ("SIGINT", "SIGTERM", "SIGPIPE", "SIGCHLD", "SIGXFSZ", "SIGHUP")},
    "mask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "threads": threading.active_count(), "umask": os.umask(0o22),
    "stdin": sys.stdin.read(),
}).encode())
print("to stdout, ünïcode")
print("to stderr", file=sys.stderr)
'''


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "probe_fork.py").write_text(PROBE, encoding="utf-8")
    return tmp_path


@pytest.fixture
def server(work: Path) -> Iterator[ForkServer]:
    """A fork server for the probe alone: it imports nothing beforehand."""
    started = ForkServer(modules=("probe_fork",))
    try:
        yield started
    finally:
        started.close()


@pytest.fixture
def preloaded(work: Path) -> Iterator[ForkServer]:
    """A fork server for the probe that has imported what missions and the stub use."""
    started = ForkServer(modules=("probe_fork", *SERVED))
    try:
        yield started
    finally:
        started.close()


def launch(spawn: Any, work: Path, *args: str, env: dict[str, str] | None = None
           ) -> tuple[Any, int, Path]:
    """Start the probe as the harness starts a mission: stdin from /dev/null, stdout and
    stderr to files, a report pipe passed at its own number, a session of its own."""
    read, write = os.pipe()
    out = open(work / f"out-{time.monotonic_ns()}", "wb")  # noqa: SIM115
    with out, open(os.devnull, "rb") as null:
        argv = [sys.executable, "-m", "probe_fork", str(write), *args]
        proc = spawn(argv, stdin=null.fileno(), stdout=out.fileno(), stderr=out.fileno(),
                     cwd=str(work), env=env if env is not None else dict(os.environ),
                     pass_fds=(write,), start_new_session=True)
    os.close(write)
    return proc, read, Path(out.name)


def read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def probe(spawn: Any, work: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc, read, out = launch(spawn, work, env=env)
    facts = json.loads(read_all(read))
    assert proc.wait(30) == 0
    facts["output"] = out.read_text(encoding="utf-8")
    return facts


def test_a_forked_child_is_the_process_a_spawn_makes(preloaded: ForkServer, work: Path) -> None:
    forked = probe(preloaded.fork, work)
    spawned = probe(subprocess.Popen, work)
    assert preloaded.last_refusal is None
    for facts in (forked, spawned):
        assert facts["sid"] == facts["pgid"] == facts["pid"]  # a session of its own
        assert facts["threads"] == 1
    assert forked["pid"] != spawned["pid"]
    for facts in (forked, spawned):
        for key in ("pid", "sid", "pgid"):
            del facts[key]
    assert forked == spawned
    assert forked["main"] == ["__main__", "probe_fork.py"]
    assert forked["output"] == "to stdout, ünïcode\nto stderr\n"


def test_the_environment_and_what_a_child_applies_itself(server: ForkServer,
                                                         work: Path) -> None:
    env = {**os.environ, "EXTRA_FOR_THE_CHILD": "yes", "PYTHONDONTWRITEBYTECODE": "",
           "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONDONTWRITEBYTECODE")
    forked, spawned = probe(server.fork, work, env), probe(subprocess.Popen, work, env)
    assert server.last_refusal is None
    assert forked["env"] == spawned["env"] == env
    assert forked["dont_write_bytecode"] is spawned["dont_write_bytecode"] is False
    assert forked["stdio"] == spawned["stdio"]  # unbuffered: stdout and stderr write through
    assert spawned["stdio"][1][4] is True


def test_exit_codes_signals_and_timeouts_come_back_as_popen_gives_them(
        server: ForkServer, work: Path) -> None:
    proc, read, _ = launch(server.fork, work, "exit", "7")
    assert isinstance(proc, Forked)
    assert proc.wait(30) == 7 and proc.poll() == 7
    os.close(read)
    proc, read, _ = launch(server.fork, work, "sleep")
    assert os.read(read, 8) == b"sleeping"
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(0.2)
    os.killpg(proc.pid, signal.SIGTERM)  # what the harness does at a timeout
    assert proc.wait(30) == -signal.SIGTERM
    os.close(read)


#: How the probe ends (``PROBE``'s ``end``), and the status a process ending so exits with.
ENDINGS = {"none": 0, "message": 1, "raise": 1, "interrupt": -signal.SIGINT, "wide": 3,
           "negative": 254, "full": 120}


def test_a_forked_child_ends_as_a_spawned_one(preloaded: ForkServer, work: Path) -> None:
    """The child skips the interpreter's teardown of its modules (``server._leave``), and
    nothing a program sees goes with it: threads joined, atexit run, buffers flushed, the
    exit status and what ``SystemExit`` or an uncaught exception prints."""
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    for how, status in ENDINGS.items():
        ended = []
        for spawn in (preloaded.fork, subprocess.Popen):
            proc, read, out = launch(spawn, work, "end", how, env=buffered)
            os.close(read)
            ended.append((proc.wait(30), out.read_text(encoding="utf-8")))
        assert preloaded.last_refusal is None
        assert ended[0] == ended[1], how
        code, output = ended[0]
        assert code == status, how
        assert ("still in the buffer" in output) is (how != "full"), how
        assert "the thread ended" in output, how
        assert "atexit ran" in output, how
        if how == "raise":
            assert "Traceback" in output and "ValueError: uncaught" in output
            assert "forkserver" not in output  # from runpy down, as a spawn's
        if how == "full":
            assert "No space left on device" in output


def test_children_are_reaped_and_the_server_holds_no_descriptor_of_theirs(
        preloaded: ForkServer, work: Path) -> None:
    for _ in range(3):
        probe(preloaded.fork, work)
    zygote = preloaded._proc
    assert zygote is not None

    def held() -> tuple[list[str], list[str]]:
        children = Path(f"/proc/{zygote.pid}/task/{zygote.pid}/children").read_text().split()
        return children, [os.readlink(f"/proc/{zygote.pid}/fd/{fd}")
                          for fd in os.listdir(f"/proc/{zygote.pid}/fd")]

    deadline = time.monotonic() + 5  # the last answer is sent just before it lets go
    while time.monotonic() < deadline and len(held()[1]) > 5:
        time.sleep(0.05)
    children, fds = held()
    assert children == []
    # stdin, stdout, stderr, the listening socket and the poller: nothing per child.
    assert len(fds) == 5, fds


def test_requests_that_would_not_start_the_same_interpreter_are_spawned(
        preloaded: ForkServer, work: Path) -> None:
    env = {**os.environ, "PYTHONHASHSEED": "123"}
    proc, read, _ = launch(preloaded.fork, work, env=env)
    os.close(read)
    assert proc is None and "different interpreter" in (preloaded.last_refusal or "")
    (work / "yaml.py").write_text("")  # -m puts the folder first: a spawn would import this
    proc, read, _ = launch(preloaded.fork, work)
    os.close(read)
    assert proc is None and "yaml" in (preloaded.last_refusal or "")
    assert preloaded.fork([sys.executable, "-c", "pass"]) is None


def test_a_requester_that_goes_away_takes_its_child_with_it(server: ForkServer,
                                                            work: Path) -> None:
    proc, read, _ = launch(server.fork, work, "sleep")
    assert os.read(read, 8) == b"sleeping"
    proc._conn.close()  # as if the harness, or a relay, died
    assert _gone(proc.pid)
    os.close(read)


def test_when_the_server_dies_its_children_go_and_later_requests_are_spawned(
        server: ForkServer, work: Path) -> None:
    proc, read, out = launch(server.fork, work, "sleep")
    assert os.read(read, 8) == b"sleeping"
    assert server._proc is not None
    server._proc.kill()
    assert proc.wait(10) == -signal.SIGKILL
    assert _gone(proc.pid)
    assert "the fork server died; this process was killed with it" in out.read_text()
    os.close(read)
    again, read, _ = launch(server.fork, work)
    os.close(read)
    assert again is None and server.broken


def test_popen_forks_only_inside_serving_and_only_what_is_served(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "evalkit.cli", "--version"]
    options = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL,
               "stderr": subprocess.DEVNULL, "cwd": str(tmp_path), "start_new_session": True}
    outside = client.popen(argv, **options)
    assert isinstance(outside, subprocess.Popen) and outside.wait() == 0
    with client.serving():
        inside = client.popen(argv, **options)
        other = client.popen([sys.executable, "-c", "pass"], **options)
        assert isinstance(inside, Forked) and inside.wait(30) == 0
        assert isinstance(other, subprocess.Popen) and other.wait() == 0
        folder = Path(client._active.address).parent  # type: ignore[union-attr]
        assert folder.parent == Path("/tmp") and oct(folder.stat().st_mode & 0o777) == "0o700"
    assert not folder.exists()


def test_evalkit_forkserver_off_spawns(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EVALKIT_FORKSERVER", "off")
    with client.serving():
        proc = client.popen([sys.executable, "-m", "evalkit.cli", "--version"],
                            stdout=subprocess.DEVNULL, cwd=str(tmp_path))
        assert isinstance(proc, subprocess.Popen) and proc.wait() == 0


def test_the_relay_environment_has_the_shape_of_a_harness_with_lang_set() -> None:
    harness = {"LANG": "C.UTF-8", "HOME": "/root", "PYTHONPATH": "/src",
               "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1", "PATH": "/bin"}
    relay = {"LC_CTYPE": "C.UTF-8", "HOME": "/root", "PYTHONPATH": "/src", "PATH": "/usr/bin"}
    assert interpreter_shape(harness) == interpreter_shape(relay)
    assert interpreter_shape({**relay, "PYTHONHASHSEED": "0"}) != interpreter_shape(relay)
    assert interpreter_shape({**relay, "LC_ALL": "C"}) != interpreter_shape(relay)


def _gone(pid: int, within_s: float = 10) -> bool:
    """Whether the process ends (or is left a zombie) within ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().split(")")[-1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not Bwrap.available(), reason=Bwrap.unavailable() or "")
def test_sandboxed_code_cannot_reach_the_server(server: ForkServer, tmp_path: Path) -> None:
    assert server.start() and server.address is not None
    look = ["python3", "-c", "import os, sys; sys.exit(0 if os.path.exists(sys.argv[1]) else 3)",
            server.address]
    assert subprocess.run(look, cwd=tmp_path).returncode == 0
    confined = Bwrap().wrap(look, tmp_path, network=False)
    assert subprocess.run(confined, cwd=tmp_path, capture_output=True).returncode == 3
