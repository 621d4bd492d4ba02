"""``evalkit mission`` against a misbehaving endpoint, as an operator runs it.

A real process against ``llmock`` (PyPI's OpenAI-API mock, on 127.0.0.1 via
its pytest fixture): a configuration fault is an ``Error:`` line naming the
URL and the model and exit 4, at once; the bounds an operator sets
(``--stream-idle-timeout``, ``--mission-seconds``) hold while the endpoint
stalls; the key reaches neither stderr nor any file.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from evalkit.eval.taxonomy import INFRA, categorize
from evalkit.runtime.command import EXIT_CONFIGURATION
from tests import _forked as forked
from tests.runtime.conftest import read_jsonl
from tests.runtime.test_mission_cli import clean_env, evalkit

pytestmark = pytest.mark.slow  # each test starts evalkit (and a server) as processes

pytest.importorskip("llmock", reason="llmock is a dev dependency: pip install -e '.[dev]'")

KEY = "sk-wire-cli-0123456789abcdefghijklmnop"
ANSWER = '{"answer": "all good"}'


def run_mission(tmp_path: Path, base_url: str, *flags: str, model: str = "m-cli",
                timeout: float = 60,
                **env: str) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    events = tmp_path / "events.jsonl"
    done = forked.run(
        evalkit("ask", "--provider", "openai", "--model", model, "--api-base", base_url,
                "--events", str(events), *flags),
        cwd=tmp_path, capture_output=True, text=True, timeout=timeout,
        env=clean_env(EVALKIT_RUNS=str(tmp_path / "runs"), EVALKIT_AUDIT="off",
                      EVALKIT_APPROVALS="off", EVALKIT_API_KEY=KEY, **env))
    return done, read_jsonl(events) if events.exists() else []


def no_key_in(tmp_path: Path, done: subprocess.CompletedProcess[str]) -> None:
    assert KEY not in done.stderr and KEY not in done.stdout
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(encoding="utf-8", errors="replace"), path


@pytest.mark.parametrize(("status", "model"), [(401, "m-cli"), (404, "no-such-model"),
                                               (400, "m-cli"), (403, "m-cli")])
def test_a_configuration_fault_is_one_error_line_and_exit_4(llmock: Any, tmp_path: Path,
                                                            status: int, model: str) -> None:
    llmock.fail(status, times=None)
    started = time.monotonic()
    done, records = run_mission(tmp_path, llmock.base_url(), model=model)
    assert done.returncode == EXIT_CONFIGURATION == 4, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, done.stderr
    assert f"{llmock.base_url()}/chat/completions" in errors[0]
    assert f"model {model!r}" in errors[0] and f"HTTP {status}" in errors[0]
    assert "Traceback" not in done.stderr
    assert len(llmock.requests) == 1  # no retries for it
    assert time.monotonic() - started < 20
    assert records[-1]["event"] == "mission_finished" and records[-1]["outcome"] == "incomplete"
    assert records[-1]["reason"].startswith("configuration fault: ")
    [run] = list((tmp_path / "runs").iterdir())
    category, infra = categorize({"passed": False, "kpis": {"records": len(records)}},
                                 events=run / "events.jsonl")
    assert category == INFRA and infra is not None  # the setup's to fix, not the agent's
    assert infra.startswith(f"configuration_fault: {llmock.base_url()}/chat/completions")
    no_key_in(tmp_path, done)


def test_a_transport_fault_that_clears_is_no_error(llmock: Any, tmp_path: Path) -> None:
    llmock.reply(ANSWER, times=2).truncate(after_chunks=2)
    done, records = run_mission(tmp_path, llmock.base_url())
    assert done.returncode == 0, done.stderr
    assert records[-1]["outcome"] == "answered"
    assert [r["state"] for r in records if r["event"] == "model_state"] == ["failed", "loaded"]
    no_key_in(tmp_path, done)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_the_stream_idle_timeout_cuts_a_stall(llmock: Any, tmp_path: Path, how: str) -> None:
    llmock.reply(ANSWER, times=2).stall(after_chunks=1, seconds=30)
    started = time.monotonic()
    if how == "flag":
        done, records = run_mission(tmp_path, llmock.base_url(), "--stream-idle-timeout", "1")
    else:
        done, records = run_mission(tmp_path, llmock.base_url(),
                                    EVALKIT_STREAM_IDLE_TIMEOUT="1")
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 20
    assert records[-1]["outcome"] == "answered"
    failed = next(r for r in records if r["event"] == "model_state")
    assert "no byte for 1 s (--stream-idle-timeout)" in failed["detail"]


def test_the_request_timeout_bounds_a_whole_reply(llmock: Any, tmp_path: Path) -> None:
    """A whole (unstreamed) reply is silent until done: --request-timeout is its bound."""
    llmock.reply(ANSWER, times=2).delay(30)
    started = time.monotonic()
    done, records = run_mission(tmp_path, llmock.base_url(), "--no-stream",
                                EVALKIT_REQUEST_TIMEOUT="1")
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 20
    assert records[-1]["outcome"] == "answered"
    failed = next(r for r in records if r["event"] == "model_state")
    assert "no reply within 1 s (--request-timeout)" in failed["detail"]


@pytest.mark.slow
def test_mission_seconds_bound_the_whole_wait_on_a_stalled_stream(llmock: Any,
                                                                  tmp_path: Path) -> None:
    """A 30 s stall under a 2 s mission: the run ends near 2 s, budget_exhausted."""
    llmock.reply(ANSWER, times=1).stall(after_chunks=1, seconds=30)
    started = time.monotonic()
    done, records = run_mission(tmp_path, llmock.base_url(), "--mission-seconds", "2")
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert records[-1]["outcome"] == "budget_exhausted"
    assert records[-1]["budget"]["which"] == "seconds"
    assert 2 <= records[-1]["elapsed_s"] < 3.5 and took < 10, (took, records[-1])


@pytest.mark.parametrize(("flag", "value"), [("--request-timeout", "0"),
                                             ("--stream-idle-timeout", "-1"),
                                             ("--mcp-start-timeout", "0"),
                                             ("--mcp-call-timeout", "0")])
def test_a_bound_that_is_not_positive_is_a_usage_error(tmp_path: Path, flag: str,
                                                       value: str) -> None:
    done, _ = run_mission(tmp_path, "http://127.0.0.1:9/v1", flag, value)
    assert done.returncode == 2
    assert done.stderr.strip() == f"Error: {flag} must be more than 0 seconds"


# -- every chaos mode to the end, as an operator sees it ------------------------------------------
#
# Each mode never clears: the run ends on it, as it would against an endpoint that stays
# sick. ``--mission-seconds 3`` bounds the retries (the backoff's next wait would overrun
# it), so a case takes about two seconds. The body llmock cannot send (HTML with status
# 200, JSON that is no chat completion) comes from this folder's raw-bytes server.

HTML = b"<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>proxy</body></html>"


def _sick(llmock: Any, mode: str) -> None:
    llmock.reply(ANSWER, times=None)
    if mode == "truncate":
        llmock.truncate(after_chunks=2, times=None)
    elif mode == "malformed":
        llmock.corrupt(after_chunks=1, times=None)
    elif mode == "429":
        llmock.rate_limit(times=None, retry_after=0.4)
    elif mode in ("500", "503"):
        llmock.fail(int(mode), times=None)
    elif mode == "stall":
        llmock.stall(after_chunks=1, seconds=30, times=None)


@pytest.mark.parametrize(("mode", "said"), [
    ("truncate", "ended its stream before a finish reason"),
    ("malformed", "streamed a chunk that is not JSON"),
    ("429", "HTTP 429"),
    ("500", "HTTP 500"),
    ("503", "HTTP 503"),
    ("stall", "no byte for 0.5 s (--stream-idle-timeout)"),
    ("html", "with a body that is not JSON (text/html"),
    ("no-choices", "with JSON that is not a chat completion (no choices"),
])
def test_a_transport_fault_that_never_clears_is_infrastructure_and_exit_0(
        llmock: Any, tmp_path: Path, mode: str, said: str) -> None:
    """Exit 0: the mission ran (CONTRACT.md's exit contract); the stream says the wire
    failed, and the scorer's taxonomy files the run as infrastructure, not the agent's."""
    from tests.runtime.chat_server import ChatServer

    with ChatServer() as server:
        if mode in ("html", "no-choices"):
            body = HTML if mode == "html" else b'{"object": "error", "detail": "warming up"}'
            kind = "text/html; charset=utf-8" if mode == "html" else "application/json"
            for _ in range(6):
                server.raw(body, content_type=kind)
            url = server.base_url
        else:
            _sick(llmock, mode)
            url = llmock.base_url()
        started = time.monotonic()
        done, records = run_mission(tmp_path, url, "--mission-seconds", "3",
                                    "--stream-idle-timeout", "0.5")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert time.monotonic() - started < 20
    finished = records[-1]
    assert finished["event"] == "mission_finished" and finished["outcome"] == "incomplete"
    reason = finished["reason"]
    assert reason.startswith(f"transport fault: {url}/chat/completions"), reason
    assert said in reason and "gave up after" in reason
    assert finished["usage"]["calls"] == 0  # nothing was charged as a reply
    assert not [r for r in records if r["event"] in ("reply_rejected", "tool_call")]
    waits = [r for r in records if r["event"] == "model_state"]
    assert len(waits) >= 2 and said in waits[0]["detail"]  # retried before giving up
    if mode == "429":
        assert waits[0]["state"] == "queued" and waits[0]["retry_after_s"] >= 0.4
    [run] = list((tmp_path / "runs").iterdir())
    category, infra = categorize({"passed": False, "kpis": {"records": len(records)}},
                                 events=run / "events.jsonl")
    assert category == INFRA and infra is not None and infra.startswith("endpoint_failure: ")
    no_key_in(tmp_path, done)


@pytest.mark.parametrize("kind", ["unknown_tool", "malformed_arguments"])
def test_a_complete_reply_that_breaks_the_protocol_is_the_model_s(llmock: Any, tmp_path: Path,
                                                                  kind: str) -> None:
    """llmock's broken tool calls arrive whole: the third class of WIRE_FAULTS, charged to
    the model as reply_rejected, never retried as the wire's and never infrastructure."""
    from evalkit.eval.taxonomy import FAIL, categorize

    llmock.call_tool("fs", {"action": "list"}, times=None).break_tool_call(kind, times=None)
    done, records = run_mission(tmp_path, llmock.base_url(), "--protocol", "native",
                                "--mission-steps", "1", "--no-supervisor")
    assert done.returncode == 0, done.stderr
    rejected = [r for r in records if r["event"] == "reply_rejected"]
    assert rejected and not [r for r in records if r["event"] == "tool_call"]
    assert records[-1]["outcome"] == "budget_exhausted"
    assert not [r for r in records if r["event"] == "model_state" and r["state"] == "failed"]
    assert len(llmock.requests) == 1  # a model's reply is not asked again as a wire fault
    [run] = list((tmp_path / "runs").iterdir())
    assert categorize({"passed": False, "kpis": {"records": len(records)}},
                      events=run / "events.jsonl") == (FAIL, None)
    no_key_in(tmp_path, done)
