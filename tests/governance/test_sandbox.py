"""The sandbox policy and the rooted file tools, tried the way a hostile model would."""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.governance.conftest import (
    RunGoverned,
    answer,
    call,
    clean_env,
    cli,
    needs_bwrap,
    write_script,
)


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP server on the host's loopback; yields its port."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=2)
    server.close()


def connect_code(port: int) -> str:
    return (f"{sys.executable} -c \"import socket; socket.create_connection(('127.0.0.1', "
            f"{port}), timeout=3); print('connected')\"")


@pytest.mark.slow
@needs_bwrap
def test_dev_shell_under_bwrap_cannot_write_outside_the_root_or_reach_the_network(
        governed: RunGoverned, tmp_path: Path, listener: int) -> None:
    probe = f"evalkit-probe-{secrets.token_hex(6)}"
    outside = tmp_path / f"{probe}.txt"
    var_tmp = Path("/var/tmp") / probe
    in_tmp = Path("/tmp") / probe
    done = governed([
        call("run_shell_command", command=f"echo x > {outside}"),
        call("run_shell_command", command=f"echo x > {var_tmp}"),
        call("run_shell_command", command=f"echo x > {in_tmp} && cat {in_tmp}"),
        call("run_shell_command", command=f"mkdir -p {Path.home()}/{probe}"),
        call("run_shell_command", command=connect_code(listener)),
        call("run_shell_command", command="echo inside > inside.txt && cat inside.txt"),
        answer("tried"),
    ], profile="dev", sandbox="bwrap", servers=0)
    assert done.started["sandbox"] == "bwrap" and done.started["profile"] == "dev"
    wrote_out, wrote_var, wrote_tmp, wrote_home, net, inside = done.results()
    # tmp_path lies under /tmp, which is the sandbox's own tmpfs: the write lands there and
    # vanishes with it; the host file never appears.
    assert not outside.exists(), wrote_out
    assert not wrote_var["ok"] and not var_tmp.exists()
    assert wrote_tmp["ok"] and not in_tmp.exists()  # a private /tmp, gone with the sandbox
    assert not wrote_home["ok"] and not (Path.home() / probe).exists()
    assert not net["ok"] and "connected" not in net["output"]
    assert inside["ok"] and (done.root / "inside.txt").read_text() == "inside\n"


@pytest.mark.slow
def test_the_network_probe_does_connect_unsandboxed(governed: RunGoverned,
                                                    listener: int) -> None:
    # The control for the test above: the probe itself works, so its failure means bwrap.
    done = governed([call("run_shell_command", command=connect_code(listener)), answer("ok")],
                    profile="dev", sandbox="none", servers=0)
    assert done.started["sandbox"] == "none"
    assert done.results()[0]["output"] == "connected\n"


# -- path escapes -------------------------------------------------------------------------------


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("never read me\n")
    (root / "ok.txt").write_text("fine\n")
    os.symlink(outside / "secret.txt", root / "link")            # a symlinked file
    os.symlink(outside, root / "door")                           # a symlinked parent
    os.symlink(root / "link", root / "sub" / "chain")            # a symlink to a symlink
    os.symlink("../../outside", root / "sub" / "relative_door")  # relative, climbing out
    return root, outside


ESCAPES = [
    ("absolute", "/etc/passwd"),
    ("absolute", str(Path("/tmp") / "x.txt")),
    ("absolute", "//etc/passwd"),
    ("..", "../outside/secret.txt"),
    ("..", "sub/../../outside/secret.txt"),
    ("..", "./../outside/secret.txt"),
    ("symlink", "link"),
    ("symlink", "sub/chain"),
    ("symlink", "door/secret.txt"),
    ("symlink", "door/new.txt"),
    ("symlink", "sub/relative_door/secret.txt"),
]


@pytest.mark.parametrize("action", ["read", "write", "list"])
def test_every_path_escape_is_refused_as_an_ordinary_result(
        governed: RunGoverned, world: tuple[Path, Path], action: str) -> None:
    root, outside = world
    script = []
    for _, path in ESCAPES:
        arguments = {"action": action, "path": path}
        if action == "write":
            arguments["content"] = "pwned"
        script.append(json.dumps({"tool": "fs", "arguments": arguments}))
    script += [call("fs", action="read", path="ok.txt"), answer("tried")]
    done = governed(script, profile="dev", root=root, servers=0)
    results = done.results()
    assert len(results) == len(ESCAPES) + 1
    for (shape, path), result in zip(ESCAPES, results[:-1], strict=True):
        assert not result["ok"], (shape, path, result)
        assert "refused" in result["error"], (shape, path, result["error"])
        assert "never read me" not in result["output"]
        expect = {"absolute": "absolute path refused", "..": "through '..'",
                  "symlink": "through a symlink"}[shape]
        assert expect in result["error"], (path, result["error"])
    assert results[-1]["ok"] and results[-1]["output"] == "fine\n"
    assert (outside / "secret.txt").read_text() == "never read me\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert not (Path("/tmp") / "x.txt").exists() or action != "write" or \
        (Path("/tmp") / "x.txt").read_text() != "pwned"
    assert all(line["verdict"] == "allowed" for line in done.audit)  # the plane refused


# -- which sandbox a run gets -------------------------------------------------------------------


@pytest.mark.slow
def test_the_sandbox_policy_from_the_command_line(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.json", [answer("x")])

    def started(*extra: str, **env: str) -> tuple[int, str, dict | None]:
        events = tmp_path / f"e{secrets.token_hex(3)}.jsonl"
        done = cli(tmp_path, "mission", "x", "--script", str(script), "--events", str(events),
                   *extra, env=clean_env(tmp_path, **env))
        first = json.loads(events.read_text().splitlines()[0]) if events.exists() else None
        return done.returncode, done.stderr, first

    from evalkit.runtime.tools import Bwrap

    code, _, record = started()
    assert code == 0 and record["sandbox"] == ("bwrap" if Bwrap.available() else "none")
    assert started("--unsandboxed")[2]["sandbox"] == "none"
    assert started(EVALKIT_SANDBOX="none")[2]["sandbox"] == "none"
    # no bwrap on PATH: EVALKIT_SANDBOX=bwrap refuses, the default falls back to none
    code, err, record = started(EVALKIT_SANDBOX="bwrap", PATH="/nonexistent")
    assert code == 2 and record is None and "EVALKIT_SANDBOX=bwrap" in err
    assert "bubblewrap" in err
    code, _, record = started(PATH="/nonexistent")
    assert code == 0 and record["sandbox"] == "none"
