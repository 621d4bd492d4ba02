"""The shipped recorded agents, end to end: ``evalkit run`` spawns them against a local
chat-completions server, scores them, and the recording re-scores with the network refused.

The agents are run as a user runs them — ``evalkit run … -- python examples/X.py`` in a
process of its own — so the harness's ``EVALKIT_EVENTS`` and ``EVALKIT_RUNS`` are what
the recorder reads. The server is ``tests/runtime/chat_server.py``: a real socket on
127.0.0.1, replies queued as a model would give them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._offline import blocking_site
from tests.runtime.chat_server import ChatServer

pytest.importorskip("openai")

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-planted-example-key-0123456789abcdef"
USAGE = {"prompt_tokens": 21, "completion_tokens": 7, "total_tokens": 28}
SUITE = """\
name: recorded
tools: [multiply]
missions:
  - key: times
    flag: chaining
    prompt: What is 17 times 23?
    expects_outcome: answered
    expects_tools: [multiply]
    answer_must_match: ['\\b391\\b']
    because: the simplest chain, a product read off a tool
"""


def evalkit(*args: str | Path, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evalkit.cli", *map(str, args)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                          capture_output=True, text=True, timeout=300, check=False)


def queue_times(server: ChatServer) -> None:
    server.reply(tool_calls=[{"id": "call_1", "type": "function", "function": {
        "name": "multiply", "arguments": '{"a": 17, "b": 23}'}}], usage=USAGE)
    server.reply("17 times 23 is 391.", usage=USAGE)


def run_example(agent: str, tmp_path: Path) -> tuple[Path, Path]:
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE, encoding="utf-8")
    out = tmp_path / "out"
    with ChatServer() as server:
        queue_times(server)
        done = evalkit("run", "--suite", suite, "--out", out, "--", sys.executable,
                       ROOT / "examples" / agent,
                       env={"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": KEY,
                            "OPENAI_MODEL": "m-local"})
        assert done.returncode == 0, done.stderr
        assert "[1/1] PASS  times" in done.stderr, done.stderr
        assert len(server.requests) == 2
    return suite, out


def assert_recorded_and_rescored_offline(suite: Path, out: Path, tmp_path: Path) -> None:
    (run,) = (out / "times" / "runs").iterdir()
    model = [json.loads(line) for line in (run / "model.jsonl").read_text().splitlines()]
    tools = [json.loads(line) for line in (run / "tools.jsonl").read_text().splitlines()]
    assert [line["reply"]["usage"] for line in model] == [USAGE, USAGE]
    assert model[0]["reply"]["tool_calls"][0]["name"] == "multiply"
    assert tools[1]["tool"] == "multiply" and tools[1]["result"]["stdout"] in ("391", "391.0")
    captured = (out / "times" / "events.jsonl").read_text()
    assert captured.splitlines()[0] == json.dumps(json.loads(captured.splitlines()[0]),
                                                  ensure_ascii=False, separators=(",", ":"))
    stream = [json.loads(line) for line in captured.splitlines()]
    stored = [json.loads(line)["record"] for line in (run / "events.jsonl").read_text()
              .splitlines()]
    assert stream == stored and stream[0]["run_id"] == run.name
    for path in out.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    # No server, no network: the recording is scored, twice, to the same bytes.
    offline = {"PYTHONPATH": f"{blocking_site(tmp_path / 'offline')}:{ROOT}"}
    reports = []
    for n in (1, 2):
        scored = evalkit("score", "--suite", suite, "--runs", out, "--report",
                         tmp_path / f"again{n}", env=offline)
        assert scored.returncode == 0, scored.stderr
        reports.append((tmp_path / f"again{n}" / "report.json").read_bytes())
    assert reports[0] == reports[1]
    verdict = json.loads(reports[0])["verdicts"][0]
    assert verdict["key"] == "times" and verdict["passed"] is True
    assert evalkit("verify", out, env=offline).returncode == 0
    assert evalkit("diff", tmp_path / "again1", tmp_path / "again2", env=offline
                   ).returncode == 0
    page = tmp_path / "report.html"
    assert evalkit("report", out, "-o", page, env=offline).returncode == 0
    html = page.read_text("utf-8")
    assert "17 times 23 is 391." in html and "multiply" in html


@pytest.mark.slow  # evalkit run spawns the agent; score and verify run as processes
def test_the_openai_example_is_run_scored_and_rescored_offline(tmp_path: Path) -> None:
    suite, out = run_example("openai_agent.py", tmp_path)
    assert_recorded_and_rescored_offline(suite, out, tmp_path)
    # And replayed: the agent runs again under evalkit run, its client served the recording,
    # no server and no network; EVALKIT_REPLAY names the whole output folder.
    again = tmp_path / "replayed"
    done = evalkit("run", "--suite", suite, "--out", again, "--", sys.executable,
                   ROOT / "examples" / "openai_agent.py",
                   env={"EVALKIT_REPLAY": str(out), "OPENAI_API_KEY": KEY,
                        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
                        "PYTHONPATH": f"{blocking_site(tmp_path / 'offline')}:{ROOT}"})
    assert done.returncode == 0 and "[1/1] PASS  times" in done.stderr, done.stderr
    (source,) = (out / "times" / "runs").iterdir()
    (replay,) = (again / "times" / "runs").iterdir()
    meta = json.loads((replay / "meta.json").read_text())["meta"]
    assert meta["replay_of"] == source.name and meta["drift"]["first"] is None


def test_the_openai_example_is_a_forty_line_agent() -> None:
    text = (ROOT / "examples" / "openai_agent.py").read_text("utf-8")
    assert len(text.splitlines()) <= 42
    assert "wrap_openai" in text and "@record.tool" in text


@pytest.mark.slow  # evalkit run spawns the agent; score and verify run as processes
def test_the_langgraph_example_is_run_scored_and_rescored_offline(tmp_path: Path) -> None:
    pytest.importorskip("langgraph", reason="the langgraph extra: pip install -e '.[dev]'")
    pytest.importorskip("langchain_openai", reason="the langgraph extra")
    suite, out = run_example("langgraph_agent.py", tmp_path)
    assert_recorded_and_rescored_offline(suite, out, tmp_path)
