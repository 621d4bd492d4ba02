"""What an MCP server's process gets, and how long it is waited for, as the operator sets it.

Real processes throughout: ``evalkit mission`` with a scripted model, and MCP
servers over stdio through the official SDK — the shipped stub, and a
one-tool server written here that reports its own environment.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtime.conftest import STUB, read_jsonl
from tests.runtime.test_mission_cli import call, clean_env, evalkit, write_script

# Real evalkit processes and MCP servers over stdio, each spawned (``spawns``).
pytestmark = [pytest.mark.slow, pytest.mark.spawns]

ENV_SERVER = '''
import os
from mcp.server.mcpserver import MCPServer

server = MCPServer("env-echo")


@server.tool()
def env(name: str) -> str:
    """The value of one environment variable, or <unset>."""
    return os.environ.get(name, "<unset>")


server.run()
'''


def mission(tmp_path: Path, script: list[str], *flags: str,
            **env: str) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    events = tmp_path / "events.jsonl"
    done = subprocess.run(
        evalkit("look", "--script", str(write_script(tmp_path / "s.json", script)),
                "--events", str(events), "--no-supervisor", *flags),
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env=clean_env(EVALKIT_RUNS="off", EVALKIT_AUDIT="off", EVALKIT_APPROVALS="off", **env))
    return done, read_jsonl(events) if events.exists() else []


def outputs(records: list[dict]) -> dict[str, str]:
    return {r["arguments"].get("name", r["tool"]): r["output"] or r["error"]
            for r in records if r["event"] == "tool_result"}


def test_a_server_gets_only_the_named_variables(tmp_path: Path) -> None:
    server = tmp_path / "env_server.py"
    server.write_text(ENV_SERVER, encoding="utf-8")
    names = ["TZ", "LANG", "WIRE_PLAIN", "WIRE_SECRET_TOKEN", "WIRE_GIVEN", "HOME"]
    script = [call("mcp.env", name=n) for n in names] + ['{"answer": "seen"}']
    done, records = mission(
        tmp_path, script, "--mcp-stdio", f"{sys.executable} {server}",
        "--mcp-env", "TZ", "--mcp-env", "WIRE_GIVEN=from-the-flag", "--profile", "dev",
        TZ="Europe/Paris", LANG="C.UTF-8", WIRE_PLAIN="plain",
        WIRE_SECRET_TOKEN="tok-0123456789abcdef")
    assert done.returncode == 0, done.stderr
    seen = outputs(records)
    assert seen["TZ"] == "Europe/Paris"  # named: passed
    assert seen["WIRE_GIVEN"] == "from-the-flag"  # named with its value
    assert seen["LANG"] == "<unset>" and seen["WIRE_PLAIN"] == "<unset>"  # not named: withheld
    assert seen["WIRE_SECRET_TOKEN"] == "<unset>"  # credentials stay withheld unless named
    assert seen["HOME"] != "<unset>"  # the SDK's few ordinary variables


def test_the_mcp_call_timeout_is_the_operators(tmp_path: Path) -> None:
    script = [call("mcp.sleep", seconds=5), '{"answer": "waited"}']
    done, records = mission(tmp_path, script, "--mcp-stdio", STUB, "--mcp-call-timeout", "1")
    assert done.returncode == 0, done.stderr
    [result] = [r for r in records if r["event"] == "tool_result"]
    assert result["ok"] is False and "no answer within 1 s" in result["error"]
    assert records[-1]["outcome"] == "answered"


def test_the_mcp_start_timeout_is_the_operators(tmp_path: Path) -> None:
    # Reads what it is sent and never answers; it ends when its stdin does, so the client's
    # close is not the SDK's two-second wait for a server that ignores its stdin.
    mute = tmp_path / "mute.py"
    mute.write_text("import sys\nsys.stdin.buffer.read()\n", encoding="utf-8")
    done, _ = mission(tmp_path, ['{"answer": "x"}'], "--mcp-stdio", f"{sys.executable} {mute}",
                      "--mcp-start-timeout", "1")
    assert done.returncode == 2, done.stderr
    assert "no answer to 'initialize' within 1 s" in done.stderr
    assert done.stderr.count("Error:") == 1 and "Traceback" not in done.stderr


def test_an_mcp_env_name_that_is_no_name_is_a_usage_error(tmp_path: Path) -> None:
    done, _ = mission(tmp_path, ['{"answer": "x"}'], "--mcp-env", "=oops")
    assert done.returncode == 2
    assert done.stderr.strip() == ("Error: --mcp-env '=oops': give NAME or NAME=VALUE, NAME an "
                                   "environment variable name")
    assert json.dumps(done.stderr).count("Error") == 1


def test_a_skill_names_variables_too_and_the_flag_wins(tmp_path: Path) -> None:
    """A skill's ``mcp_env:`` passes what its servers need (a timezone, a locale) without
    the operator naming it on every command; ``--mcp-env`` has the last word."""
    server = tmp_path / "env_server.py"
    server.write_text(ENV_SERVER, encoding="utf-8")
    skill = tmp_path / "SKILL.md"
    skill.write_text("---\nname: envy\ndescription: reads the environment\n"
                     "mcp_env: [TZ, WIRE_GIVEN=from-the-skill, WIRE_BOTH=skill]\n---\nLook.\n",
                     encoding="utf-8")
    names = ["TZ", "WIRE_GIVEN", "WIRE_BOTH", "LANG"]
    script = [call("mcp.env", name=n) for n in names] + ['{"answer": "seen"}']
    done, records = mission(
        tmp_path, script, "--mcp-stdio", f"{sys.executable} {server}", "--skill", str(skill),
        "--mcp-env", "WIRE_BOTH=flag", "--profile", "dev", TZ="Asia/Tokyo", LANG="C.UTF-8")
    assert done.returncode == 0, done.stderr
    seen = outputs(records)
    assert seen["TZ"] == "Asia/Tokyo" and seen["WIRE_GIVEN"] == "from-the-skill"
    assert seen["WIRE_BOTH"] == "flag" and seen["LANG"] == "<unset>"


def test_a_skill_mcp_env_that_is_not_a_list_of_names_is_one_sentence(tmp_path: Path) -> None:
    skill = tmp_path / "SKILL.md"
    skill.write_text("---\nname: envy\ndescription: d\nmcp_env: TZ\n---\nLook.\n",
                     encoding="utf-8")
    done, _ = mission(tmp_path, ['{"answer": "x"}'], "--skill", str(skill))
    assert done.returncode == 2, done.stderr
    assert "'mcp_env' must be a list of NAME or NAME=VALUE" in done.stderr
    assert "Traceback" not in done.stderr
