"""evalkit.record.langchain.Handler records a real LangGraph graph's model and tool calls.

The graph is LangGraph's own (``StateGraph``, ``ToolNode``) over ``ChatOpenAI``, talking
to the chat-completions server on a real socket; the handler is the only evalkit part.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import evalkit.record as record
from evalkit.contract import conforms
from tests.runtime.chat_server import ChatServer, closed_port_url

pytest.importorskip("langgraph", reason="the langgraph extra: pip install -e '.[dev]'")
pytest.importorskip("langchain_openai", reason="the langgraph extra")

from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402

from evalkit.record.langchain import Handler  # noqa: E402

KEY = "sk-planted-langchain-key-0123456789abcdef"
USAGE = {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39}


@tool
def multiply(a: float, b: float) -> float:
    """a times b"""
    return a * b


@tool
def divide(a: float, b: float) -> float:
    """a divided by b"""
    return a / b


def graph(base_url: str) -> Any:
    model = ChatOpenAI(model="m-graph", base_url=base_url, api_key=KEY,
                       max_retries=0).bind_tools([multiply, divide])
    built = StateGraph(MessagesState)
    built.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    built.add_node("tools", ToolNode([multiply, divide], handle_tool_errors=True))
    built.add_edge(START, "agent")
    built.add_conditional_edges("agent", tools_condition)
    built.add_edge("tools", "agent")
    return built.compile()


def wire_call(name: str, arguments: str, id: str) -> dict[str, Any]:
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


@pytest.mark.slow
def test_a_langgraph_graph_is_recorded_call_by_call(tmp_path: Path) -> None:
    with ChatServer() as server:
        server.reply(tool_calls=[wire_call("multiply", '{"a": 17, "b": 23}', "call_m"),
                                 wire_call("divide", '{"a": 1, "b": 0}', "call_d")],
                     usage=USAGE)
        server.reply("17 times 23 is 391; 1/0 has no value.", usage=USAGE)
        with record.mission("multiply and divide", runs=tmp_path) as m:
            state = graph(server.base_url).invoke(
                {"messages": [("user", "What is 17 times 23, and 1 over 0?")]},
                {"callbacks": [Handler()]})
            m.answer(state["messages"][-1].content)
    (run,) = [p.parent for p in tmp_path.rglob("events.jsonl")]
    records = [e["record"] for e in lines(run / "events.jsonl")]
    assert all(conforms(r) == [] for r in records)
    events = [r["event"] for r in records]
    assert events[:2] == ["mission_started", "step_started"]
    assert events.count("step_started") == 2 and events[-2:] == ["answer", "mission_finished"]
    results = {r["tool"]: r for r in records if r["event"] == "tool_result"}
    assert results["multiply"]["ok"] is True and results["multiply"]["output"] == "391.0"
    assert results["divide"]["ok"] is False and "division by zero" in results["divide"]["error"]
    calls = [r for r in records if r["event"] == "tool_call"]
    assert {c["tool"]: c["arguments"] for c in calls} == {"multiply": {"a": 17, "b": 23},
                                                          "divide": {"a": 1, "b": 0}}
    assert all(c["index"] == 0 for c in calls) and calls[0]["usage"] == USAGE
    assert records[-1]["outcome"] == "answered"
    assert records[-1]["usage"] == {**USAGE, "prompt_tokens": 60, "completion_tokens": 18,
                                    "total_tokens": 78, "calls": 2}
    model = lines(run / "model.jsonl")
    assert len(model) == 2
    assert model[0]["request"]["messages"] == [
        {"role": "user", "content": "What is 17 times 23, and 1 over 0?"}]
    assert [c["name"] for c in model[0]["reply"]["tool_calls"]] == ["multiply", "divide"]
    assert model[0]["reply"]["tool_calls"][0]["arguments"] == '{"a": 17, "b": 23}'
    assert model[0]["reply"]["usage"] == USAGE
    assert len(model[0]["request"]["extra"]["tools"]) == 2
    assert model[1]["request"]["messages"][-1]["role"] == "tool"
    assert model[1]["reply"]["content"] == "17 times 23 is 391; 1/0 has no value."
    tools = lines(run / "tools.jsonl")
    assert sorted(t["tool"] for t in tools if t["call"]) == ["divide", "multiply"]
    offered = [t["catalogue"] for t in tools if t["call"] == 0][-1]
    assert {"multiply", "divide"} <= {d["name"] for d in offered}
    assert {"multiply", "divide"} <= set(records[1].get("catalogue") or records[0]["catalogue"])
    for path in run.iterdir():
        assert KEY.encode() not in path.read_bytes(), path


def wrapped_chat(base_url: str, **options: Any) -> Any:
    """ChatOpenAI with its own clients wrapped: model calls recorded, and replayed, there."""
    chat = ChatOpenAI(model="m-graph", base_url=base_url, api_key=KEY, max_retries=0,
                      **options)
    record.wrap_openai(chat.root_client)
    record.wrap_openai(chat.root_async_client)
    return chat


def ask(chat: Any, *, asynchronous: bool, stream: bool) -> Any:
    """One call through ChatOpenAI's raw-response path, sync or async, whole or streamed."""
    model = chat.bind_tools([multiply])
    messages = [("user", "What is 17 times 23?")]
    config = {"callbacks": [Handler(models=False)]}
    if asynchronous:
        return asyncio.run(model.ainvoke(messages, config))
    if stream:
        chunks = list(model.stream(messages, config))
        return sum(chunks[1:], chunks[0])
    return model.invoke(messages, config)


@pytest.mark.slow
@pytest.mark.parametrize(("asynchronous", "stream"), [(False, False), (True, False),
                                                      (False, True)],
                         ids=["sync", "async", "streamed"])
def test_a_wrapped_chat_model_is_recorded_once_and_replayed_with_no_server(
        tmp_path: Path, asynchronous: bool, stream: bool) -> None:
    # include_response_headers: langchain-openai reads .headers of the raw response.
    options = {"include_response_headers": True, "streaming": stream}
    with ChatServer() as server:
        server.reply(tool_calls=[wire_call("multiply", '{"a": 17, "b": 23}', "call_m")],
                     usage=USAGE)
        with record.mission("times", runs=tmp_path / "recorded") as m:
            said = ask(wrapped_chat(server.base_url, **options), asynchronous=asynchronous,
                       stream=stream)
            m.answer("391")
        assert len(server.requests) == 1
    (model,) = lines(tmp_path / "recorded" / str(m.run_id) / "model.jsonl")
    assert model["request"]["extra"]["provider"] == "openai"  # the wrapper's, once
    assert model["reply"]["tool_calls"][0]["arguments"] == '{"a": 17, "b": 23}'
    assert stream or model["reply"]["usage"] == USAGE
    with record.mission("times", runs=tmp_path / "replayed",
                        replay=tmp_path / "recorded") as again:
        replayed = ask(wrapped_chat(closed_port_url(), **options), asynchronous=asynchronous,
                       stream=stream)
        again.answer("391")
    assert replayed.tool_calls == said.tool_calls
    assert replayed.response_metadata.get("headers", {}) == {}
    run = tmp_path / "replayed" / str(again.run_id)
    assert json.loads((run / "meta.json").read_text())["meta"]["drift"]["first"] is None
    (served,) = lines(run / "model.jsonl")
    assert served["reply"]["tool_calls"] == model["reply"]["tool_calls"]
