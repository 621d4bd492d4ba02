"""A recording made against a real endpoint replays with the endpoint gone and no network.

The recording is made through the openai SDK against the local chat server
(a real socket, streaming). The server is then stopped and ``evalkit replay``
runs in a child process whose ``socket.socket`` refuses every non-Unix
socket (a ``sitecustomize`` on its path) — and, where the kernel allows an
unprivileged network namespace, inside one with no interfaces at all.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.runtime.mission import MissionSettings
from tests import _forked as forked
from tests._offline import blocking_site
from tests.replay.conftest import STUB, Lab, digest, read_jsonl, without_ids
from tests.runtime.chat_server import ChatServer


def _blocked_env(lab: Lab) -> dict[str, str]:
    site = blocking_site(lab.root / "blocked-site")
    path = os.pathsep.join([str(site), str(Path.cwd()), os.environ.get("PYTHONPATH", "")])
    env = lab.env(PYTHONPATH=path)
    for name in ("OPENAI_API_KEY", "EVALKIT_API_KEY", "EVALKIT_API_BASE", "EVALKIT_MODEL"):
        env.pop(name, None)
    return env


def _record_over_http(lab: Lab) -> tuple[str, Path]:
    with ChatServer() as server:
        server.reply(None, tool_calls=[
            {"id": "c1", "type": "function",
             "function": {"name": "mcp_add", "arguments": '{"a": 20, "b": 22}'}},
            {"id": "c2", "type": "function",
             "function": {"name": "mcp_echo", "arguments": '{"text": "hi"}'}}],
            usage={"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39})
        server.reply(None, tool_calls=[{"id": "c3", "type": "function", "function": {
            "name": "mission_answer", "arguments": '{"text": "20 + 22 = 42"}'}}])
        done = lab.launch(MissionSettings(
            objective="add 20 and 22", provider="openai", model="m", api_base=server.base_url,
            api_key="sk-hermetic-test-key-0123456789", protocol="native", mcp_stdio=(STUB,)))
        assert len(server.requests) == 2 and server.requests[0]["stream"] is True
    assert done.meta["outcome"] == "answered"
    return str(done.launched.outcome.run_id), done.run_dir


@pytest.mark.slow
def test_replay_runs_with_the_endpoint_gone_and_sockets_blocked(lab: Lab) -> None:
    run_id, run_dir = _record_over_http(lab)
    before = digest(run_dir)
    env = _blocked_env(lab)
    control = subprocess.run(
        [sys.executable, "-c", "import socket; socket.create_connection(('127.0.0.1', 9))"],
        env=env, capture_output=True, text=True, timeout=60)
    assert control.returncode != 0 and "network blocked" in control.stderr
    events = lab.root / "replay.jsonl"
    done = forked.run(
        [sys.executable, "-m", "evalkit.cli", "replay", run_id, "--events", str(events)],
        cwd=lab.root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "drift: none" in done.stdout
    replayed = read_jsonl(events)
    original = [json.loads(line)["record"]
                for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert without_ids(replayed) == without_ids(original)
    assert replayed[-1]["outcome"] == "answered"
    assert digest(run_dir) == before


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("unshare") is None, reason="util-linux unshare is missing")
def test_replay_runs_inside_a_network_namespace_with_no_interfaces(lab: Lab) -> None:
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("unprivileged network namespaces are not allowed here")
    run_id, _ = _record_over_http(lab)
    env = _blocked_env(lab)
    done = subprocess.run(
        ["unshare", "-rn", sys.executable, "-m", "evalkit.cli", "mission", "--replay", run_id],
        cwd=lab.root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "mission answered after 2 step(s)" in done.stdout
    assert "drift: none" in done.stdout
