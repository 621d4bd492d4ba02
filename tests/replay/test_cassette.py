"""HTTP cassettes: the openai backend's exchanges recorded with vcrpy, replayed with no server."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.errors import EvalkitError
from evalkit.runtime.command import mission_command
from evalkit.runtime.mission import MissionSettings
from tests.replay.conftest import STUB, Done, Lab, without_ids
from tests.runtime.chat_server import ChatServer

KEY = "sk-cassette-secret-0123456789abcdef"


def _queue(server: ChatServer) -> None:
    server.reply(None, tool_calls=[{"id": "c1", "type": "function", "function": {
        "name": "mcp_add", "arguments": '{"a": 2, "b": 40}'}}],
        usage={"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16})
    server.reply(None, tool_calls=[{"id": "c2", "type": "function", "function": {
        "name": "mission_answer", "arguments": '{"text": "42"}'}}])


def _mission(lab: Lab, base_url: str, cassette: Path, *, stream: bool,
             record_mode: str | None = None, objective: str = "add 2 and 40") -> Done:
    return lab.launch(MissionSettings(
        objective=objective, provider="openai", model="m", api_base=base_url, api_key=KEY,
        stream=stream, protocol="native", mcp_stdio=(STUB,), cassette=str(cassette),
        record_mode=record_mode))


@pytest.mark.slow
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_cassette_recorded_against_the_server_replays_with_it_stopped(
        lab: Lab, stream: bool) -> None:
    cassette = lab.root / "chat.yaml"
    with ChatServer() as server:
        _queue(server)
        recorded = _mission(lab, server.base_url, cassette, stream=stream)
        base_url = server.base_url
        assert len(server.requests) == 2
    assert recorded.meta["outcome"] == "answered"
    text = cassette.read_text(encoding="utf-8")
    assert KEY not in text and "authorization" not in text.lower()
    assert ("text/event-stream" in text) is stream
    assert text.count("uri: http://127.0.0.1") == 2
    replayed = _mission(lab, base_url, cassette, stream=stream, record_mode="none")
    assert without_ids(replayed.records) == without_ids(recorded.records)
    assert replayed.events("answer")[0]["text"] == "42"
    assert cassette.read_text(encoding="utf-8") == text  # playing back writes nothing


@pytest.mark.slow
def test_mode_none_fails_loudly_on_an_unrecorded_request(lab: Lab) -> None:
    cassette = lab.root / "chat.yaml"
    with ChatServer() as server:
        _queue(server)
        _mission(lab, server.base_url, cassette, stream=True)
        base_url = server.base_url
    # a different prompt is a request the cassette never saw
    missed = _mission(lab, base_url, cassette, stream=True, record_mode="none",
                      objective="add 3 and 40")
    finished = missed.records[-1]
    assert finished["outcome"] == "incomplete"
    assert "CassetteMiss" in finished["reason"] and str(cassette) in finished["reason"]
    assert "POST /v1/chat/completions" in finished["reason"]
    assert not any(r["event"] == "model_state" for r in missed.records)  # no wait, no retry
    result = CliRunner().invoke(mission_command, [
        "add 3 and 40", "--provider", "openai", "--model", "m", "--api-base", base_url,
        "--protocol", "native", "--mcp-stdio", STUB, "--cassette", str(cassette),
        "--record-mode", "none", "--unsandboxed"], env=lab.env())
    assert result.exit_code == 0, result.output
    assert "Error: the model call failed: CassetteMiss: cassette" in result.stderr


def test_cassette_settings_are_checked_at_the_door(lab: Lab) -> None:
    with pytest.raises(EvalkitError, match="does not exist"):
        _mission(lab, "http://127.0.0.1:9/v1", lab.root / "none.yaml", stream=True,
                 record_mode="none")
    with pytest.raises(EvalkitError, match="vcrpy's record modes"):
        _mission(lab, "http://127.0.0.1:9/v1", lab.root / "c.yaml", stream=True,
                 record_mode="sometimes")
    with pytest.raises(EvalkitError, match="--provider scripted makes none"):
        lab.launch(MissionSettings(objective="x", provider="scripted", script="s.json",
                                   cassette="c.yaml"))
    with pytest.raises(EvalkitError, match="--record-mode needs --cassette"):
        lab.launch(MissionSettings(objective="x", provider="scripted", script="s.json",
                                   record_mode="none"))
