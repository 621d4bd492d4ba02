"""Fixtures for the mission loop: real parts everywhere, only the model scripted.

``mission`` runs the real ``Run`` against a real ``ToolPlane`` (built-ins
plus the stub MCP server over stdio when asked), a real ``RunStore`` and a
real ``EventSink``; what comes back is the outcome, the records as the sink
got them, and the run directory — already checked for conformance and for
the recording holding every model and tool call.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from evalkit.contract import conforms
from evalkit.runtime import Bounds, CancelToken, Run, RunOutcome, ScriptedBackend
from evalkit.runtime.backends import ModelBackend
from evalkit.runtime.tools import NoSandbox, ResultStore, ToolPlane
from evalkit.store.reader import loads, read_stream
from evalkit.store.runstore import RunStore
from evalkit.store.sink import EventSink
from tests._agent import STUB, LeftBehind, read_jsonl  # noqa: F401 (re-exported)


@dataclass
class Mission(LeftBehind):
    """One finished mission and everything it left behind."""

    outcome: RunOutcome
    records: list[dict[str, Any]]
    run_dir: Path | None



def check_recording(mission: Mission) -> None:
    """Every record conforms; the store holds the sink's records, every model and tool call."""
    for record in mission.records:
        assert conforms(record) == [], record
    assert mission.records[0]["event"] == "mission_started"
    assert mission.records[-1]["event"] == "mission_finished"
    assert sum(r["event"] == "mission_finished" for r in mission.records) == 1
    if mission.run_dir is None:
        return
    # As the stream reader reads the sink's lines (a lone surrogate is U+FFFD to it).
    assert read_stream(mission.run_dir).records == [loads(json.dumps(r)) for r in mission.records]
    envelopes = read_jsonl(mission.run_dir / "events.jsonl")
    assert [e["seq"] for e in envelopes] == list(range(1, len(envelopes) + 1))
    calls = mission.model_calls
    assert [c["call"] for c in calls] == list(range(1, len(calls) + 1))
    assert len([c for c in calls if "error" not in c["reply"]]) == mission.outcome.usage["calls"]
    dispatches = [line for line in mission.tool_lines if line["call"] > 0]
    results = mission.events("tool_result")
    assert [(d["tool"], d["arguments"]) for d in dispatches] == [
        (r["tool"], r["arguments"]) for r in results]
    assert mission.tool_lines[0]["call"] == 0 and "catalogue" in mission.tool_lines[0]


RunMission = Callable[..., Mission]


@pytest.fixture
def mission(tmp_path: Path) -> RunMission:
    """``mission(script, **options)`` -> a checked ``Mission``.

    ``script`` is a list of script items (written to a YAML file and loaded
    the way ``--script`` loads it) or a ready ``ModelBackend``.
    """
    counter = iter(range(1, 1000))

    def run(script: list[Any] | ModelBackend, *, objective: str = "do the thing",
            protocol: str = "json", bounds: Bounds | None = None, mcp: bool = True,
            record: bool = True, root: Path | None = None,
            cancel_token: CancelToken | None = None, profile: str | None = None,
            whole: bool = True, pricing: Any = None) -> Mission:
        n = next(counter)
        if isinstance(script, list):
            path = tmp_path / f"script{n}.yaml"
            path.write_text(json.dumps(script), encoding="utf-8")  # JSON is YAML
            model: ModelBackend = ScriptedBackend.from_file(path)
        else:
            model = script
        work = root or tmp_path / f"root{n}"
        work.mkdir(exist_ok=True)
        events = tmp_path / f"events{n}.jsonl"
        store = RunStore(tmp_path / "runs") if record else None
        results = ResultStore()
        with ToolPlane(root=work, results=results, mcp_stdio=[STUB] if mcp else [],
                       sandbox=NoSandbox()) as plane, EventSink.open(str(events)) as sink:
            outcome = Run(model, plane, bounds=bounds, store=store, sink=sink,
                          protocol=protocol, results=results, profile=profile,
                          cancel_token=cancel_token, pricing=pricing).run(objective)
        run_dir = store.path_of(outcome.run_id) if store and outcome.run_id else None
        done = Mission(outcome, read_jsonl(events), run_dir)
        if whole:  # False: the recording is known to be short (the disk refused it)
            check_recording(done)
        return done

    return run
