"""How a recorded mission ends when the world does not cooperate: a SIGTERM (the harness's
timeout), a stream the wire cuts, work on a thread the ``with`` block did not start."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import evalkit.record as record

ROOT = Path(__file__).resolve().parents[2]
WAITING_AGENT = """\
import sys, time
import evalkit.record as record

with record.mission("wait for ever", runs=sys.argv[1]) as m:
    print("ready", flush=True)
    time.sleep(60)
"""


def records_of(runs: Path) -> list[dict[str, Any]]:
    (events,) = runs.rglob("events.jsonl")
    return [json.loads(line)["record"] for line in events.read_text("utf-8").splitlines()]


@pytest.mark.slow  # a Python process of its own
def test_sigterm_winds_the_mission_up_as_the_contract_says(tmp_path: Path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(WAITING_AGENT, encoding="utf-8")
    proc = subprocess.Popen([sys.executable, str(agent), str(tmp_path / "runs")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                 "HOME": str(tmp_path), "EVALKIT_HOME": str(tmp_path)})
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err
    finished = records_of(tmp_path / "runs")[-1]
    assert (finished["event"], finished["outcome"], finished["reason"]) == \
        ("mission_finished", "incomplete", "cancelled")


def test_a_tool_run_on_another_thread_lands_in_the_open_mission(tmp_path: Path) -> None:
    @record.tool(name="threaded.echo")
    def echo(text: str) -> str:
        return text

    with record.mission("echo on a thread", runs=tmp_path) as m:
        worker = threading.Thread(target=echo, args=("hello",))
        worker.start()
        worker.join()
        m.answer("hello")
    results = [r for r in records_of(tmp_path) if r["event"] == "tool_result"]
    assert [(r["tool"], r["output"]) for r in results] == [("threaded.echo", "hello")]


@pytest.mark.slow
def test_a_stream_the_wire_cuts_is_recorded_as_a_transport_fault(llmock: Any,
                                                                  tmp_path: Path) -> None:
    openai = pytest.importorskip("openai")
    llmock.reply("a reply that never finishes", times=None)
    llmock.truncate(after_chunks=2)
    client = record.wrap_openai(openai.OpenAI(base_url=llmock.base_url(), api_key="k",
                                              max_retries=0))
    with record.mission("ask", runs=tmp_path) as m:
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        m.answer(text)
    (log,) = tmp_path.rglob("model.jsonl")
    (line,) = [json.loads(x) for x in log.read_text("utf-8").splitlines()]
    assert line["reply"]["fault"] == "transport"
    assert "ended before a finish reason after" in line["reply"]["error"]
    assert records_of(tmp_path)[-1]["usage"] == {"calls": 0}
