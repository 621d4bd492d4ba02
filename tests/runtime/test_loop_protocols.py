"""The two protocols, read in isolation: what counts as a call, an answer, a rejection."""

from __future__ import annotations

import json

import pytest

from evalkit.runtime import Answer, Call, Rejection, Reply
from evalkit.runtime.json_protocol import JsonProtocol, find_object
from evalkit.runtime.native_protocol import ANSWER_TOOL, NativeProtocol

OFFERED = ["mcp.echo", "fs"]


@pytest.mark.parametrize("text", [
    '{"tool": "mcp.echo", "arguments": {"text": "hi"}}',
    '```json\n{"tool": "mcp.echo", "arguments": {"text": "hi"}}\n```',
    'Let me echo it.\n{"tool": "mcp.echo", "arguments": {"text": "hi"}}\nThat should work.',
])
def test_one_object_is_found_whatever_wraps_it(text: str) -> None:
    assert JsonProtocol().read(Reply(content=text), OFFERED) == [
        Call("mcp.echo", {"text": "hi"})]


@pytest.mark.parametrize(("text", "problem"), [
    ("", "empty"),
    ("just prose", "holds no JSON object"),
    ('{"tool": "fs", "arguments": {"action": "read"}', "not valid JSON"),
    ('{"tool": "fs"} then {"answer": "x"}', "holds 2 JSON objects"),
    ('{"thought": "hmm"}', 'neither "tool" nor "answer"'),
    ('{"tool": "fs", "answer": "x"}', "not both"),
    ('{"tool": "fs", "arguments": [1]}', "must be a JSON object"),
    ('{"answer": null}', "null"),
])
def test_ambiguous_or_broken_replies_are_rejected_with_the_problem(text: str,
                                                                   problem: str) -> None:
    [item] = JsonProtocol().read(Reply(content=text), OFFERED)
    assert isinstance(item, Rejection)
    assert problem in item.problem


def test_an_unknown_tool_is_rejected_naming_it() -> None:
    [item] = JsonProtocol().read(Reply(content='{"tool": "mcp.nope"}'), OFFERED)
    assert item == Rejection(item.problem, tool="mcp.nope")
    assert "mcp.echo" in item.problem  # the model is told what is offered


def test_a_json_answer_that_is_not_a_string_is_kept_as_json_text() -> None:
    assert JsonProtocol().read(Reply(content='{"answer": 42}'), OFFERED) == [Answer("42")]
    assert find_object('{"answer": "a {brace} inside"}')[0] == {"answer": "a {brace} inside"}


def test_native_names_are_mapped_to_function_names_and_back() -> None:
    protocol = NativeProtocol()
    tools = protocol.tools([{"name": "mcp.echo", "description": "d", "parameters": {}},
                            {"name": "mcp_echo", "description": "d", "parameters": {}}])
    names = [t["function"]["name"] for t in tools]
    assert names == ["mcp_echo", "mcp_echo_2", ANSWER_TOOL]
    reply = Reply(tool_calls=[{"name": "mcp_echo", "arguments": '{"text": "a"}', "id": "c1"},
                              {"name": "mcp_echo_2", "arguments": {}, "id": "c2"}])
    assert protocol.read(reply, ["mcp.echo", "mcp_echo"]) == [
        Call("mcp.echo", {"text": "a"}, id="c1"), Call("mcp_echo", {}, id="c2")]


def test_native_answer_must_come_alone_and_bad_arguments_are_rejected() -> None:
    protocol = NativeProtocol()
    protocol.tools([{"name": "fs", "description": "", "parameters": {}}])
    reply = Reply(tool_calls=[{"name": "fs", "arguments": "{not json"},
                              {"name": ANSWER_TOOL, "arguments": '{"text": "done"}'}])
    first, second = protocol.read(reply, ["fs"])
    assert isinstance(first, Rejection) and "not valid JSON" in first.problem
    assert first.tool == "fs" and first.id
    assert isinstance(second, Rejection) and "only call" in second.problem
    alone = Reply(tool_calls=[{"name": ANSWER_TOOL, "arguments": '{"text": "done"}'}])
    [answer] = protocol.read(alone, ["fs"])
    assert isinstance(answer, Answer) and answer.text == "done"


def test_native_reply_without_calls_is_rejected_and_told_as_a_user_turn() -> None:
    protocol = NativeProtocol()
    [item] = protocol.read(Reply(content="I think the answer is 4"), [])
    assert isinstance(item, Rejection) and item.id is None
    assert protocol.rejection_message(item)["role"] == "user"


def test_native_echo_keeps_provider_extras_verbatim() -> None:
    protocol = NativeProtocol()
    protocol.tools([{"name": "fs", "description": "", "parameters": {}}])
    extra = {"google": {"thought_signature": "sig=="}}
    reply = Reply(content=None, tool_calls=[
        {"name": "fs", "arguments": {"action": "list"}, "id": "c9", "extra_content": extra}])
    items = protocol.read(reply, ["fs"])
    message = protocol.assistant_message(reply, items)
    assert message["tool_calls"] == [{
        "id": "c9", "type": "function", "extra_content": extra,
        "function": {"name": "fs", "arguments": json.dumps({"action": "list"})}}]
