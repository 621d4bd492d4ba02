"""Replay through the real loop: the recorded stream back, drift measured, nothing dialled."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from evalkit.errors import EvalkitError
from evalkit.runtime.backends import Reply
from evalkit.runtime.mission import MissionSettings
from evalkit.runtime.replay import NOT_IN_RECORDING, RecordedPlane, ReplayBackend
from evalkit.runtime.tools import ResultStore
from evalkit.store.runstore import RunWriter
from tests.replay.conftest import STUB, Lab, answer, call, digest, without_ids

#: A json-protocol mission over the stub plane: two tools, a rejected reply, an answer.
JSON_SCRIPT = [
    call("mcp.add", a=2, b=3),
    "I think I will just say it",  # rejected: no JSON object
    call("mcp.echo", text="five"),
    call("mcp.add", a=2, b=3),  # the same call again: served its second recorded result
    {"content": answer("2 + 3 = 5"), "usage": {"prompt_tokens": 11, "completion_tokens": 3}},
]

#: A native-protocol mission: two calls in one turn, then the answer.
NATIVE_SCRIPT = [
    {"tool_calls": [{"name": "mcp_add", "arguments": '{"a": 2, "b": 3}', "id": "c1"},
                    {"name": "mcp_echo", "arguments": '{"text": "five"}', "id": "c2",
                     "signature": "kept"}],
     "usage": {"prompt_tokens": 5}},
    {"tool_calls": [{"name": "mission_answer", "arguments": '{"text": "5"}', "id": "c3"}]},
]


@pytest.mark.slow
def test_a_replay_gives_the_recorded_stream_back_record_for_record(lab: Lab) -> None:
    original = lab.record(JSON_SCRIPT)
    replayed = lab.replay(original.launched.outcome.run_id)
    assert without_ids(replayed.records) == without_ids(original.records)
    assert replayed.records[0]["run_id"] != original.records[0]["run_id"]
    assert [r["event"] for r in original.records].count("reply_rejected") == 1
    assert replayed.events("mission_finished")[0]["usage"] == {
        "prompt_tokens": 11, "completion_tokens": 3, "calls": 5}
    # the replay's own recording holds the same exchanges, so it can be replayed in turn
    assert [(c["kind"], c["request"]["messages"], c["reply"]) for c in replayed.model_calls] == [
        (c["kind"], c["request"]["messages"], c["reply"]) for c in original.model_calls]
    assert [{k: v for k, v in t.items() if k != "at"} for t in replayed.tool_lines] == [
        {k: v for k, v in t.items() if k != "at"} for t in original.tool_lines]
    meta = replayed.meta
    assert meta["replay_of"] == original.launched.outcome.run_id
    assert meta["drift"] == {"first": None, "calls": 5, "served": 5, "recorded": 5}
    assert meta["ran_off_end"] is None
    assert meta["replay_tool_calls"] == {"recorded": 3, "served": 3, NOT_IN_RECORDING: 0}
    assert meta["outcome"] == "answered" and meta["provider"] == "replay"


@pytest.mark.slow
def test_the_native_protocol_replays_with_parallel_calls_and_echoed_extras(lab: Lab) -> None:
    original = lab.record(NATIVE_SCRIPT, protocol="native")
    replayed = lab.replay(original.run_dir)  # RUN given as a path this time
    assert without_ids(replayed.records) == without_ids(original.records)
    assert replayed.records[0]["protocol"] == "native"
    assert [r.get("call") for r in replayed.events("tool_call")] == [None, 1]
    assert replayed.meta["drift"]["first"] is None
    echoed = replayed.model_calls[1]["request"]["messages"][2]["tool_calls"][1]
    assert echoed["signature"] == "kept"


@pytest.mark.slow
def test_the_recording_is_never_written_to(lab: Lab) -> None:
    original = lab.record(JSON_SCRIPT)
    before = digest(original.run_dir)
    lab.replay(original.launched.outcome.run_id)
    lab.replay(original.launched.outcome.run_id, objective="something else entirely")
    assert digest(original.run_dir) == before


@pytest.mark.slow
def test_a_replay_of_a_replay_works(lab: Lab) -> None:
    original = lab.record(JSON_SCRIPT)
    first = lab.replay(original.launched.outcome.run_id)
    second = lab.replay(first.launched.outcome.run_id)
    assert without_ids(second.records) == without_ids(original.records)
    assert second.meta["replay_of"] == first.launched.outcome.run_id
    assert second.meta["drift"]["first"] is None


@pytest.mark.slow
def test_no_model_and_no_tool_plane_are_built(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    original = lab.record(JSON_SCRIPT)

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("a replay asked for a live part")

    monkeypatch.setattr("evalkit.runtime.backends.make_backend", refuse)
    monkeypatch.setattr("evalkit.runtime.tools.ToolPlane", refuse)
    monkeypatch.setattr("evalkit.runtime.backends.scripted.ScriptedBackend.complete", refuse)
    replayed = lab.replay(original.launched.outcome.run_id)
    assert without_ids(replayed.records) == without_ids(original.records)


@pytest.mark.slow
def test_a_changed_objective_is_drift_and_still_replays(lab: Lab) -> None:
    original = lab.record(JSON_SCRIPT)
    replayed = lab.replay(original.launched.outcome.run_id, objective="add 2 and 4")
    first = replayed.meta["drift"]["first"]
    assert first["call"] == 1 and first["kind"] == "mission" and first["message"] == 1
    assert '"add 2 and 3"' in first["detail"] and '"add 2 and 4"' in first["detail"]
    assert replayed.meta["outcome"] == "answered"  # measured, never refused
    assert replayed.records[0]["objective"] == "add 2 and 4"


@pytest.mark.slow
def test_a_changed_system_prompt_is_drift_at_call_1(lab: Lab) -> None:
    original = lab.record(JSON_SCRIPT)
    skill = lab.root / "SKILL.md"
    skill.write_text("---\nname: terse\n---\nAnswer in one short sentence.\n",
                     encoding="utf-8")
    replayed = lab.replay(original.launched.outcome.run_id, skills=(str(skill),))
    first = replayed.meta["drift"]["first"]
    assert (first["call"], first["kind"], first["message"]) == (1, "mission", 0)
    assert first["detail"].startswith("content of a system message differs")
    assert "Skill: terse" in first["detail"]
    assert replayed.launched.notes["drift"]["first"] == first


@pytest.mark.slow
def test_a_run_that_outgrows_its_recording_ends_incomplete_naming_the_call(lab: Lab) -> None:
    original = lab.record([call("mcp.add", a=1, b=n) for n in (1, 2, 3)], steps=3)
    assert original.meta["outcome"] == "budget_exhausted"
    replayed = lab.replay(original.launched.outcome.run_id, steps=10)
    finished = replayed.events("mission_finished")[0]
    assert finished["outcome"] == "incomplete"
    assert "ran off the end of its recording at model call 4" in finished["reason"]
    assert replayed.meta["ran_off_end"] == {"call": 4, "kind": "mission", "recorded": 3}
    assert replayed.meta["drift"] == {"first": None, "calls": 4, "served": 3, "recorded": 3}


@pytest.mark.slow
def test_live_tools_dispatch_against_the_recorded_plane(lab: Lab) -> None:
    original = lab.record(JSON_SCRIPT)
    replayed = lab.replay(original.launched.outcome.run_id, tools="live")
    assert without_ids(replayed.records) == without_ids(original.records)
    assert "replay_tool_calls" not in replayed.meta and replayed.meta["replay_tools"] == "live"


@pytest.mark.slow
def test_a_fork_continues_live_and_unrecorded_calls_are_refused(lab: Lab) -> None:
    original = lab.record(JSON_SCRIPT)
    fork = lab.replay(original.launched.outcome.run_id, live_from=1, provider="scripted",
                      script=lab.script([call("mcp.add", a=40, b=2), answer("42")], "fork.json"))
    results = fork.events("tool_result")
    assert results[0]["output"] == original.events("tool_result")[0]["output"]  # the prefix
    refused = results[1]
    assert refused["ok"] is False and refused["error"].startswith(NOT_IN_RECORDING)
    assert "mcp.add was never called with these arguments" in refused["error"]
    assert fork.events("answer")[0]["text"] == "42"
    assert fork.meta["forked_at_call"] == 2 and fork.meta["live_from"] == 1
    assert fork.meta["replay_tool_calls"][NOT_IN_RECORDING] == 1


@pytest.mark.slow
def test_a_live_run_and_an_unknown_run_are_refused(lab: Lab) -> None:
    original = lab.record(JSON_SCRIPT)
    with RunWriter(original.run_dir), pytest.raises(EvalkitError, match="still being written"):
        lab.replay(original.launched.outcome.run_id)
    for spec in ("run_nope", "../../etc", str(lab.root)):
        with pytest.raises(EvalkitError, match="no such run|not a run directory"):
            lab.replay(spec)


@pytest.mark.slow
def test_a_run_folders_copy_of_a_stream_is_refused_naming_the_recording_below(lab: Lab,
                                                                              tmp_path: Path) -> None:
    """``evalkit run`` keeps each mission's captured stream beside its run directory; replayed,
    the copy had no model calls and "ran off the end" with exit 0."""
    original = lab.record(JSON_SCRIPT)
    mission = tmp_path / "out" / "orientation"
    (mission / "runs").mkdir(parents=True)
    shutil.copytree(original.run_dir, mission / "runs" / original.run_dir.name)
    shutil.copy(original.run_dir / "events.jsonl", mission / "events.jsonl")
    with pytest.raises(EvalkitError, match="holds a copy of a mission's stream") as refused:
        lab.replay(str(mission))
    assert str(mission / "runs" / original.run_dir.name) in str(refused.value)
    replayed = lab.replay(str(mission / "runs" / original.run_dir.name))
    assert replayed.events("answer")[0]["text"] == original.events("answer")[0]["text"]


@pytest.mark.slow
def test_replay_is_refused_when_recording_is_off(lab: Lab) -> None:
    original = lab.record(JSON_SCRIPT)
    with pytest.raises(EvalkitError, match="recording is off"):
        lab.launch(MissionSettings(objective="", replay=str(original.run_dir)),
                   EVALKIT_RUNS="off")


# -- the two halves on their own ---------------------------------------------------------------


def _line(call_no: int, messages: list[dict[str, Any]], content: str) -> dict[str, Any]:
    return {"call": call_no, "kind": "mission", "request": {"messages": messages, "extra": {}},
            "reply": {"content": content, "tool_calls": [], "usage": None}}


def test_identical_prompts_are_served_in_order_never_twice() -> None:
    prompt = [{"role": "user", "content": "same"}]
    backend = ReplayBackend([_line(1, prompt, "A"), _line(2, prompt, "B")])
    replies = [backend.complete(list(prompt), None, kind="mission").content for _ in range(2)]
    assert replies == ["A", "B"]
    assert backend.drift()["first"] is None
    with pytest.raises(Exception, match="ran off the end of its recording at model call 3"):
        backend.complete(list(prompt), None, kind="mission")


def test_calls_are_served_by_ordinal_within_their_kind() -> None:
    review = {**_line(2, [], "progressing"), "kind": "plain"}
    backend = ReplayBackend([_line(1, [], "turn 1"), review, _line(3, [], "turn 2")])
    assert backend.complete([], None, kind="mission").content == "turn 1"
    assert backend.complete([], None, kind="mission").content == "turn 2"
    assert backend.complete([], None, kind="plain").content == "progressing"
    assert backend.remaining("mission") == 0


def test_the_recorded_plane_serves_each_call_its_results_in_recorded_order() -> None:
    def dispatch(n: int, text: str) -> dict[str, Any]:
        return {"call": n, "tool": "mcp.echo", "arguments": {"text": "x"},
                "result": {"exit_code": 0, "stdout": text, "stderr": "", "structured": None}}

    catalogue = {"call": 0, "catalogue": [{"name": "mcp.echo", "description": "",
                                           "parameters": {}, "scopes": ["mcp.call"],
                                           "plane": "mcp", "code": False}]}
    plane = RecordedPlane([catalogue, dispatch(1, "first"), dispatch(2, "second")],
                          ResultStore(), sandbox="bwrap")
    assert [d.name for d in plane.catalogue()] == ["mcp.echo"]
    assert plane.sandbox.name == "bwrap"
    assert plane.dispatch("mcp.echo", {"text": "x"}).output == "first"
    assert plane.dispatch("mcp.echo", {"text": "x"}).output == "second"
    spent = plane.dispatch("mcp.echo", {"text": "x"})
    assert not spent.ok and spent.exit_code is None
    assert spent.error.startswith(f"{NOT_IN_RECORDING}: mcp.echo was called 2 time(s)")
    never = plane.dispatch("mcp.echo", {"text": "y"})
    assert "was never called with these arguments" in never.error
    assert plane.stats() == {"recorded": 2, "served": 2, NOT_IN_RECORDING: 2}


def test_a_recorded_failure_fails_again_with_the_recorded_words() -> None:
    line = {**_line(1, [], ""), "reply": {"error": "the model endpoint did not answer"}}
    backend = ReplayBackend([line])
    with pytest.raises(Exception, match="^the model endpoint did not answer$"):
        backend.complete([], None, kind="mission")


def test_recorded_replies_are_copies(lab: Lab) -> None:
    backend = ReplayBackend([{**_line(1, [], ""), "reply": {
        "content": None, "tool_calls": [{"name": "f", "arguments": "{}"}], "usage": None}}])
    reply = backend.complete([], None, kind="mission")
    assert isinstance(reply, Reply)
    reply.tool_calls[0]["id"] = "mutated"
    assert "id" not in backend._queues["mission"][0]["reply"]["tool_calls"][0]


@pytest.mark.slow
def test_json_round_trip_of_meta_drift(lab: Lab) -> None:
    original = lab.record(JSON_SCRIPT)
    replayed = lab.replay(original.launched.outcome.run_id, objective="x")
    raw = json.loads((Path(replayed.run_dir) / "meta.json").read_text())
    assert set(raw["meta"]["drift"]) == {"first", "calls", "served", "recorded"}
    assert set(raw["meta"]["drift"]["first"]) == {"call", "kind", "message", "detail"}


STRICT_FIGURES = "---\nname: strict-figures\ngrounding:\n  number_pattern: '\\b\\d+\\b'\n---\n"


@pytest.mark.slow
def test_a_recorded_repair_turn_is_served_and_grounding_reruns(lab: Lab) -> None:
    skill = lab.root / "SKILL.md"
    skill.write_text(STRICT_FIGURES, encoding="utf-8")
    original = lab.record([call("mcp.add", a=20, b=22), answer("it is 43"), answer("it is 42")],
                          "add 20 and 22", skills=(str(skill),))
    grounding = original.events("grounding")
    assert [g["repairing"] for g in grounding] == [True, False] and grounding[-1]["grounded"]
    replayed = lab.replay(original.launched.outcome.run_id)  # the recorded skill carries over
    assert without_ids(replayed.records) == without_ids(original.records)
    assert replayed.meta["drift"]["first"] is None
    # under a manifest without a grammar the first answer stands: the repair is left unserved
    lenient = lab.root / "LENIENT.md"
    lenient.write_text("---\nname: strict-figures\n---\n", encoding="utf-8")
    relaxed = lab.replay(original.launched.outcome.run_id, skills=(str(lenient),))
    assert relaxed.events("answer")[0]["text"] == "it is 43"
    assert relaxed.events("grounding") == []
    assert relaxed.meta["drift"] == {"first": None, "calls": 2, "served": 2, "recorded": 3}


@pytest.mark.slow
def test_a_gated_run_replays_to_its_gate_without_waiting_or_asking_anyone(lab: Lab) -> None:
    approvals = lab.root / "approvals"
    original = lab.launch(MissionSettings(
        objective="add 2 and 3", provider="scripted", mcp_stdio=(STUB,),
        script=lab.script([call("mcp.add", a=2, b=3), answer("5")]), gate_tools=("mcp.add",),
        gate_wait=1.5), EVALKIT_APPROVALS=str(approvals))
    assert original.meta["outcome"] == "awaiting_approval"
    assert original.meta["elapsed_s"] >= 1.5  # it stood at its gate
    requests = sorted(p.name for p in approvals.rglob("*") if p.is_file())
    replayed = lab.launch(MissionSettings(objective="", replay=str(original.run_dir)),
                          EVALKIT_APPROVALS=str(approvals))
    assert without_ids(replayed.records) == without_ids(original.records)
    assert replayed.meta["elapsed_s"] < 1.5  # and the replay did not
    assert sorted(p.name for p in approvals.rglob("*") if p.is_file()) == requests
