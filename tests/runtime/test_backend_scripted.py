"""The scripted backend: a model written down as data, refused when malformed."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.errors import EvalkitError
from evalkit.runtime import Reply, ScriptedBackend, ScriptExhausted


def test_items_are_served_in_order_then_the_script_is_exhausted(tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(
        "- plain text\n"
        "- content: {tool: fs, arguments: {action: list}}\n"
        "  usage: {prompt_tokens: 3}\n"
        "- tool_calls:\n"
        "    - {name: fs, arguments: {action: list}, id: c1, extra_content: {k: v}}\n",
        encoding="utf-8")
    backend = ScriptedBackend.from_file(script)
    ask = lambda: backend.complete([], None, kind="mission")  # noqa: E731
    assert ask() == Reply(content="plain text")
    second = ask()
    assert second.content == '{"tool": "fs", "arguments": {"action": "list"}}'
    assert second.usage == {"prompt_tokens": 3}
    assert ask().tool_calls == [{"name": "fs", "arguments": {"action": "list"}, "id": "c1",
                                 "extra_content": {"k": "v"}}]
    with pytest.raises(ScriptExhausted, match="script exhausted after 3 replies"):
        ask()


def test_a_served_reply_is_a_copy(tmp_path: Path) -> None:
    backend = ScriptedBackend([{"tool_calls": [{"name": "fs"}]}, "x"])
    backend.complete([], None, kind="mission").tool_calls[0]["id"] = "mutated"
    assert "id" not in backend._replies[0].tool_calls[0]


@pytest.mark.parametrize(("text", "problem"), [
    ("a: mapping", "must be a list"),
    ("- [1, 2]", "item 1 must be a string or a mapping"),
    ("- {contents: typo}", "unknown key(s) contents"),
    ("- {tool_calls: [{arguments: {}}]}", "tool_calls must be a list"),
    ("- {usage: 5}", "usage must be a mapping"),
    ("- [unclosed", "does not parse"),
])
def test_a_malformed_script_is_refused_naming_the_item(tmp_path: Path, text: str,
                                                       problem: str) -> None:
    script = tmp_path / "bad.yaml"
    script.write_text(text, encoding="utf-8")
    with pytest.raises(EvalkitError) as caught:
        ScriptedBackend.from_file(script)
    assert problem in caught.value.message


def test_a_missing_script_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EvalkitError, match="cannot read script"):
        ScriptedBackend.from_file(tmp_path / "absent.yaml")
