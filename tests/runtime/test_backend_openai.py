"""The openai backend against a real chat-completions endpoint on a real socket."""

from __future__ import annotations

import json

import pytest

from evalkit.runtime import Bounds, OpenAIBackend, WaitPolicy
from evalkit.runtime.replay.recording import read_recording
from tests.runtime.chat_server import ChatServer, closed_port_url
from tests.runtime.conftest import RunMission

FAST_WAITS = Bounds(waits=WaitPolicy(tries=3, backoff_s=0.01, cap_s=0.05))
USAGE = {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}


@pytest.fixture
def server() -> ChatServer:
    with ChatServer() as chat:
        yield chat


@pytest.mark.parametrize("stream", [True, False])
def test_a_json_mission_over_http_with_usage(server: ChatServer, mission: RunMission,
                                             stream: bool) -> None:
    server.reply('{"tool": "fs", "arguments": {"action": "list"}}', usage=USAGE)
    server.reply('Done.\n```json\n{"answer": "the root is empty"}\n```', usage=USAGE)
    backend = OpenAIBackend(model="m1", base_url=server.base_url, stream=stream)
    done = mission(backend, mcp=False)
    assert done.outcome.outcome == "answered"
    assert done.outcome.answer == "the root is empty"
    assert done.events("tool_call")[0]["usage"] == USAGE
    assert done.events("answer")[0]["usage"] == USAGE
    assert done.records[-1]["usage"] == {"prompt_tokens": 22, "completion_tokens": 8,
                                         "total_tokens": 30, "calls": 2}
    assert [c["reply"]["usage"] for c in done.model_calls] == [USAGE, USAGE]
    assert server.requests[0]["stream"] is True if stream else "stream" not in server.requests[0]
    if stream:
        assert server.requests[0]["stream_options"] == {"include_usage": True}
    # the second request carries the tool result back to the model
    assert "Result of fs (handle r1" in server.requests[1]["messages"][-1]["content"]


@pytest.mark.parametrize("stream", [True, False])
def test_usage_is_absent_not_zero_when_the_endpoint_reports_none(
        server: ChatServer, mission: RunMission, stream: bool) -> None:
    server.reply('{"answer": "42"}')
    done = mission(OpenAIBackend(model="m1", base_url=server.base_url, stream=stream), mcp=False)
    assert "usage" not in done.events("answer")[0]
    assert done.records[-1]["usage"] == {"calls": 1}
    assert done.model_calls[0]["reply"]["usage"] is None


@pytest.mark.parametrize("stream", [True, False])
def test_native_calls_over_http_echo_provider_extras(server: ChatServer, mission: RunMission,
                                                     stream: bool) -> None:
    extra = {"google": {"thought_signature": "c2lnbmF0dXJl"}}
    server.reply(None, usage=USAGE, tool_calls=[
        {"id": "call_a", "type": "function", "extra_content": extra,
         "function": {"name": "fs", "arguments": '{"action": "list"}'}},
        {"id": "call_b", "type": "function",
         "function": {"name": "mission_result", "arguments": '{"handle": "r1"}'}}])
    server.reply(None, tool_calls=[{"id": "call_c", "type": "function", "function": {
        "name": "mission_answer", "arguments": '{"text": "nothing here"}'}}])
    done = mission(OpenAIBackend(model="m1", base_url=server.base_url, stream=stream),
                   protocol="native", mcp=False)
    assert done.outcome.outcome == "answered"
    calls = done.events("tool_call")
    assert [c.get("call") for c in calls] == [None, 1]
    assert calls[0]["usage"] == USAGE and "usage" not in calls[1]
    first = server.requests[0]
    assert first["tool_choice"] == "required" and first["parallel_tool_calls"] is True
    assert "mission_answer" in [t["function"]["name"] for t in first["tools"]]
    echoed = server.requests[1]["messages"][2]
    assert echoed["role"] == "assistant"
    assert echoed["tool_calls"][0]["extra_content"] == extra
    assert echoed["tool_calls"][0]["id"] == "call_a"
    replies = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in replies] == ["call_a", "call_b"]


