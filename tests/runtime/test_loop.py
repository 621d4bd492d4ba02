"""The real loop against the real stub MCP server over stdio, driven by scripted models.

Every mission here goes through ``check_recording`` (conftest): each record
conforms, the run store holds exactly the sink's records, model.jsonl holds
every model call and tools.jsonl every dispatch.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from evalkit.runtime import Bounds, CancelToken, Reply
from tests.runtime.conftest import RunMission

USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}


def call(tool: str, **arguments: Any) -> str:
    return json.dumps({"tool": tool, "arguments": arguments})


def answer(text: str) -> str:
    return json.dumps({"answer": text})


@pytest.mark.slow
def test_a_mission_chains_two_tools_and_answers(mission: RunMission) -> None:
    done = mission([
        {"content": call("mcp.add", a=4210, b=3902), "usage": USAGE},
        {"content": call("mcp.echo", text="sum is 8112"), "usage": USAGE},
        {"content": answer("The sum is 8112."), "usage": USAGE},
    ], objective="add the first two regions")
    assert done.names == ["mission_started", "step_started", "tool_call", "tool_result",
                          "step_started", "tool_call", "tool_result", "step_started", "answer",
                          "mission_finished"]
    started = done.records[0]
    assert started["schema_version"] == 1 and started["objective"] == "add the first two regions"
    assert "mcp.add" in started["catalogue"] and started["gated"] == []
    assert started["max_steps"] == 0 and started["history"] == 0
    assert started["run_id"] == done.outcome.run_id and started["audit_ref"] is None
    assert "protocol" not in started
    add, echo = done.events("tool_result")
    assert add["ok"] and json.loads(add["output"])["result"] == 8112
    assert (add["handle"], echo["handle"]) == ("r1", "r2")
    assert add["exit_code"] == 0 and add["error"] is None and add["truncated"] is False
    assert "call" not in add and done.events("tool_call")[0]["usage"] == USAGE
    assert [s["index"] for s in done.events("step_started")] == [0, 1, 2]
    finished = done.records[-1]
    assert finished["outcome"] == "answered" and finished["steps"] == 3
    assert finished["usage"] == {"prompt_tokens": 300, "completion_tokens": 60,
                                 "total_tokens": 360, "calls": 3}
    assert finished["elapsed_s"] >= 0
    assert done.outcome.answer == "The sum is 8112."
    # the second model call saw the first result, keyed by its handle
    second = done.model_calls[1]["request"]["messages"]
    assert second[-1]["role"] == "user" and "handle r1" in second[-1]["content"]
    assert "8112" in second[-1]["content"]
    meta = json.loads((done.run_dir / "meta.json").read_text())
    assert meta["meta"]["outcome"] == "answered"


@pytest.mark.slow
def test_an_unknown_tool_is_rejected_and_costs_a_turn(mission: RunMission) -> None:
    done = mission([
        {"content": call("mcp.teleport", where="mars"), "usage": USAGE},
        answer("I cannot teleport."),
    ])
    [rejected] = done.events("reply_rejected")
    assert rejected["index"] == 0 and rejected["tool"] == "mcp.teleport"
    assert "no tool named 'mcp.teleport'" in rejected["problem"]
    assert rejected["usage"] == USAGE
    assert done.events("tool_call") == [] and done.records[-1]["steps"] == 2
    told = done.model_calls[1]["request"]["messages"][-1]["content"]
    assert "not accepted" in told and "mcp.teleport" in told
    assert [line["call"] for line in done.tool_lines] == [0]  # nothing was dispatched


@pytest.mark.slow
def test_an_unparseable_reply_is_rejected_with_the_problem(mission: RunMission) -> None:
    done = mission(["I'll call the echo tool {\"tool\": \"mcp.echo\", \"arguments\": {",
                    "```json\n" + call("mcp.echo", text="hi") + "\n```",
                    "Done: " + answer("hi")])
    [rejected] = done.events("reply_rejected")
    assert "not valid JSON" in rejected["problem"] and "tool" not in rejected
    assert "usage" not in rejected  # the script reported none
    assert done.events("tool_result")[0]["output"] == "hi"
    assert done.outcome.outcome == "answered" and done.outcome.answer == "hi"
    assert done.records[-1]["usage"] == {"calls": 3}


@pytest.mark.slow
def test_native_protocol_dispatches_two_calls_in_one_turn(mission: RunMission) -> None:
    extra = {"vendor": {"signature": "abc=="}}
    done = mission([
        {"tool_calls": [{"name": "mcp_add", "arguments": {"a": 1, "b": 2}, "id": "t1",
                         "extra_content": extra},
                        {"name": "mcp_echo", "arguments": '{"text": "x"}', "id": "t2"}],
         "usage": USAGE},
        {"tool_calls": [{"name": "mission_answer", "arguments": {"text": "3 and x"}}]},
    ], protocol="native")
    assert done.records[0]["protocol"] == "native"
    calls, results = done.events("tool_call"), done.events("tool_result")
    assert [(c["tool"], c.get("call")) for c in calls] == [("mcp.add", None), ("mcp.echo", 1)]
    assert [(r["tool"], r.get("call")) for r in results] == [("mcp.add", None), ("mcp.echo", 1)]
    assert calls[0]["usage"] == USAGE and "usage" not in calls[1]
    assert {c["index"] for c in calls} == {0}
    request = done.model_calls[1]["request"]
    assistant = request["messages"][2]
    assert assistant["tool_calls"][0]["extra_content"] == extra  # echoed verbatim
    assert [m["tool_call_id"] for m in request["messages"][3:5]] == ["t1", "t2"]
    assert "mission_answer" in [t["function"]["name"] for t in request["extra"]["tools"]]
    assert done.outcome.answer == "3 and x"


@pytest.mark.slow
def test_a_tool_registered_mid_run_is_noticed_at_the_next_step(mission: RunMission) -> None:
    done = mission([
        call("mcp.unlock", name="vault_read"),  # changes the server's tool list: dev
        call("mcp.vault_read", key="alpha"),
        answer("read it"),
    ], profile="dev")
    steps = done.events("step_started")
    assert "catalogue" not in steps[0]
    assert "mcp.vault_read" in steps[1]["catalogue"]
    assert "mcp.vault_read" not in done.records[0]["catalogue"]
    assert "catalogue" not in steps[2]  # only when it changed
    vault = done.events("tool_result")[1]
    assert vault["tool"] == "mcp.vault_read" and vault["ok"]
    catalogues = [line for line in done.tool_lines if line["call"] == 0]
    assert len(catalogues) == 2
    assert "mcp.vault_read" in [t["name"] for t in catalogues[1]["catalogue"]]
    told = done.model_calls[1]["request"]["messages"][-1]["content"]
    assert "catalogue changed" in told and "mcp.vault_read" in told


@pytest.mark.slow
def test_a_step_budget_runs_out(mission: RunMission) -> None:
    done = mission([call("mcp.echo", text="again")] * 5, bounds=Bounds(steps=2))
    finished = done.records[-1]
    assert finished["outcome"] == "budget_exhausted"
    assert finished["budget"] == {"which": "steps", "limit": 2, "spent": 2}
    assert finished["max_steps"] == 2 and done.records[0]["max_steps"] == 2
    assert len(done.events("tool_result")) == 2 and len(done.model_calls) == 2


@pytest.mark.slow
def test_a_failing_tool_and_a_long_result_are_ordinary_results(mission: RunMission) -> None:
    done = mission([call("mcp.fail", reason="on purpose"),
                    call("mcp.read_asset", asset_id="asset.c4e1"),
                    call("mission_result", handle="r2", path="rows.3.name"),
                    answer("dogwood-1")], mcp=True)
    failed, long, looked = done.events("tool_result")
    assert not failed["ok"] and "on purpose" in failed["error"]
    assert long["truncated"] is True and len(long["output"]) > 4000
    seen = done.model_calls[2]["request"]["messages"][-1]["content"]
    assert "mission_result" in seen and len(seen) < len(long["output"])
    assert looked["ok"] and "dogwood-1" in looked["output"]


def test_a_script_that_runs_out_ends_incomplete_saying_so(mission: RunMission) -> None:
    done = mission([call("fs", action="list")], mcp=False)
    finished = done.records[-1]
    assert finished["outcome"] == "incomplete"
    assert finished["reason"] == "script exhausted after 1 replies"
    assert "error" in done.model_calls[-1]["reply"]


class SlowModel:
    """Answers after a pause, so a clock bound can run out between steps."""

    provider, model = "slow", "slow-1"

    def __init__(self, pause: float, replies: list[str]) -> None:
        self.pause, self.replies = pause, list(replies)

    def describe(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model}

    def complete(self, messages: list[dict[str, Any]], tools: Any, *, kind: str) -> Reply:
        time.sleep(self.pause)
        return Reply(content=self.replies.pop(0))


@pytest.mark.slow
def test_a_seconds_budget_runs_out(mission: RunMission) -> None:
    model = SlowModel(0.15, [call("fs", action="list")] * 10)
    done = mission(model, bounds=Bounds(seconds=0.4), mcp=False)
    finished = done.records[-1]
    assert finished["outcome"] == "budget_exhausted"
    assert finished["budget"]["which"] == "seconds" and finished["budget"]["limit"] == 0.4
    assert finished["budget"]["spent"] >= 0.4


@pytest.mark.slow
def test_cancel_from_another_thread_winds_the_run_up(mission: RunMission) -> None:
    token = CancelToken()
    threading.Timer(0.25, token.cancel).start()
    done = mission(SlowModel(0.1, [call("fs", action="list")] * 50), mcp=False,
                   cancel_token=token)
    assert done.records[-1]["outcome"] == "incomplete"
    assert done.records[-1]["reason"] == "cancelled"
    assert 1 <= done.records[-1]["steps"] < 10


def test_a_crashing_model_still_closes_the_stream(mission: RunMission) -> None:
    class Broken(SlowModel):
        def complete(self, messages: list[dict[str, Any]], tools: Any, *, kind: str) -> Reply:
            raise RuntimeError("socket on fire")

    done = mission(Broken(0, []), mcp=False)
    assert done.records[-1]["outcome"] == "incomplete"
    assert "socket on fire" in done.records[-1]["reason"]


def test_nothing_recorded_means_no_run_id(mission: RunMission) -> None:
    done = mission([answer("fine")], mcp=False, record=False)
    assert "run_id" not in done.records[0] and done.outcome.run_id is None
    assert done.outcome.outcome == "answered"
