"""``evalkit mission`` as a harness sees it: flags, exit codes, the stream, signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalkit.contract import CLI_FLAGS, conforms
from evalkit.runtime.command import NOT_YET, mission_command
from evalkit.store.reader import read_stream
from tests import _forked as forked
from tests._env import without_settings
from tests.runtime.conftest import STUB, read_jsonl

SLOW_CODE = "import time\nprint('started', flush=True)\ntime.sleep(30)\n"


def write_script(path: Path, items: list[Any]) -> Path:
    path.write_text(json.dumps(items), encoding="utf-8")
    return path


def call(tool: str, **arguments: Any) -> str:
    return json.dumps({"tool": tool, "arguments": arguments})


clean_env = without_settings


def evalkit(*args: str) -> list[str]:
    return [sys.executable, "-m", "evalkit.cli", "mission", *args]


# -- the parser ------------------------------------------------------------------------------


def test_every_contract_flag_is_accepted_by_the_parser() -> None:
    declared = {opt for param in mission_command.params for opt in param.opts}
    for flag in CLI_FLAGS:
        assert flag["flag"] in declared, flag["flag"]
        value = {"--protocol": ["native"]}.get(flag["flag"], ["1"]) if flag["value"] else []
        ctx = mission_command.make_context("mission", ["objective", flag["flag"], *value])
        param = flag["flag"].lstrip("-").replace("-", "_")
        assert ctx.params[param] not in (None, False, ()), flag["flag"]
        repeated = mission_command.make_context(
            "mission", ["o", flag["flag"], *value, flag["flag"], *value])
        if flag["repeatable"]:
            assert len(repeated.params[param]) == 2


@pytest.mark.parametrize("name", sorted(NOT_YET))
def test_a_flag_whose_feature_has_not_landed_refuses_in_one_sentence(name: str) -> None:
    flag = NOT_YET[name]
    spec = next(f for f in CLI_FLAGS if f["flag"] == flag)
    args = ["do it", flag, *(["1"] if spec["value"] else [])]
    result = CliRunner().invoke(mission_command, args, env={"EVALKIT_RUNS": "off"})
    assert result.exit_code == 2
    assert result.output.strip() == f"Error: {flag} is not available yet."


@pytest.mark.parametrize(("args", "env", "said"), [
    ([], {}, "an objective is required"),
    (["x"], {}, "--provider openai needs --model"),
    (["x", "--provider", "scripted"], {}, "needs --script"),
    (["x", "--provider", "replay"], {}, "--provider replay needs --replay RUN"),
    (["x", "--provider", "nope"], {}, "unknown provider 'nope'"),
    (["x", "--script", "{script}", "--events", "/no/such/dir/e.jsonl"], {},
     "cannot open event sink"),
    (["x", "--script", "{script}", "--profile", "root"], {}, "unknown profile 'root'"),
    (["x", "--script", "{script}"], {"EVALKIT_SANDBOX": "maybe"}, "is not bwrap or none"),
    (["x", "--script", "{script}", "--mission-steps", "-1"], {}, "--mission-steps must be"),
    (["x", "--script", "/no/such/script.yaml"], {}, "cannot read script"),
    (["x", "--script", "{script}", "--secret", "EVALKIT_TEST_UNSET"], {"EVALKIT_TEST_UNSET": None},
     "Error: --secret EVALKIT_TEST_UNSET: no environment variable EVALKIT_TEST_UNSET is set"),
    (["x", "--script", "{script}", "--secret", "EVALKIT_TEST_PIN"], {"EVALKIT_TEST_PIN": "1234"},
     "--secret EVALKIT_TEST_PIN: its value is too short"),
])
def test_usage_errors_exit_2_with_one_sentence(tmp_path: Path, args: list[str],
                                               env: dict[str, str], said: str) -> None:
    script = write_script(tmp_path / "s.json", ['{"answer": "x"}'])
    args = [a.replace("{script}", str(script)) for a in args]
    result = CliRunner().invoke(mission_command, args,
                                env={"EVALKIT_RUNS": "off", "EVALKIT_MODEL": None, **env})
    assert result.exit_code == 2, result.output
    assert said in result.output
    assert "mission_started" not in result.output  # refused before any event


@pytest.mark.slow
def test_help_imports_no_sdk() -> None:
    """Start-up speed itself is measured by benchmarks/bench_startup.py, not here."""
    probe = ("import sys\nfrom evalkit.cli import main\nsys.argv = ['evalkit', 'mission', "
             "'--help']\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in ('openai', 'mcp', 'jsonschema', 'yaml') "
             "if m in sys.modules), file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    assert "--mission-steps" in done.stdout and done.stderr.strip() == "[]"


# -- whole missions ----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_mission_streams_to_an_inherited_fd_and_records(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.json", [
        call("mcp.add", a=2, b=3), call("mcp.echo", text="five"),
        {"content": '{"answer": "2 + 3 = 5"}', "usage": {"prompt_tokens": 7}}])
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        evalkit("add 2 and 3", "--script", str(script), "--mcp-stdio", STUB,
                "--events", f"fd:{write_end}", "--mission-steps", "5"),
        cwd=tmp_path, env=clean_env(EVALKIT_RUNS=str(tmp_path / "runs")),
        pass_fds=(write_end,), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.close(write_end)
    with os.fdopen(read_end, encoding="utf-8") as stream:
        records = [json.loads(line) for line in stream]
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert all(conforms(r) == [] for r in records)
    assert records[-1]["outcome"] == "answered"
    assert records[-1]["usage"] == {"prompt_tokens": 7, "calls": 3}
    assert "-> mcp.add" in out and "2 + 3 = 5" in out and records[0]["run_id"] in out
    run_dir = tmp_path / "runs" / records[0]["run_id"]
    assert read_stream(run_dir).records == records
    assert len(read_jsonl(run_dir / "model.jsonl")) == 3
    assert len(read_jsonl(run_dir / "tools.jsonl")) == 3
    meta = json.loads((run_dir / "meta.json").read_text())["meta"]
    assert meta["flags"]["mcp_stdio"] == [STUB] and "api_key" not in meta["flags"]


def test_events_on_stdout_move_the_prose_to_stderr(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.json", ['{"answer": "hello"}'])
    result = CliRunner().invoke(
        mission_command, ["greet", "--script", str(script), "--events", "-", "--unsandboxed",
                          "--profile", "dev"], env={"EVALKIT_RUNS": "off", "EVALKIT_AUDIT": "off"})
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["event"] for r in records] == ["mission_started", "step_started", "answer",
                                             "mission_finished"]
    started = records[0]
    assert started["sandbox"] == "none" and started["profile"] == "dev"
    assert "run_id" not in started
    assert "answer:\nhello" in result.stderr and started["audit_ref"] is None


@pytest.mark.slow
def test_zero_events_written_exits_nonzero_with_a_reason(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.json", ['{"answer": "lost"}'])
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody will ever read: every write fails
    done = forked.run(
        evalkit("x", "--script", str(script), "--events", f"fd:{write_end}"),
        cwd=tmp_path, env=clean_env(EVALKIT_RUNS="off"), pass_fds=(write_end,),
        capture_output=True, text=True, timeout=60)
    os.close(write_end)
    assert done.returncode == 1
    assert "no event was written: the event sink refused every write" in done.stderr


def _start_slow_mission(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    script = write_script(tmp_path / "s.json", [
        call("run_python_code", code=SLOW_CODE), '{"answer": "never"}'])
    events = tmp_path / "events.jsonl"
    proc = subprocess.Popen(
        evalkit("wait a while", "--script", str(script), "--events", str(events),
                "--profile", "dev"),
        cwd=tmp_path, env=clean_env(EVALKIT_RUNS=str(tmp_path / "runs")),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if events.exists() and '"tool_call"' in events.read_text():
            time.sleep(0.3)  # let the slow tool actually start
            return proc, events
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"the mission never reached its tool call: {proc.communicate()}")


@pytest.mark.slow
def test_sigterm_winds_the_mission_up(tmp_path: Path) -> None:
    proc, events = _start_slow_mission(tmp_path)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert time.monotonic() - started < 10
    assert proc.returncode == 0, err
    records = read_jsonl(events)
    assert all(conforms(r) == [] for r in records)
    assert records[-1]["event"] == "mission_finished"
    assert records[-1]["outcome"] == "incomplete" and records[-1]["reason"] == "cancelled"
    assert read_stream(tmp_path / "runs" / records[0]["run_id"]).records == records
    assert "cancelled" in out


@pytest.mark.slow
def test_kill_9_leaves_a_readable_run_directory(tmp_path: Path) -> None:
    proc, events = _start_slow_mission(tmp_path)
    proc.kill()
    proc.communicate(timeout=20)
    [run_dir] = (tmp_path / "runs").iterdir()
    read = read_stream(run_dir)
    assert read.torn <= 1 and read.non_object == 0
    assert [r["event"] for r in read.records] == ["mission_started", "step_started",
                                                  "tool_call"]
    assert all(conforms(r) == [] for r in read.records)
    assert read.records == read_jsonl(events)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["run_id"] == run_dir.name
    assert len(read_jsonl(run_dir / "model.jsonl")) == 1


def test_the_openai_provider_is_wired_from_flags_and_environment(tmp_path: Path) -> None:
    from tests.runtime.chat_server import ChatServer

    with ChatServer() as server:
        server.reply(None, tool_calls=[{"id": "a1", "type": "function", "function": {
            "name": "mission_answer", "arguments": '{"text": "over http"}'}}])
        result = CliRunner().invoke(
            mission_command, ["ask", "--provider", "openai", "--no-stream", "--protocol",
                              "native", "--events", str(tmp_path / "e.jsonl")],
            env={"EVALKIT_RUNS": "off", "EVALKIT_AUDIT": "off", "EVALKIT_MODEL": "m-env",
                 "EVALKIT_API_BASE": server.base_url, "EVALKIT_API_KEY": "sk-local-test-key"})
        assert result.exit_code == 0, result.output
        request = server.requests[0]
    assert request["model"] == "m-env" and "stream" not in request
    records = read_jsonl(tmp_path / "e.jsonl")
    assert records[0]["protocol"] == "native"
    assert records[-1]["outcome"] == "answered" and "over http" in result.stdout