@pytest.mark.parametrize(("status", "headers", "state", "retry_after"), [
    (429, {"Retry-After": "0"}, "queued", 0.0),
    (503, {}, "loading", None),
    (500, {}, "failed", None),
])
def test_a_wait_is_surfaced_then_loaded(server: ChatServer, mission: RunMission, status: int,
                                        headers: dict[str, str], state: str,
                                        retry_after: float | None) -> None:
    server.status(status, headers=headers)
    server.reply('{"answer": "ok"}')
    done = mission(OpenAIBackend(model="m1", base_url=server.base_url), mcp=False,
                   bounds=FAST_WAITS)
    waits = done.events("model_state")
    assert [w["state"] for w in waits] == [state, "loaded"]
    assert waits[0]["provider"] == "openai" and waits[0]["model"] == "m1"
    assert waits[0].get("retry_after_s") == retry_after
    assert f"HTTP {status}" in waits[0]["detail"]
    assert done.outcome.outcome == "answered"
    assert len(done.model_calls) == 1  # one logical call, answered after the wait


def test_a_refused_connection_is_absent_and_the_run_gives_up(mission: RunMission) -> None:
    done = mission(OpenAIBackend(model="m1", base_url=closed_port_url()), mcp=False,
                   bounds=FAST_WAITS)
    assert [w["state"] for w in done.events("model_state")] == ["absent"] * 3
    assert done.outcome.outcome == "incomplete"
    assert "gave up after 3 tries" in done.records[-1]["reason"]
    assert "error" in done.model_calls[0]["reply"]  # the failed call is recorded too
    assert done.records[-1]["usage"] == {"calls": 0}


def test_an_answer_waiting_cannot_change_gives_up_at_once(server: ChatServer,
                                                          mission: RunMission) -> None:
    server.status(401, error="bad key")
    done = mission(OpenAIBackend(model="m1", base_url=server.base_url), mcp=False,
                   bounds=FAST_WAITS)
    assert [w["state"] for w in done.events("model_state")] == ["failed"]
    assert done.outcome.outcome == "incomplete"
    assert "HTTP 401" in done.outcome.reason
    assert len(server.requests) == 1


def test_the_api_key_never_reaches_the_recording(server: ChatServer, mission: RunMission,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    key = "sk-test-abcdefghijklmnopqrstuvwxyz123456"
    monkeypatch.setenv("EVALKIT_API_KEY", key)
    server.reply('{"answer": "the key is ' + key + '"}')
    done = mission(OpenAIBackend(model="m1", base_url=server.base_url, api_key=key), mcp=False)
    run_files = "".join(p.read_text() for p in done.run_dir.iterdir() if p.is_file())
    assert key not in run_files
    assert key not in json.dumps(done.records)


def test_a_reply_cut_mid_emoji_is_recorded_and_replayed_as_sent(server: ChatServer,
                                                                  mission: RunMission) -> None:
    """An endpoint that cuts an emoji in half sends a lone surrogate (as ``\\ud83d``), and
    the SDK hands it on as is: the run answers, every file records it, a replay reads it
    back exactly. (UTF-8 cannot carry it: writing it used to crash the mission.)"""
    half = "\ud83d"
    content = '{"answer": "cut \\ud83d", "note": "' + half + '"}'
    server.reply(content)
    done = mission(OpenAIBackend(model="m1", base_url=server.base_url), mcp=False)
    assert done.outcome.outcome == "answered" and done.outcome.answer == "cut " + half
    assert done.events("answer")[0]["text"] == "cut " + half
    assert done.model_calls[0]["reply"]["content"] == content
    assert done.run_dir is not None
    recording = read_recording(done.run_dir)
    assert recording.model_calls[0]["reply"]["content"] == content
    assert [r["event"] for r in recording.records][-1] == "mission_finished"
    answer = next(r for r in recording.records if r["event"] == "answer")
    assert answer["text"] == "cut \ufffd"  # the stream reader's reading, as Parquet holds it
