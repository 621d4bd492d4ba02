"""A recorded agent replayed: its own loop runs again, its client is served the recording.

Recorded against the chat server, then replayed with the server gone: the same answer,
the same tool calls, nothing dialled, ``replay_of`` and ``drift`` in the new run's meta
as a built-in replay writes them; a changed prompt is drift, not a refusal; a replay
that asks for more than was recorded ends ``incomplete`` saying so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import evalkit.record as record
from evalkit.errors import EvalkitError
from tests.record.test_mission import CLIENT_KEY, agent_loop, queue_times
from tests.runtime.chat_server import ChatServer, closed_port_url

openai = pytest.importorskip("openai")


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def meta_of(run: Path) -> dict[str, Any]:
    return json.loads((run / "meta.json").read_text("utf-8"))["meta"]


def recorded(tmp_path: Path, *, stream: bool) -> Path:
    with ChatServer() as server:
        queue_times(server)
        client = record.wrap_openai(openai.OpenAI(base_url=server.base_url, api_key=CLIENT_KEY,
                                                  max_retries=0))
        with record.mission("What is 17 times 23?", runs=tmp_path / "recorded") as m:
            agent_loop(client, m, stream=stream)
    return tmp_path / "recorded" / str(m.run_id)


def offline_client() -> Any:
    return record.wrap_openai(openai.OpenAI(base_url=closed_port_url(), api_key=CLIENT_KEY,
                                            max_retries=0))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_replay_runs_the_agent_again_with_no_endpoint(tmp_path, stream):
    source = recorded(tmp_path, stream=stream)
    # Named by the folder above it: the run with this objective is found there.
    with record.mission("What is 17 times 23?", runs=tmp_path / "replayed",
                        replay=tmp_path / "recorded") as m:
        answer = agent_loop(offline_client(), m, stream=stream)
    assert answer == "17 times 23 is 391." and m.outcome == "answered"
    run = tmp_path / "replayed" / str(m.run_id)
    meta = meta_of(run)
    assert meta["replay_of"] == source.name
    assert meta["drift"] == {"first": None, "calls": 2, "served": 2, "recorded": 2}
    assert meta["ran_off_end"] is None
    then, now = lines(source / "tools.jsonl"), lines(run / "tools.jsonl")
    assert [(t.get("tool"), t.get("arguments")) for t in now] == \
        [(t.get("tool"), t.get("arguments")) for t in then]
    replies = [line["reply"] for line in lines(run / "model.jsonl")]
    assert [r["content"] for r in replies] == [r["reply"]["content"]
                                               for r in lines(source / "model.jsonl")]


@pytest.mark.slow
def test_a_changed_prompt_is_drift_and_running_off_the_end_is_incomplete(tmp_path):
    recorded(tmp_path, stream=False)
    client = offline_client()
    with record.mission("What is 17 times 23?", runs=tmp_path / "replayed",
                        replay=tmp_path / "recorded") as m:
        for _ in range(2):
            client.chat.completions.create(model="m-test", messages=[
                {"role": "user", "content": "What is 17 times 24?"}])
        with pytest.raises(Exception, match="ran off the end of its recording at model call 3"):
            client.chat.completions.create(model="m-test", messages=[])
    meta = meta_of(tmp_path / "replayed" / str(m.run_id))
    assert meta["drift"]["first"]["call"] == 1 and meta["drift"]["first"]["message"] == 0
    assert meta["ran_off_end"] == {"call": 3, "kind": "mission", "recorded": 2}
    assert meta["outcome"] == "incomplete" and meta["reason"].startswith(
        "the replay ran off the end of its recording")


def test_a_replay_of_an_objective_never_recorded_is_refused_in_one_sentence(tmp_path):
    recorded(tmp_path, stream=False)
    with pytest.raises(EvalkitError, match="no recorded run below it has the objective"):
        with record.mission("something else", runs=tmp_path / "x",
                            replay=tmp_path / "recorded"):
            pass
