"""evalkit.record writes a run directory as the built-in runtime does, for any agent.

A real ``openai`` client talks to a chat-completions server on a real socket
(``tests/runtime/chat_server.py``); the recorder watches. Each test reads back
what landed on disk and in the stream: the same files, envelopes and line
shapes as a built-in run, a seal that verifies, a stream every consumer
accepts, usage and tool calls as the endpoint said them, the contract's
outcome words, and no secret anywhere.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import evalkit.record as record
from evalkit.contract import conforms
from evalkit.store.seal import Checker
from tests.runtime.chat_server import ChatServer, closed_port_url

openai = pytest.importorskip("openai")

ROOT = Path(__file__).resolve().parents[2]
BUILT_IN = next((ROOT / "recordings" / "stub" / "good" / "chaining" / "runs").iterdir())
CLIENT_KEY = "sk-planted-client-key-0123456789abcdef"
TOOL_SECRET = "planted-tool-secret-9876543210"
USAGE = {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}
MULTIPLY = [{"type": "function", "function": {
    "name": "multiply", "description": "a times b",
    "parameters": {"type": "object", "properties": {"a": {}, "b": {}}}}}]


def call(name: str, arguments: dict[str, Any], id: str = "call_1") -> dict[str, Any]:
    return {"id": id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def run_dir(runs: Path) -> Path:
    (found,) = [p for p in runs.rglob("events.jsonl")]
    return found.parent


@record.tool
def multiply(a: int, b: int) -> int:
    """a times b"""
    return a * b


@record.tool(name="vault.read")
def read_vault(token: str) -> str:
    raise PermissionError(f"the vault refused token {token}")


def agent_loop(client: Any, m: record.Mission, *, stream: bool = False) -> str:
    messages: list[Any] = [{"role": "user", "content": m.objective}]
    for _ in range(4):
        options: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}} \
            if stream else {}
        reply = client.chat.completions.create(model="m-test", messages=messages,
                                               tools=MULTIPLY, **options)
        if stream:
            text, calls = "", {}
            for chunk in reply:
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    for piece in choice.delta.tool_calls or []:
                        slot = calls.setdefault(piece.index, {"id": piece.id, "args": ""})
                        slot["args"] += piece.function.arguments or ""
            tool_calls = [(c["id"], json.loads(c["args"])) for c in calls.values()]
        else:
            message = reply.choices[0].message
            text = message.content or ""
            tool_calls = [(c.id, json.loads(c.function.arguments))
                          for c in message.tool_calls or []]
            messages.append(message)
        if not tool_calls:
            m.answer(text)
            return text
        for call_id, args in tool_calls:
            messages.append({"role": "tool", "tool_call_id": call_id,
                             "content": str(multiply(**args))})
    raise AssertionError("no answer")


@pytest.fixture
def server():
    with ChatServer() as chat:
        yield chat


@pytest.fixture
def client(server: ChatServer):
    return record.wrap_openai(openai.OpenAI(base_url=server.base_url, api_key=CLIENT_KEY,
                                            max_retries=0))


def queue_times(server: ChatServer) -> None:
    server.reply(tool_calls=[call("multiply", {"a": 17, "b": 23})], usage=USAGE)
    server.reply("17 times 23 is 391.", usage=USAGE)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_recorded_mission_is_a_run_directory_the_built_in_runtime_would_write(
        server, client, tmp_path, stream):
    queue_times(server)
    sink = tmp_path / "stream.jsonl"
    with record.mission("What is 17 times 23?", runs=tmp_path / "runs",
                        events=str(sink)) as m:
        agent_loop(client, m, stream=stream)
    run = run_dir(tmp_path / "runs")
    assert run.name == m.run_id
    assert {p.name for p in run.iterdir()} - {"lock"} == {p.name for p in BUILT_IN.iterdir()}
    # The envelopes: seq from 1 with no gaps; the sink got the same records, in order.
    envelopes = lines(run / "events.jsonl")
    assert [e["seq"] for e in envelopes] == list(range(1, len(envelopes) + 1))
    records = [e["record"] for e in envelopes]
    assert records == lines(sink)
    assert all(conforms(r) == [] for r in records)
    assert [r["event"] for r in records] == [
        "mission_started", "step_started", "tool_call", "tool_result", "step_started",
        "answer", "mission_finished"]
    started, finished = records[0], records[-1]
    assert started["catalogue"][:1] == ["multiply"] and started["run_id"] == m.run_id
    assert records[2]["usage"] == USAGE and records[5]["usage"] == USAGE  # first of a turn
    assert records[3] | {"output": "391"} == records[3] and records[3]["handle"] == "r1"
    assert finished["outcome"] == "answered" and finished["steps"] == 2
    assert finished["usage"] == {"prompt_tokens": 22, "completion_tokens": 10,
                                 "total_tokens": 32, "calls": 2}
    # model.jsonl and tools.jsonl: the built-in runtime's line shapes, the wire's facts.
    model, built_in = lines(run / "model.jsonl"), lines(BUILT_IN / "model.jsonl")
    assert [set(line) for line in model] == [set(built_in[0])] * 2
    assert set(model[0]["request"]) == set(built_in[0]["request"])
    assert model[0]["reply"]["tool_calls"][0] | {"name": "multiply",
                                                  "arguments": '{"a": 17, "b": 23}'} \
        == model[0]["reply"]["tool_calls"][0]
    assert model[0]["reply"]["usage"] == USAGE and model[1]["reply"]["content"] == \
        "17 times 23 is 391."
    assert model[0]["reply"]["extras"]["latency_s"] >= 0
    assert model[1]["request"]["messages"][-1] == {"role": "tool", "tool_call_id": "call_1",
                                                  "content": "391"}
    assert model[0]["request"]["extra"]["tools"] == MULTIPLY
    assert model[0]["request"]["extra"]["base_url"] == server.base_url
    tools = lines(run / "tools.jsonl")
    assert tools[0]["call"] == 0 and tools[0]["catalogue"][0]["name"] == "multiply"
    assert tools[1]["tool"] == "multiply" and tools[1]["arguments"] == {"a": 17, "b": 23}
    assert tools[1]["result"] == {"exit_code": 0, "stdout": "391", "stderr": "",
                                  "structured": 391}
    meta = json.loads((run / "meta.json").read_text("utf-8"))
    assert meta["meta"]["outcome"] == "answered" and meta["last_seq"] == len(records)
    # Sealed by the store's own writer, and whole.
    check, problems = Checker.for_scoring([run]).folder(run)
    assert (check.word, problems) == ("verified", [])


def test_the_async_client_is_recorded_streaming_and_not(server, tmp_path):
    client = record.wrap_openai(openai.AsyncOpenAI(base_url=server.base_url,
                                                   api_key=CLIENT_KEY, max_retries=0))
    server.reply("first", usage=USAGE)
    server.reply("second", usage=USAGE)

    async def agent() -> None:
        async with record.mission("say two things", runs=tmp_path) as m:
            whole = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "one"}])
            stream = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "two"}], stream=True)
            text = "".join([c.choices[0].delta.content or "" async for c in stream
                            if c.choices])
            m.answer(whole.choices[0].message.content + " " + text)

    asyncio.run(agent())
    run = run_dir(tmp_path)
    model = lines(run / "model.jsonl")
    assert [line["reply"]["content"] for line in model] == ["first", "second"]
    assert model[0]["reply"]["usage"] == USAGE
    assert model[1]["reply"]["usage"] is None  # not asked for: absent, never zero
    assert model[1]["request"]["extra"]["stream"] is True
    finished = lines(run / "events.jsonl")[-1]["record"]
    assert finished["usage"] == {**USAGE, "calls": 2}
    assert lines(run / "events.jsonl")[-2]["record"]["text"] == "first second"


def test_an_exception_inside_is_a_recorded_crash_and_is_raised_again(tmp_path):
    with pytest.raises(ZeroDivisionError):
        with record.mission("divide", runs=tmp_path) as m:
            m.tool("divide", {"a": 1, "b": 0}, lambda a, b: a / b)
    records = [e["record"] for e in lines(run_dir(tmp_path) / "events.jsonl")]
    assert [r["event"] for r in records] == ["mission_started", "step_started", "tool_call",
                                             "tool_result", "mission_finished"]
    assert records[3]["ok"] is False and records[3]["error"] == \
        "ZeroDivisionError: division by zero"
    assert records[-1]["outcome"] == "incomplete"
    assert records[-1]["reason"] == "crashed: ZeroDivisionError: division by zero"


def test_a_mission_with_no_answer_is_incomplete_and_says_so(tmp_path):
    with record.mission("nothing", runs=tmp_path):
        pass
    finished = lines(run_dir(tmp_path) / "events.jsonl")[-1]["record"]
    assert (finished["outcome"], finished["reason"], finished["steps"]) == \
        ("incomplete", "ended without an answer", 0)
    assert finished["usage"] == {"calls": 0}


def test_an_endpoint_that_is_down_is_the_wires_fault_not_the_agents(tmp_path):
    client = record.wrap_openai(openai.OpenAI(base_url=closed_port_url(), api_key=CLIENT_KEY,
                                              max_retries=0))
    with pytest.raises(openai.APIConnectionError):
        with record.mission("ask", runs=tmp_path):
            client.chat.completions.create(model="m", messages=[{"role": "user",
                                                                 "content": "hi"}])
    run = run_dir(tmp_path)
    finished = lines(run / "events.jsonl")[-1]["record"]
    assert finished["reason"].startswith("transport fault: http://127.0.0.1:")
    (failed,) = lines(run / "model.jsonl")
    assert failed["reply"]["fault"] == "transport" and "APIConnectionError" in \
        failed["reply"]["error"]
    assert finished["usage"] == {"calls": 0}  # a call that never answered is not counted


def test_a_refused_key_is_a_configuration_fault(server, client, tmp_path):
    server.status(401, error="invalid key")
    with pytest.raises(openai.AuthenticationError):
        with record.mission("ask", runs=tmp_path):
            client.chat.completions.create(model="m", messages=[{"role": "user",
                                                                 "content": "hi"}])
    finished = lines(run_dir(tmp_path) / "events.jsonl")[-1]["record"]
    assert finished["reason"].startswith("configuration fault: ")


def test_no_secret_reaches_the_recording(server, client, tmp_path, monkeypatch):
    monkeypatch.setenv("VAULT_API_KEY", TOOL_SECRET)
    server.reply(tool_calls=[call("vault.read", {"token": TOOL_SECRET})])
    server.reply(f"the vault said no; my key is {CLIENT_KEY}")
    sink = tmp_path / "stream.jsonl"
    with record.mission("open the vault", runs=tmp_path / "runs", events=str(sink)) as m:
        messages = [{"role": "user", "content": f"use {TOOL_SECRET}"}]
        reply = client.chat.completions.create(model="m", messages=messages)
        args = json.loads(reply.choices[0].message.tool_calls[0].function.arguments)
        with pytest.raises(PermissionError):
            read_vault(**args)
        final = client.chat.completions.create(model="m", messages=messages)
        m.answer(final.choices[0].message.content)
    files = [p for p in (tmp_path / "runs").rglob("*") if p.is_file()] + [sink]
    assert len(files) >= 6
    for path in files:
        data = path.read_bytes()
        assert CLIENT_KEY.encode() not in data and TOOL_SECRET.encode() not in data, path
    records = lines(sink)
    tool_result = next(r for r in records if r["event"] == "tool_result")
    assert tool_result["ok"] is False and "[REDACTED]" in tool_result["error"]
    assert tool_result["arguments"] == {"token": "[REDACTED]"}


def test_by_hand_a_suite_key_files_the_run_where_score_looks(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALKIT_RUNS", str(tmp_path / "recs"))
    monkeypatch.delenv("EVALKIT_EVENTS", raising=False)
    with record.mission("What is 2 times 3?", suite_key="times") as m:
        m.answer(str(multiply(2, 3)))
    (run,) = (tmp_path / "recs" / "times").iterdir()
    assert run.name == m.run_id and (run / "events.jsonl").is_file()


def test_records_outside_a_mission_are_not_made_and_nothing_changes(server, client):
    server.reply("plain")
    reply = client.chat.completions.create(model="m", messages=[{"role": "user",
                                                                 "content": "hi"}])
    assert reply.choices[0].message.content == "plain"
    assert multiply(3, 4) == 12
    assert record.current() is None


def test_recording_nothing_still_streams(tmp_path):
    sink = tmp_path / "s.jsonl"
    with record.mission("x", runs="none", events=str(sink)) as m:
        m.answer("y")
    records = lines(sink)
    assert "run_id" not in records[0] and records[-1]["outcome"] == "answered"
    assert m.run_id is None


def test_a_second_answer_is_refused_in_one_sentence(tmp_path):
    from evalkit.errors import EvalkitError

    with record.mission("x", runs=tmp_path) as m:
        m.answer("one")
        with pytest.raises(EvalkitError, match="answers once"):
            m.answer("two")
