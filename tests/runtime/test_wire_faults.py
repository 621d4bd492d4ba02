"""Every fault of the wire is the wire's: the openai backend against endpoints that misbehave.

Two real servers on real sockets, no doubles. ``llmock`` (a third-party
OpenAI-API mock from PyPI, its pytest fixture ``llmock``) plays the chaos it
knows: a stream cut before its finish reason, a dropped connection, a
malformed chunk, a stall, 429 with Retry-After, 5xx, 401/404/400. What it
cannot put on the wire — an HTML page with status 200, JSON that is no chat
completion, usage with cache and reasoning counters — comes from the
standard-library ``ChatServer`` of this folder, which sends bytes as given.

Each case checks the recorded outcome, whose fault the reason says it was
(``transport`` / ``configuration``), that nothing was charged to the model
(no ``reply_rejected``, no tool dispatched from a cut stream), how the
scorer's taxonomy files the run, and that the key is in no file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalkit.eval.taxonomy import endpoint_down
from evalkit.runtime import Bounds, OpenAIBackend, WaitPolicy
from tests.runtime.chat_server import ChatServer
from tests.runtime.conftest import Mission, RunMission

pytest.importorskip("llmock", reason="llmock is a dev dependency: pip install -e '.[dev]'")
from llmock.scenarios import Fail, Reply, StreamFault, ToolCall  # noqa: E402

FAST = Bounds(waits=WaitPolicy(tries=3, backoff_s=0.01, cap_s=0.05), supervisor=False)
KEY = "sk-wire-test-0123456789abcdefghijklmnop"
ANSWER = '{"answer": "all good"}'


def backend(base_url: str, *, stream: bool = True, **options: Any) -> OpenAIBackend:
    return OpenAIBackend(model="m-wire", base_url=base_url, api_key=KEY, stream=stream, **options)


def no_key_anywhere(done: Mission, *more: Path) -> None:
    """The key is in no file the run left, nor in its stream."""
    assert KEY not in json.dumps(done.records)
    files = [p for p in (done.run_dir.rglob("*") if done.run_dir else []) if p.is_file()]
    for path in [*files, *more]:
        assert KEY not in path.read_text(encoding="utf-8", errors="replace"), path


def events_file(done: Mission, tmp_path: Path) -> Path:
    """The stream as the sink wrote it (for the scorer's taxonomy)."""
    path = tmp_path / "graded.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in done.records), encoding="utf-8")
    return path


def transport_gave_up(done: Mission, url: str, said: str, tmp_path: Path) -> None:
    """Retries ran out: incomplete, a transport fault naming the URL, infra to the scorer."""
    assert done.outcome.outcome == "incomplete"
    assert done.outcome.fault == "transport"
    reason = done.records[-1]["reason"]
    assert reason.startswith("transport fault: ") and f"{url}/chat/completions" in reason, reason
    assert said in reason and "gave up after 3 tries" in reason
    assert done.events("reply_rejected") == [] and done.events("tool_call") == []
    assert [w["state"] for w in done.events("model_state")] == ["failed"] * 3
    assert done.records[-1]["usage"] == {"calls": 0}  # nothing was charged as a reply
    down = endpoint_down(events_file(done, tmp_path))
    assert down is not None and said in down
    no_key_anywhere(done)


# -- llmock: the chaos modes ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["json", "native"])
def test_a_stream_cut_before_its_finish_reason_is_never_used(llmock: Any, mission: RunMission,
                                                             protocol: str,
                                                             tmp_path: Path) -> None:
    """A cut json reply used to become a reply_rejected; a cut native call was dispatched
    with arguments the model never finished. Now both are a truncated stream, retried."""
    if protocol == "native":
        llmock.call_tool("fs", {"action": "list", "path": "."}, times=None)
    else:
        llmock.reply(ANSWER, times=None)
    llmock.truncate(after_chunks=2, times=None)
    done = mission(backend(llmock.base_url()), protocol=protocol, mcp=False, bounds=FAST)
    transport_gave_up(done, llmock.base_url(), "ended its stream before a finish reason",
                      tmp_path)
    assert len(llmock.requests) == 3
    # llmock's verdict is not asked here: it reads a last cut attempt that was not retried
    # as "accepted", as it cannot see that the run gave up instead (the retried case below
    # does ask it).


@pytest.mark.slow
@pytest.mark.parametrize(("fault", "said"), [
    (lambda m: m.truncate(after_chunks=3), "ended its stream before a finish reason"),
    (lambda m: m.disconnect(after_chunks=2), "the connection broke"),
    (lambda m: m.corrupt(after_chunks=2), "streamed a chunk that is not JSON"),
    (lambda m: m.fail(500), "answered HTTP 500"),
], ids=["truncate", "disconnect", "malformed", "http-500"])
def test_a_transport_fault_is_retried_then_the_mission_answers(llmock: Any, mission: RunMission,
                                                               fault: Any, said: str,
                                                               tmp_path: Path) -> None:
    llmock.reply(ANSWER, times=2)
    fault(llmock)
    done = mission(backend(llmock.base_url()), mcp=False, bounds=FAST)
    assert done.outcome.outcome == "answered" and done.outcome.answer == "all good"
    waits = done.events("model_state")
    assert [w["state"] for w in waits] == ["failed", "loaded"]
    assert said in waits[0]["detail"] and llmock.base_url() in waits[0]["detail"]
    assert done.events("reply_rejected") == []
    assert endpoint_down(events_file(done, tmp_path)) is None  # recovered: not infra
    assert len(done.model_calls) == 1 and done.records[-1]["usage"]["calls"] == 1
    no_key_anywhere(done)
    llmock.assert_resilient()


def test_a_malformed_chunk_that_never_clears_ends_as_a_transport_fault(
        llmock: Any, mission: RunMission, tmp_path: Path) -> None:
    llmock.reply(ANSWER, times=None).corrupt(after_chunks=1, times=None)
    done = mission(backend(llmock.base_url()), mcp=False, bounds=FAST)
    transport_gave_up(done, llmock.base_url(), "streamed a chunk that is not JSON", tmp_path)
    assert "JSONDecodeError" not in done.records[-1]["reason"]


@pytest.mark.slow
def test_429_waits_as_long_as_retry_after_says(llmock: Any, mission: RunMission) -> None:
    llmock.reply(ANSWER, times=1).rate_limit(times=1, retry_after=0.2)
    done = mission(backend(llmock.base_url()), mcp=False, bounds=FAST)
    assert done.outcome.outcome == "answered"
    queued, loaded = done.events("model_state")
    assert queued["state"] == "queued" and queued["retry_after_s"] >= 0.2  # llmock rounds up
    assert loaded["state"] == "loaded" and loaded["since_s"] >= queued["retry_after_s"] * 0.9
    llmock.assert_resilient()  # no retry_after_ignored


@pytest.mark.slow
def test_a_stalled_stream_is_cut_at_the_idle_timeout_and_retried(llmock: Any,
                                                                 mission: RunMission) -> None:
    llmock.reply(ANSWER, times=2).stall(after_chunks=1, seconds=30)
    done = mission(backend(llmock.base_url(), idle_timeout_s=0.5), mcp=False, bounds=FAST)
    assert done.outcome.outcome == "answered"
    failed = done.events("model_state")[0]
    assert failed["state"] == "failed" and "timed out" in failed["detail"]
    assert "0.5 s (--stream-idle-timeout)" in failed["detail"]
    assert done.records[-1]["elapsed_s"] < 10


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_a_configuration_fault_ends_the_run_at_once(llmock: Any, mission: RunMission,
                                                    status: int, tmp_path: Path) -> None:
    llmock.fail(status, times=None)
    done = mission(backend(llmock.base_url()), mcp=False, bounds=FAST)
    assert done.outcome.outcome == "incomplete" and done.outcome.fault == "configuration"
    reason = done.records[-1]["reason"]
    assert reason.startswith("configuration fault: ")
    assert f"{llmock.base_url()}/chat/completions refused model 'm-wire' with HTTP {status}" \
        in reason
    assert reason.endswith("asking again cannot change this answer")
    assert len(llmock.requests) == 1  # never retried
    assert done.events("reply_rejected") == []
    assert endpoint_down(events_file(done, tmp_path)) is not None  # infra, not the model's
    no_key_anywhere(done)
    llmock.assert_resilient()  # no retried_non_retryable


def test_a_native_tool_call_from_llmock_is_dispatched_when_the_stream_is_whole(
        llmock: Any, mission: RunMission) -> None:
    """The other side of the cut-stream rule: a complete streamed call still runs."""
    llmock.add(Reply(tool_calls=(ToolCall("fs", {"action": "list", "path": "."}),)))
    llmock.add(Reply(tool_calls=(ToolCall("mission_answer", {"text": "listed"}),)))
    done = mission(backend(llmock.base_url()), protocol="native", mcp=False, bounds=FAST)
    assert done.outcome.outcome == "answered" and done.outcome.answer == "listed"
    assert [c["tool"] for c in done.events("tool_call")] == ["fs"]


def test_a_cut_native_call_then_a_whole_one_dispatches_only_the_whole_one(
        llmock: Any, mission: RunMission) -> None:
    """The first stream is cut inside the tool call's arguments; nothing is dispatched from
    it, and the retried, complete call is the only one that runs."""
    llmock.add(Reply(tool_calls=(ToolCall("fs", {"action": "read", "path": "notes.txt"}),),
                     times=2))
    llmock.add(StreamFault("truncate", after_chunks=3))
    llmock.add(Reply(tool_calls=(ToolCall("mission_answer", {"text": "read"}),)))
    done = mission(backend(llmock.base_url()), protocol="native", mcp=False, bounds=FAST)
    calls = done.events("tool_call")
    assert [(c["tool"], c["arguments"]) for c in calls] == [
        ("fs", {"action": "read", "path": "notes.txt"})]
    assert [w["state"] for w in done.events("model_state")] == ["failed", "loaded"]


# -- bodies llmock cannot send: the standard-library server --------------------------------------


@pytest.fixture
def server() -> ChatServer:
    with ChatServer() as chat:
        yield chat


HTML = b"<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>proxy</body></html>"


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(("body", "kind", "said"), [
    (HTML, "text/html; charset=utf-8", "with a body that is not JSON (text/html"),
    (b'{"object": "error", "detail": "warming up"}', "application/json",
     "with JSON that is not a chat completion (no choices"),
    (b"", "application/json", "with a body that is not JSON (application/json, empty body)"),
], ids=["html", "no-choices", "empty"])
def test_a_body_that_is_no_chat_completion_is_a_transport_fault(
        server: ChatServer, mission: RunMission, stream: bool, body: bytes, kind: str,
        said: str, tmp_path: Path) -> None:
    """An HTML 200 used to surface as "'str' object has no attribute 'to_dict'", and streamed
    as ten "the reply is empty" rejections charged to the model."""
    for _ in range(3):
        server.raw(body, content_type=kind)
    done = mission(backend(server.base_url, stream=stream), mcp=False, bounds=FAST)
    transport_gave_up(done, server.base_url, said, tmp_path)
    if body == HTML:
        assert "first bytes" in done.records[-1]["reason"] and "<!DOCTYPE html>" in \
            done.records[-1]["reason"]
    assert "AttributeError" not in done.records[-1]["reason"]


def test_an_event_stream_without_choices_is_a_truncated_stream(server: ChatServer,
                                                               mission: RunMission,
                                                               tmp_path: Path) -> None:
    chunk = b'data: {"id": "x", "object": "chat.completion.chunk", "note": "no choices"}\n\n'
    for _ in range(3):
        server.raw(chunk * 3 + b"data: [DONE]\n\n", content_type="text/event-stream")
    done = mission(backend(server.base_url), mcp=False, bounds=FAST)
    transport_gave_up(done, server.base_url, "ended its stream before a finish reason after 3 "
                                             "chunk(s)", tmp_path)


def test_a_whole_reply_to_a_stream_request_is_read_as_one(server: ChatServer,
                                                          mission: RunMission) -> None:
    """A server that ignores ``stream`` and answers with one JSON body still answers."""
    body = {"id": "x", "object": "chat.completion", "model": "m-wire",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": ANSWER}}]}
    server.raw(json.dumps(body).encode(), content_type="application/json")
    done = mission(backend(server.base_url), mcp=False, bounds=FAST)
    assert done.outcome.outcome == "answered" and done.outcome.answer == "all good"


@pytest.mark.parametrize("stream", [True, False])
def test_usage_totals_keep_cached_and_reasoning_tokens(server: ChatServer, mission: RunMission,
                                                       stream: bool) -> None:
    usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
             "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
             "completion_tokens_details": {"reasoning_tokens": 12}}
    server.reply('{"tool": "fs", "arguments": {"action": "list"}}', usage=usage)
    server.reply(ANSWER, usage={**usage, "prompt_tokens_details": {"cached_tokens": 100}})
    done = mission(backend(server.base_url, stream=stream), mcp=False, bounds=FAST)
    assert done.records[-1]["usage"] == {
        "prompt_tokens": 200, "completion_tokens": 40, "total_tokens": 240,
        "cached_tokens": 164, "reasoning_tokens": 24, "calls": 2}
    # each call's own usage rides its record as the provider sent it
    assert done.events("tool_call")[0]["usage"]["prompt_tokens_details"]["cached_tokens"] == 64


def test_usage_counters_at_the_top_level_are_summed_too(server: ChatServer,
                                                        mission: RunMission) -> None:
    usage = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6,
             "cached_tokens": 3, "prompt_cache_hit_tokens": 3}
    server.reply(ANSWER, usage=usage)
    done = mission(backend(server.base_url), mcp=False, bounds=FAST)
    assert done.records[-1]["usage"] == {**usage, "calls": 1}


def test_fail_builds_a_fault_llmock_can_name(llmock: Any) -> None:
    """Guard: the llmock behaviours these tests lean on are the ones this version has."""
    assert Fail(401).status == 401 and StreamFault("truncate").kind == "truncate"
