"""The shipped recorded agents, end to end: ``evalkit run`` spawns them against a local
chat-completions server, scores them, and the recording re-scores with the network refused;
then each agent is replayed under ``evalkit run`` with no server and no network.

The agents are run as a user runs them — ``evalkit run … -- python examples/X.py`` in a
process of its own — so the harness's ``EVALKIT_EVENTS`` and ``EVALKIT_RUNS`` are what
the recorder reads. The server is ``tests/runtime/chat_server.py``: a real socket on
127.0.0.1, replies queued as a model would give them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests._multiply import ROOT, USAGE, evalkit, queue_times, times_suite
from tests._offline import blocking_site
from tests.runtime.chat_server import ChatServer

pytest.importorskip("openai")

KEY = "sk-planted-example-key-0123456789abcdef"
SUITE = times_suite("recorded")


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


def replay_example(agent: str, suite: Path, out: Path, tmp_path: Path) -> Path:
    """``agent`` run again under ``evalkit run``, its client served the recording in ``out``
    (``EVALKIT_REPLAY`` names the whole output folder), with no server and no network."""
    again = tmp_path / "replayed"
    done = evalkit("run", "--suite", suite, "--out", again, "--", sys.executable,
                   ROOT / "examples" / agent,
                   env={"EVALKIT_REPLAY": str(out), "OPENAI_API_KEY": KEY,
                        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_MODEL": "m-local",
                        "PYTHONPATH": f"{blocking_site(tmp_path / 'offline')}:{ROOT}"})
    assert done.returncode == 0 and "[1/1] PASS  times" in done.stderr, done.stderr
    return again


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


@pytest.mark.slow  # evalkit run spawns the agent twice; score runs as a process
def test_the_langgraph_example_is_replayed_with_no_server(tmp_path: Path) -> None:
    pytest.importorskip("langgraph", reason="the langgraph extra: pip install -e '.[dev]'")
    pytest.importorskip("langchain_openai", reason="the langgraph extra")
    suite, out = run_example("langgraph_agent.py", tmp_path)
    again = replay_example("langgraph_agent.py", suite, out, tmp_path)
    (source,) = (out / "times" / "runs").iterdir()
    (replay,) = (again / "times" / "runs").iterdir()
    meta = json.loads((replay / "meta.json").read_text())["meta"]
    assert meta["replay_of"] == source.name and meta["outcome"] == "answered"
    assert meta["drift"] == {"first": None, "calls": 2, "served": 2, "recorded": 2}
    assert meta["ran_off_end"] is None
    # Each model call recorded once (by wrap_openai, not the handler too), in both runs.
    for run in (source, replay):
        model = jsonl(run / "model.jsonl")
        assert len(model) == 2 and {m["request"]["extra"]["provider"] for m in model} == \
            {"openai"}
    # The same answer and the same tool calls, with the same results.
    answers = [[r["record"]["text"] for r in jsonl(run / "events.jsonl")
                if r["record"]["event"] == "answer"] for run in (source, replay)]
    assert answers[0] == answers[1] == ["17 times 23 is 391."]
    calls = [[(t["tool"], t["arguments"], t["result"]) for t in jsonl(run / "tools.jsonl")
              if t["call"]] for run in (source, replay)]
    assert calls[0] == calls[1] and [c[0] for c in calls[0]] == ["multiply"]
    # Scored with no network: the replay earns the recording's verdict.
    offline = {"PYTHONPATH": f"{blocking_site(tmp_path / 'offline')}:{ROOT}"}
    verdicts = []
    for runs, report in ((out, tmp_path / "scored"), (again, tmp_path / "rescored")):
        scored = evalkit("score", "--suite", suite, "--runs", runs, "--report", report,
                         env=offline)
        assert scored.returncode == 0, scored.stderr
        verdict = json.loads((report / "report.json").read_text())["verdicts"][0]
        verdicts.append({k: verdict[k] for k in ("key", "passed", "outcome", "reasons")
                         if k in verdict})
    assert verdicts[0] == verdicts[1] and verdicts[0]["passed"] is True
