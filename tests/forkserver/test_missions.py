"""Missions of the built-in runtime forked by ``run``, and the stub plane forked behind a
relay: still processes the harness times out and winds up, still an MCP server over stdio."""

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

import anyio
import pytest

from evalkit.forkserver import client
from evalkit.forkserver.client import Forked, ForkServer
from evalkit.planes import stub_command
from tests._stream_builders import mission, write_suite
from tests.harness.conftest import invoke, read_json

pytestmark = [pytest.mark.slow, pytest.mark.spawns]  # run starts a fork server of its own


def stub_suite(folder: Path, naps: dict[str, float], held_out: int = 3) -> Path:
    """Sum missions on the stub plane (``held_out`` of them in the test split); a mission
    in ``naps`` sleeps that long first."""
    agents = folder / "agents"
    agents.mkdir(parents=True)
    missions = [mission(f"t{i}", expects_tools=["mcp.add"], answer_must_match=[r"\b5\b"])
                for i in range(5)]
    missions += [mission(f"h{i}", split="test", expects_tools=["mcp.add"],
                         answer_must_match=[r"\b5\b"]) for i in range(held_out)]
    for m in missions:
        replies = [{"tool": "mcp.add", "arguments": {"a": 2, "b": 3}}, {"answer": "The sum is 5."}]
        if m["key"] in naps:
            replies.insert(0, {"tool": "mcp.sleep", "arguments": {"seconds": naps[m["key"]]}})
        (agents / f"{m['key']}.yaml").write_text(
            "".join(f"- '{json.dumps(r)}'\n" for r in replies), encoding="utf-8")
    return write_suite(folder / "missions.yaml", missions, flags=["chaining"], plane="stub",
                       agents="agents", tools=["mcp.add", "mcp.sleep"])


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What kind of process each of the harness's spawns made."""
    kinds: list[str] = []
    popen = client.popen

    def recording(argv: Any, **options: Any) -> Any:
        proc = popen(argv, **options)
        kinds.append(type(proc).__name__)
        return proc

    monkeypatch.setattr(client, "popen", recording)
    return kinds


