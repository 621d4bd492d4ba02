"""--swarm-parallel: independent steps at once, one ordered stream, one step counter."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from evalkit.contract import conforms
from evalkit.runtime import CancelToken
from evalkit.store.reader import read_stream
from tests.swarm.conftest import (
    REVENUE_PLAN,
    S3,
    STUB,
    SYNTHESIS,
    BranchScripts,
    Done,
    Lab,
    answer,
    call,
    plan,
    route,
)

NAP = 0.5  # seconds each rung-1 step sleeps on the stub plane, so the two overlap


def sleepy(asset: str, summary: str) -> list[str]:
    return [call("mcp.sleep", seconds=NAP), call("mcp.read_asset", asset_id=asset),
            answer(summary)]


def scripts() -> dict[str | None, list[Any]]:
    return {None: [route("plan"), REVENUE_PLAN, SYNTHESIS],
            "s1": sleepy("asset.7f3a", "12,481 units (asset.7f3a)"),
            "s2": sleepy("asset.19c2", "average unit price EUR 338.0 (asset.19c2)"),
            "s3": list(S3)}


def lane(done: Done, branch: str) -> list[tuple[str, Any]]:
    return [(r["event"], r.get("tool")) for r in done.records if r.get("branch") == branch]


@pytest.mark.slow
def test_parallel_steps_run_at_once_and_keep_one_ordered_stream(lab: Lab) -> None:
    model = BranchScripts(scripts())
    done = lab.library(model, parallel=2)
    assert done.outcome is not None and done.outcome.outcome == "answered"
    for branch, asset in (("s1", "asset.7f3a"), ("s2", "asset.19c2")):
        assert lane(done, branch) == [
            ("step_started", None), ("tool_call", "mcp.sleep"), ("tool_result", "mcp.sleep"),
            ("step_started", None), ("tool_call", "mcp.read_asset"),
            ("tool_result", "mcp.read_asset"), ("step_started", None)], branch
        read = [r for r in done.events("tool_result", branch) if r["tool"] == "mcp.read_asset"]
        assert read[0]["arguments"] == {"asset_id": asset}
    # Both lanes were under way before either's first tool came back: they overlapped.
    names = [(r["event"], r.get("branch")) for r in done.records]
    first_result = min(names.index(("tool_result", "s1")), names.index(("tool_result", "s2")))
    assert names.index(("step_started", "s1")) < first_result
    assert names.index(("step_started", "s2")) < first_result
    # Rung 2 starts only when rung 1 has settled; the synthesis comes last.
    s3_start = names.index(("step_started", "s3"))
    assert all(b not in ("s1", "s2") for _, b in names[s3_start:])
    assert [r["event"] for r in done.records[-3:]] == ["grounding", "answer", "mission_finished"]
    assert done.events("grounding")[0]["grounded"] is True
    assert done.records[-1]["steps"] == 1 + 3 + 3 + 2 + 1
    calls = Counter(done.branch_of_calls())
    assert calls == {("plain", None): 2, ("mission", "s1"): 3, ("mission", "s2"): 3,
                     ("mission", "s3"): 2, ("mission", None): 1}
    assert done.meta["swarm"]["parallel"] == 2
    assert [s["id"] for s in done.meta["swarm"]["steps"]] == ["s1", "s2", "s3"]


@pytest.mark.slow
def test_parallel_steps_through_the_command_line_order_independent_facts(lab: Lab) -> None:
    """The plain scripted backend serves lanes in whatever order they ask: only facts that
    hold for every interleaving are asserted (``check`` holds the stream to one sequence)."""
    two = plan(("s1", "read the final shipments table", 1), ("s2", "read the pricing", 1))
    done = lab.mission([route("plan"), two, call("mcp.read_asset", asset_id="asset.7f3a"),
                        call("mcp.read_asset", asset_id="asset.19c2"),
                        answer("12,481 units (asset.7f3a)"),
                        answer("EUR 338.0 (asset.19c2)"),
                        answer("12,481 units (asset.7f3a) at EUR 338.0 each (asset.19c2).")],
                       "--swarm-parallel", "2")
    assert done.exit_code == 0, done.output
    assert done.records[-1]["outcome"] == "answered"
    assert sorted(r["arguments"]["asset_id"] for r in done.events("tool_result")) == [
        "asset.19c2", "asset.7f3a"]
    assert {r.get("branch") for r in done.events("tool_result")} <= {"s1", "s2"}
    assert {s.get("branch") for s in done.steps} == {None, "s1", "s2"}
    assert done.records[-1]["steps"] == 6 and len(done.model_calls) == 7
    assert done.events("answer")[0] == done.records[-2] and "branch" not in done.records[-2]
    assert done.events("grounding")[0]["grounded"] is True
    assert done.meta["swarm"]["parallel"] == 2


@pytest.mark.slow
def test_a_step_budget_in_parallel_halts_the_siblings_and_closes_once(lab: Lab) -> None:
    done = lab.library(BranchScripts(scripts()), parallel=2, steps=4)
    finished = done.records[-1]
    assert finished["outcome"] == "budget_exhausted" and "branch" not in finished
    assert finished["budget"] == {"which": "steps", "limit": 4, "spent": 4}
    assert [s["index"] for s in done.steps] == [0, 1, 2, 3]
    assert not done.events("answer") and not done.events("step_started", "s3")
    ended = {s["id"]: s["outcome"] for s in done.meta["swarm"]["steps"]}
    assert "budget_exhausted" in ended.values() and "answered" not in ended.values()


@pytest.mark.slow
def test_a_cancel_in_a_parallel_step_winds_the_run_up(lab: Lab) -> None:
    token = CancelToken()

    def cancel_on_second_turn(branch: str | None, kind: str) -> None:
        if branch == "s2" and model.asked.count(("s2", "mission")) == 2:
            token.cancel()

    model = BranchScripts(scripts(), on_ask=cancel_on_second_turn)
    done = lab.library(model, parallel=2, cancel_token=token)
    finished = done.records[-1]
    assert finished["outcome"] == "incomplete" and finished["reason"] == "cancelled"
    assert "branch" not in finished and not done.events("answer")
    assert not done.events("step_started", "s3")


@pytest.mark.slow
def test_parallel_one_is_serial(lab: Lab) -> None:
    done = lab.library(BranchScripts(scripts()), parallel=1)
    branches = [s.get("branch") for s in done.steps]
    assert branches == [None, "s1", "s1", "s1", "s2", "s2", "s2", "s3", "s3", None]


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["1", "2"])
def test_sigterm_during_steps_winds_the_run_up(tmp_path: Path, parallel: str) -> None:
    two = plan(("s1", "wait", 1), ("s2", "wait too", 1))
    script = tmp_path / "s.json"
    script.write_text(json.dumps([route("plan"), two, call("mcp.sleep", seconds=10),
                                  call("mcp.sleep", seconds=10), answer("a"), answer("b"),
                                  answer("c")]))
    events = tmp_path / "events.jsonl"
    env = {**os.environ, "EVALKIT_RUNS": str(tmp_path / "runs"), "EVALKIT_AUDIT": "off",
           "EVALKIT_APPROVALS": "off"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "evalkit.cli", "mission", "wait twice", "--swarm",
         "--swarm-parallel", parallel, "--script", str(script), "--mcp-stdio", STUB,
         "--events", str(events), "--unsandboxed"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while '"tool_call"' not in (events.read_text() if events.exists() else ""):
        assert time.monotonic() < deadline, proc.kill() or proc.communicate()
        time.sleep(0.05)
    time.sleep(0.3)  # the sleeps are under way
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert time.monotonic() - started < 8
    assert proc.returncode == 0, err
    records = [json.loads(line) for line in events.read_text().splitlines()]
    assert not any(r["event"] == "tool_result" and r["ok"] for r in records)  # cut short
    assert all(conforms(r) == [] for r in records)
    assert [r["event"] for r in records].count("mission_finished") == 1
    finished = records[-1]
    assert finished["event"] == "mission_finished" and "branch" not in finished
    assert finished["outcome"] == "incomplete" and finished["reason"] == "cancelled"
    assert read_stream(tmp_path / "runs" / records[0]["run_id"]).records == records
