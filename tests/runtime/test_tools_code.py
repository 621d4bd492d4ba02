"""The code tools as real subprocesses, with and without bubblewrap."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalkit.runtime.tools import Bwrap, NoSandbox, ResultStore, ToolPlane

pytestmark = pytest.mark.slow

needs_bwrap = pytest.mark.skipif(not Bwrap.available(), reason=Bwrap.unavailable() or "")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    return root


def plane_for(root: Path, **options: object) -> ToolPlane:
    return ToolPlane(root, ResultStore(), **options)  # type: ignore[arg-type]


# -- without a sandbox -------------------------------------------------------


def test_python_returns_outputs_and_exit_code(root: Path) -> None:
    plane = plane_for(root)
    ok = plane.dispatch("run_python_code", {"code": "import os\nprint(os.getcwd())\nprint(6*7)"})
    assert ok.ok and ok.exit_code == 0 and ok.stdout == f"{root}\n42\n" and ok.stderr == ""
    bad = plane.dispatch("run_python_code", {"code": "print('before')\nraise SystemExit(4)"})
    assert not bad.ok and bad.exit_code == 4 and bad.stdout == "before\n"
    boom = plane.dispatch("run_python_code", {"code": "1/0"})
    assert boom.exit_code == 1 and boom.error == "ZeroDivisionError: division by zero"
    assert "Traceback" in boom.stderr and boom.output == boom.stderr


def test_shell_returns_outputs_and_exit_code(root: Path) -> None:
    plane = plane_for(root)
    result = plane.dispatch("run_shell_command", {"command": "echo out; echo err >&2; exit 3"})
    assert (result.ok, result.exit_code, result.stdout, result.stderr) == (False, 3, "out\n", "err\n")
    assert result.output == "out\nerr\n"
    made = plane.dispatch("run_shell_command", {"command": "printf hi > made.txt && pwd"})
    assert made.ok and made.stdout == f"{root}\n" and (root / "made.txt").read_text() == "hi"


def test_a_long_program_goes_in_whole(root: Path) -> None:
    code = "x = 0\n" + "x += 1\n" * 50_000 + "print(x)\n"  # bigger than one argv string may be
    assert plane_for(root).dispatch("run_python_code", {"code": code}).stdout == "50000\n"


@pytest.mark.parametrize(("tool", "arguments"), [
    ("run_shell_command", {"command": "echo started; sleep 30"}),
    ("run_python_code", {"code": "print('started', flush=True)\nwhile True: pass"}),
])
def test_wall_time_limit_kills_and_fails(root: Path, tool: str, arguments: dict) -> None:
    plane = plane_for(root, timeout_s=1)
    began = time.monotonic()
    result = plane.dispatch(tool, arguments)
    assert time.monotonic() - began < 10
    assert not result.ok and result.exit_code is None
    assert result.stdout.startswith("started")
    assert result.error == "[evalkit: timed out after 1 s; killed]"


def test_background_children_do_not_outlive_the_call(root: Path) -> None:
    began = time.monotonic()
    result = plane_for(root).dispatch("run_shell_command", {"command": "sleep 30 & echo spawned"})
    assert result.ok and result.stdout == "spawned\n"
    assert time.monotonic() - began < 10


def test_output_beyond_the_limit_is_counted_not_kept(root: Path) -> None:
    plane = plane_for(root, max_output_bytes=1000)
    result = plane.dispatch("run_python_code", {"code": "print('x' * 5000)"})
    assert result.ok
    assert result.stdout.startswith("x" * 1000)
    assert result.stdout.endswith("[evalkit: stdout cut at 1000 bytes of 5001]\n")


def test_credential_named_variables_are_not_passed(root: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALKIT_TEST_API_KEY", "sk-should-not-leak")
    monkeypatch.setenv("EVALKIT_TEST_PLAIN", "visible")
    result = plane_for(root).dispatch(
        "run_shell_command", {"command": 'echo "${EVALKIT_TEST_API_KEY:-absent} $EVALKIT_TEST_PLAIN"'})
    assert result.stdout == "absent visible\n"


def test_a_program_that_cannot_start_is_a_failing_result(root: Path) -> None:
    class Missing(NoSandbox):
        def wrap(self, argv: list[str], root: Path, network: bool) -> list[str]:
            return ["/nonexistent/evalkit-sandbox", *argv]

    result = plane_for(root, sandbox=Missing()).dispatch("run_shell_command", {"command": "true"})
    assert not result.ok and result.exit_code is None and "could not start" in result.error


# -- under bubblewrap --------------------------------------------------------


@pytest.fixture
def outside() -> Iterator[Path]:
    """A host directory outside the mission root and outside /tmp (the sandbox's tmpfs)."""
    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else str(Path.home())
    path = Path(tempfile.mkdtemp(prefix="evalkit-outside-", dir=base))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port on the host's loopback that accepts connections."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


def connect(port: int) -> str:
    return (
        "import socket\n"
        f"socket.create_connection(('127.0.0.1', {port}), timeout=3).close()\n"
        "print('connected')\n"
    )


def test_sandboxes_rewrite_argv_as_documented(root: Path) -> None:
    assert NoSandbox().wrap(["a", "b"], root, False) == ["a", "b"]
    bwrap = Bwrap(executable="/usr/bin/bwrap")
    argv = bwrap.wrap(["sh", "-c", "true"], root, False)
    # As root, a launcher that joins a pids cgroup may come first (or a refusal instead).
    assert "/usr/bin/bwrap" in argv and argv[-3:] == ["sh", "-c", "true"]
    text = " ".join(argv[argv.index("/usr/bin/bwrap"):])
    for part in ("--ro-bind / /", f"--bind {root} {root}", "--tmpfs /tmp", "--dev /dev",
                 "--proc /proc --remount-ro /proc", "--unshare-all --unshare-user",
                 "--disable-userns", "--cap-drop ALL", "--die-with-parent", "--new-session"):
        assert part in text
    assert text.index("--tmpfs /tmp") < text.index("--bind")
    assert "--share-net" not in text
    assert "--share-net" in " ".join(bwrap.wrap(["true"], root, True))


@needs_bwrap
def test_bwrap_writes_inside_the_root(root: Path) -> None:
    plane = plane_for(root, sandbox=Bwrap())
    result = plane.dispatch("run_shell_command", {"command": "echo kept > inside.txt && cat inside.txt"})
    assert result.ok, result.output
    assert (root / "inside.txt").read_text() == "kept\n"
    py = plane.dispatch("run_python_code", {"code": "open('py.txt', 'w').write('ok')"})
    assert py.ok, py.output
    assert (root / "py.txt").read_text() == "ok"


@needs_bwrap
def test_bwrap_cannot_write_outside_the_root(root: Path, outside: Path) -> None:
    plane = plane_for(root, sandbox=Bwrap())
    target = outside / "planted.txt"
    result = plane.dispatch("run_shell_command", {"command": f"echo x > {target}"})
    assert not result.ok and "Read-only file system" in result.stderr
    assert not target.exists()
    sibling = root.parent / "sibling.txt"  # under /tmp: lands in the private tmpfs at most
    plane.dispatch("run_shell_command", {"command": f"echo x > {sibling}"})
    assert not sibling.exists()
    private = plane.dispatch("run_shell_command", {"command": "echo x > /tmp/evalkit-private && ls /tmp"})
    assert private.ok and not Path("/tmp/evalkit-private").exists()


@needs_bwrap
def test_bwrap_cannot_open_a_network_connection(root: Path, listener: int) -> None:
    reachable = plane_for(root).dispatch("run_python_code", {"code": connect(listener)})
    assert reachable.stdout == "connected\n", "the unsandboxed control must reach the listener"
    boxed = plane_for(root, sandbox=Bwrap()).dispatch("run_python_code", {"code": connect(listener)})
    assert not boxed.ok and "connected" not in boxed.stdout
    assert "Error" in boxed.error


@needs_bwrap
def test_bwrap_shares_the_network_only_when_asked(root: Path, listener: int) -> None:
    plane = plane_for(root, sandbox=Bwrap(), network=True)
    assert plane.dispatch("run_python_code", {"code": connect(listener)}).stdout == "connected\n"


@needs_bwrap
def test_bwrap_sets_rlimits(root: Path) -> None:
    plane = plane_for(root, sandbox=Bwrap(cpu_seconds=7, memory_bytes=2 * 1024**3, processes=99))
    code = ("import resource as r\n"
            "print(r.getrlimit(r.RLIMIT_CPU), r.getrlimit(r.RLIMIT_AS), r.getrlimit(r.RLIMIT_NPROC))")
    result = plane.dispatch("run_python_code", {"code": code})
    assert result.stdout == f"(7, 7) ({2 * 1024**3}, {2 * 1024**3}) (99, 99)\n", result.output


@needs_bwrap
def test_bwrap_timeout_kills_the_sandbox(root: Path) -> None:
    began = time.monotonic()
    result = plane_for(root, sandbox=Bwrap(), timeout_s=1).dispatch(
        "run_shell_command", {"command": "sleep 30"})
    assert time.monotonic() - began < 10
    assert not result.ok and "timed out" in result.error


def test_sys_executable_is_what_runs_python(root: Path) -> None:
    result = plane_for(root).dispatch("run_python_code", {"code": "import sys; print(sys.executable)"})
    assert result.stdout.strip() == sys.executable


@pytest.mark.parametrize("sandbox", [
    pytest.param("bwrap", marks=needs_bwrap), "none"])
def test_no_descriptor_of_the_harness_reaches_tool_code(tmp_path: Path, sandbox: str) -> None:
    held = tmp_path / "audit.jsonl"
    held.write_text("the harness's own file\n")
    fd = os.open(held, os.O_RDWR)  # no O_CLOEXEC, and inheritable on purpose
    os.set_inheritable(fd, True)
    root = tmp_path / "root"
    root.mkdir()
    plane = plane_for(root, sandbox=Bwrap() if sandbox == "bwrap" else NoSandbox())
    try:
        # The shell's own table, which is what the tool process was handed: "; true" keeps
        # bash from exec'ing ls, whose own directory descriptor would be listed instead.
        numbers = plane.dispatch("run_shell_command", {"command": "ls /proc/$$/fd; true"})
        links = plane.dispatch("run_shell_command", {"command": "ls -l /proc/$$/fd; true"})
    finally:
        os.close(fd)
    assert numbers.ok, numbers.output
    assert sorted(int(n) for n in numbers.stdout.split()) == [0, 1, 2], links.stdout
    assert str(held) not in links.stdout