@pytest.fixture
def server_folders(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The folders the fork servers started in this test listen in."""
    folders: list[str] = []
    mkdtemp = client.tempfile.mkdtemp

    def noting(*args: Any, **options: Any) -> str:
        folder = mkdtemp(*args, **options)
        if options.get("prefix") == "evalkit-fork-":
            folders.append(folder)
        return folder

    monkeypatch.setattr(client.tempfile, "mkdtemp", noting)
    return folders


def test_run_forks_every_mission_and_scores_them_as_spawned_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spawned: list[str],
        server_folders: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    suite = stub_suite(tmp_path / "suite", {})
    forked, plain = tmp_path / "forked", tmp_path / "plain"
    assert invoke("run", "--suite", suite, "--out", forked, "--quiet").exit_code == 0
    assert spawned == ["Forked"] * 8
    monkeypatch.setenv("EVALKIT_FORKSERVER", "off")
    assert invoke("run", "--suite", suite, "--out", plain, "--quiet", "--split", "test"
                  ).exit_code == 0
    assert spawned[8:] == ["Popen"] * 3
    varies = ("argv", "cwd", "wall_s", "events_bytes")  # paths, clocks, elapsed_s's digits
    for key in ("h0", "h2"):
        one, other = (read_json(f / key / "command.json") for f in (forked, plain))
        assert {k: v for k, v in one.items() if k not in varies} == \
            {k: v for k, v in other.items() if k not in varies}
        assert (forked / key / "stderr.txt").read_text() == (plain / key / "stderr.txt").read_text()
        streams = [[{k: v for k, v in json.loads(line).items()
                     if k not in ("run_id", "audit_ref", "elapsed_s", "ts")}
                    for line in (f / key / "events.jsonl").read_text().splitlines()]
                   for f in (forked, plain)]
        assert streams[0] == streams[1]
    assert server_folders and not _leftovers(server_folders)


def test_a_forked_mission_past_its_timeout_is_wound_up_and_its_stub_goes_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spawned: list[str],
        server_folders: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    suite = stub_suite(tmp_path / "suite", {"h0": 8})
    out = tmp_path / "out"
    started = time.monotonic()
    result = invoke("run", "--suite", suite, "--out", out, "--split", "test", "--timeout", "2",
                    "--quiet")
    assert result.exit_code == 1 and time.monotonic() - started < 20
    assert spawned == ["Forked"] * 3
    capture = read_json(out / "h0" / "command.json")
    assert capture["timed_out"] is True and 2 <= capture["wall_s"] < 10
    last = json.loads((out / "h0" / "events.jsonl").read_text().splitlines()[-1])
    assert last["event"] == "mission_finished" and last["outcome"] == "incomplete"
    assert capture["exit_code"] in (0, -signal.SIGKILL)  # wound up, or killed after the grace
    assert server_folders and not _leftovers(server_folders)


@pytest.fixture(scope="module")
def stub_server() -> Iterator[ForkServer]:
    """One fork server for the relay tests: each leaves it with no child (the relay goes
    only once its server is reaped), so the next finds it as a new one."""
    server = ForkServer()
    assert server.start()
    try:
        yield server
    finally:
        server.close()


def tools_through(argv: list[str]) -> tuple[list[str], dict[str, Any]]:
    """What an MCP client of the official SDK sees of the server ``argv`` starts."""

    async def main() -> tuple[list[str], dict[str, Any]]:
        from mcp import ClientSession, StdioServerParameters, stdio_client

        env = {k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=env)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = sorted(t.name for t in (await session.list_tools()).tools)
            called = await session.call_tool("add", {"a": 12000, "b": 481})
            return listed, called.model_dump(mode="json", by_alias=True, exclude_none=True)

    return anyio.run(main)


def test_behind_the_relay_the_stub_is_the_same_mcp_server_over_stdio(
        stub_server: ForkServer, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = stub_command().split()
    direct = tools_through(argv)
    monkeypatch.setattr(client, "forked_by", stub_server.address)
    relayed = client.relayed(argv)
    assert relayed[-3:] == argv and relayed[0] == sys.executable
    assert tools_through(relayed) == direct
    assert direct[1]["structuredContent"]["result"] == 12481
    monkeypatch.setattr(client, "forked_by", "/nonexistent/socket")  # unreachable: it execs
    assert tools_through(client.relayed(argv)) == direct


def _idle_children(server: ForkServer) -> Path:
    """The file listing the server's children, once an earlier test's have gone."""
    zygote = server._proc
    assert zygote is not None
    children = Path(f"/proc/{zygote.pid}/task/{zygote.pid}/children")
    deadline = time.monotonic() + 10
    while children.read_text().split() and time.monotonic() < deadline:  # an earlier test's
        time.sleep(0.02)
    return children


def test_the_relay_passes_signals_on_and_a_killed_relay_takes_the_server_with_it(
        stub_server: ForkServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(client, "forked_by", stub_server.address)
    relay_argv = client.relayed(stub_command().split())
    children = _idle_children(stub_server)
    for sig, code in ((signal.SIGTERM, -signal.SIGTERM), (signal.SIGKILL, -signal.SIGKILL)):
        relay = subprocess.Popen(relay_argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 cwd=tmp_path, start_new_session=True)
        deadline = time.monotonic() + 10
        while not children.read_text().split() and time.monotonic() < deadline:
            time.sleep(0.02)
        (server_pid,) = map(int, children.read_text().split())
        relay.send_signal(sig)
        assert relay.wait(10) == code
        while children.read_text().split() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert children.read_text().split() == [], f"server {server_pid} outlived {sig!r}"
        assert relay.stdin is not None and relay.stdout is not None
        relay.stdin.close()
        relay.stdout.close()


def test_a_spawned_mission_forks_its_stub_from_the_server_its_environment_names(
        stub_server: ForkServer, tmp_path: Path) -> None:
    """``EVALKIT_FORKSERVER_SOCKET``: an ``evalkit mission`` no fork server made has the
    named one fork its stub (seen as that server's child while the mission runs)."""
    children = _idle_children(stub_server)
    script = tmp_path / "s.yaml"
    script.write_text("- '{\"tool\": \"mcp.sleep\", \"arguments\": {\"seconds\": 1}}'\n"
                      "- '{\"answer\": \"done\"}'\n", encoding="utf-8")
    argv = [sys.executable, "-m", "evalkit.cli", "mission", "--provider", "scripted",
            "--script", str(script), "--mcp-stdio", stub_command(), "nap"]
    env = {**os.environ, "EVALKIT_RUNS": str(tmp_path / "runs"),
           client.SOCKET_ENV: str(stub_server.address)}
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            cwd=tmp_path, env=env)
    forked: set[str] = set()
    while proc.poll() is None:
        forked.update(children.read_text().split())
        time.sleep(0.02)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    assert forked, "the stub was not forked by the named server"


def test_run_uses_the_named_server_and_leaves_it_running(
        stub_server: ForkServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        spawned: list[str], server_folders: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(client.SOCKET_ENV, str(stub_server.address))
    suite = stub_suite(tmp_path / "suite", {}, held_out=1)
    assert invoke("run", "--suite", suite, "--out", tmp_path / "out", "--quiet", "--split",
                  "test").exit_code == 0
    assert spawned == ["Forked"] and server_folders == []  # none started of its own
    assert stub_server._proc is not None and stub_server._proc.poll() is None
    monkeypatch.setenv(client.SOCKET_ENV, str(tmp_path / "no-such-socket"))
    assert invoke("run", "--suite", suite, "--out", tmp_path / "again", "--quiet", "--split",
                  "test").exit_code == 0
    assert spawned[1:] == ["Popen"]  # a server that does not answer: spawned


def test_a_forked_mission_is_refused_nothing_a_spawned_one_gets(tmp_path: Path) -> None:
    """``evalkit mission`` itself, forked: the stream on the harness's descriptor, the
    sandbox chosen as a spawn chooses it, exit code 0."""
    events_read, events_write = os.pipe()
    script = tmp_path / "s.yaml"
    script.write_text("- '{\"tool\": \"mcp.echo\", \"arguments\": {\"text\": \"hi\"}}'\n"
                      "- '{\"answer\": \"hi\"}'\n", encoding="utf-8")
    argv = [sys.executable, "-m", "evalkit.cli", "mission", "--provider", "scripted",
            "--script", str(script), "--mcp-stdio", stub_command(), "say hi",
            "--events", f"fd:{events_write}"]
    env = {**os.environ, "EVALKIT_RUNS": str(tmp_path / "runs")}
    streams = []
    with client.serving():
        for popen in (client.popen, subprocess.Popen):
            proc = popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, cwd=str(tmp_path), env=env,
                         pass_fds=(events_write,), start_new_session=True)
            assert proc.wait(60) == 0
            streams.append(proc)
        assert isinstance(streams[0], Forked)
    os.close(events_write)
    with os.fdopen(events_read, "rb") as stream:
        records = [json.loads(line) for line in stream.read().splitlines()]
    started = [r for r in records if r["event"] == "mission_started"]
    finished = [r for r in records if r["event"] == "mission_finished"]
    assert len(started) == len(finished) == 2
    assert started[0]["sandbox"] == started[1]["sandbox"]
    assert started[0]["catalogue"] == started[1]["catalogue"]
    assert [f["outcome"] for f in finished] == ["answered", "answered"]


def _leftovers(folders: list[str]) -> list[str]:
    """Processes of the fork servers listening in ``folders``, their relays or their children
    still around (those of other tests and other jobs on the host are not this test's)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone already, or not a process
            continue
        if any(folder in args for folder in folders):
            found.append(args)
    return found
