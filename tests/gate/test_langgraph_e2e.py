"""A real LangGraph graph whose tools are governed through the real gate sidecar.

Real, third-party: LangGraph's ``StateGraph`` and ``ToolNode``, langchain-core's
``@tool``, langchain-openai's ``ChatOpenAI`` talking over a real socket to the
repository's local chat-completions server (``tests/runtime/chat_server.py``), which
serves the replies queued here. Real, evalkit's: ``evalkit gate serve`` spawned as
a process by ``evalkit.gate.Client`` (SQLite ledger, run store, Ed25519 seal),
``evalkit.gate.langgraph.governed_tools``, and ``evalkit gate approve``'s signing.
Nothing is mocked; the side effects are counted in files the tool bodies append
to, independently of the gate's own bookkeeping.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalkit.commands.gate import decide_file
from tests._multiply import ROOT, evalkit
from tests.runtime.chat_server import ChatServer

pytest.importorskip("langgraph", reason="the langgraph extra")
pytest.importorskip("langchain_openai", reason="the langgraph extra")

from langchain_core.messages import ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402

from evalkit.gate.client import Client  # noqa: E402
from evalkit.gate.langgraph import governed_tools  # noqa: E402

POLICY = {
    "version": 1,
    "tools": {
        "add": {"risk": 0, "reversible": True},
        "send_email": {"risk": 4, "reversible": False, "requires_approval": True},
        "page_oncall": {"risk": 3, "reversible": False, "hold_seconds": 1},
        # wipe_disk is not named: the policy denies it (fail closed)
    },
}


def make_tools(effects: Path) -> list[Any]:
    """The tools, each appending one line per real run to ``effects`` (the counter)."""
    def did(name: str) -> None:
        with open(effects, "a", encoding="utf-8") as out:
            out.write(name + "\n")

    @tool
    def add(a: int, b: int) -> int:
        """a plus b"""
        did("add")
        return a + b

    @tool
    def send_email(to: str) -> str:
        """send an email"""
        did("send_email")
        return f"sent to {to}"

    @tool
    def page_oncall(message: str) -> str:
        """page whoever is on call"""
        did("page_oncall")
        return "paged"

    @tool
    def wipe_disk() -> str:
        """erase everything"""
        did("wipe_disk")
        return "wiped"

    return [add, send_email, page_oncall, wipe_disk]


def graph(base_url: str, governed: list[Any]) -> Any:
    model = ChatOpenAI(model="m-gate", base_url=base_url, api_key="sk-test",
                       max_retries=0).bind_tools(governed)
    built = StateGraph(MessagesState)
    built.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    built.add_node("tools", ToolNode(governed))
    built.add_edge(START, "agent")
    built.add_conditional_edges("agent", tools_condition)
    built.add_edge("tools", "agent")
    return built.compile()


def call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


def tool_messages(state: dict[str, Any]) -> dict[str, ToolMessage]:
    return {m.name: m for m in state["messages"] if isinstance(m, ToolMessage)}


@pytest.mark.slow
def test_a_langgraph_agent_is_governed_call_by_call(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY), "utf-8")
    effects, approvals = tmp_path / "effects.txt", tmp_path / "approvals"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with ChatServer() as server, Client(policy, ledger=tmp_path / "gov.sqlite",
                                        runs=tmp_path / "runs", approvals=approvals,
                                        env=env) as gate:
        governed = governed_tools(gate, make_tools(effects), key_prefix="thread-1")
        agent = graph(server.base_url, governed)
        # Turn one: four calls at once (ToolNode runs them concurrently).
        server.reply(tool_calls=[call("add", {"a": 1, "b": 2}, "call_add"),
                                 call("wipe_disk", {}, "call_wipe"),
                                 call("send_email", {"to": "ops@example.com"}, "call_mail"),
                                 call("page_oncall", {"message": "disk"}, "call_page")])
        server.reply("1 plus 2 is 3; the email and the page wait for a person.")
        first = tool_messages(agent.invoke({"messages": [("user", "Add, wipe, mail, page.")]}))
        assert first["add"].content == "3" and first["add"].status == "success"
        assert first["wipe_disk"].status == "error"
        assert "rejected (unknown_tool)" in first["wipe_disk"].content
        assert "pending_approval (requires_approval)" in first["send_email"].content
        assert "pending_approval" in first["page_oncall"].content
        # A person approves the email with a signed decision; the page is left to expire.
        held = {json.loads(p.read_text())["tool"]: p.stem for p in approvals.glob("ap_*.json")}
        decide_file(held["send_email"], decided_by="ops lead", approve=True,
                    approvals_dir=approvals, ledger_path=tmp_path / "gov.sqlite")
        time.sleep(1.3)
        # Turn two: the model repeats its calls with the same ids: add is the same action
        # (recorded, not run again), the email runs now, the page has expired.
        server.reply(tool_calls=[call("add", {"a": 1, "b": 2}, "call_add"),
                                 call("send_email", {"to": "ops@example.com"}, "call_mail"),
                                 call("page_oncall", {"message": "disk"}, "call_page")])
        server.reply("Done: 3, and the email went out; the page expired.")
        second = tool_messages(agent.invoke({"messages": [("user", "Try again.")]}))
        assert second["add"].content == "3"
        assert second["send_email"].content == "sent to ops@example.com"
        assert "rejected (expired)" in second["page_oncall"].content
        # A retried govern of the same key straight from the client: still one execution.
        again = gate.govern("add", {"a": 1, "b": 2}, idempotency_key="thread-1:call_add")
        assert (again.result, again.replayed) == (3, True)
        run_id = gate.run_id
    ran = effects.read_text().split()
    assert sorted(ran) == ["add", "send_email"]  # each once; wipe and page never
    assert gate.closed["outcome"] == "incomplete"  # no answer was given to the gate
    (events,) = (tmp_path / "runs" / run_id).glob("events.jsonl")
    records = [json.loads(line)["record"] for line in events.read_text().splitlines()]
    assert sorted(r["tool"] for r in records if r["event"] == "gate_requested") == [
        "page_oncall", "send_email"]
    assert any(r.get("what") == "replayed" for r in records)
    # Concurrent calls still make a stream whose every record lies inside its step, with
    # each tool_result right after its tool_call.
    step = None
    for before, record in zip([None, *records[:-1]], records, strict=True):
        if record["event"] == "step_started":
            step = record["index"]
        elif "index" in record:
            assert record["index"] == step, record
        if record["event"] == "tool_result":
            assert before["event"] == "tool_call" and before["tool"] == record["tool"]
    verified = evalkit("verify", tmp_path / "runs")
    assert verified.returncode == 0 and "1 verified" in verified.stderr, verified.stderr


@pytest.mark.slow
def test_the_same_tool_call_sync_and_async_is_one_action(tmp_path: Path) -> None:
    import asyncio

    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY), "utf-8")
    effects = tmp_path / "effects.txt"
    with Client(policy, ledger=tmp_path / "gov.sqlite", runs="none",
                env={**os.environ, "PYTHONPATH": str(ROOT)}) as gate:
        add = governed_tools(gate, make_tools(effects)[:1], key_prefix="t")[0]
        call_ = {"type": "tool_call", "id": "c1", "name": "add", "args": {"a": 1, "b": 2}}
        assert asyncio.run(add.ainvoke(call_)).content == "3"
        assert add.invoke(call_).content == "3"
    assert effects.read_text() == "add\n"
