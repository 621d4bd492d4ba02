"""Swarm missions for the tests: the real loop, the stub MCP plane, only the model scripted.

``Lab.mission(items, *flags)`` runs ``evalkit mission --swarm`` in-process
(click's runner) with the scripted backend: the script lists the replies in
the order the runtime asks for them (triage, plan, each step's turns, the
synthesis). ``Lab.library(backend, parallel=...)`` runs ``SwarmRun`` directly
with any backend — ``BranchScripts`` keys replies by branch, which is how
parallel steps are made deterministic. Every record is checked against the
contract and the run directory against the stream.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalkit.contract import conforms
from evalkit.grounding import parse_grammar
from evalkit.runtime import Bounds, ScriptedBackend
from evalkit.runtime.backends import Reply
from evalkit.runtime.command import mission_command
from evalkit.runtime.governance.skills import load_manifest
from evalkit.runtime.run import RunOutcome
from evalkit.runtime.swarm import SwarmRun
from evalkit.runtime.tools import NoSandbox, ResultStore, ToolPlane
from evalkit.store.reader import read_stream
from evalkit.store.runstore import RunStore
from evalkit.store.sink import EventSink
from tests._agent import STUB, LeftBehind, answer, call, read_jsonl  # noqa: F401 (re-exported)

SKILL = Path(__file__).resolve().parents[2] / "suites" / "stub" / "SKILL.md"
REVENUE = "What was the Q3 2024 revenue in EUR?"


def route(word: str) -> str:
    return json.dumps({"route": word})


def plan(*steps: tuple[str, str, int] | tuple[str, str, int, list[str]]) -> str:
    out = []
    for step in steps:
        item: dict[str, Any] = {"id": step[0], "goal": step[1], "rung": step[2]}
        if len(step) > 3:
            item["needs"] = step[3]
        out.append(item)
    return json.dumps({"steps": out})


#: The revenue mission staged: two reads on rung 1, the product on rung 2.
REVENUE_PLAN = plan(("s1", "read the final shipments table asset.7f3a", 1),
                    ("s2", "read the unit pricing asset.19c2", 1),
                    ("s3", "multiply the units by the average price", 2, ["s1", "s2"]))
S1 = [call("mcp.read_asset", asset_id="asset.7f3a"), answer("12,481 units (asset.7f3a)")]
S2 = [call("mcp.read_asset", asset_id="asset.19c2"),
      answer("average unit price EUR 338.0 (asset.19c2)")]
S3 = [call("mcp.multiply", a=12481, b=338.0), answer("12,481 x 338.0 = 4218578.0")]
SYNTHESIS = answer("Q3 2024 revenue was EUR 4,218,578.0: 12,481 units (asset.7f3a) at an "
                   "average unit price of EUR 338.0 (asset.19c2).")
#: The direct loop's turns for the same mission.
DIRECT = [call("mcp.read_asset", asset_id="asset.7f3a"),
          call("mcp.read_asset", asset_id="asset.19c2"),
          call("mcp.multiply", a=12481, b=338.0), SYNTHESIS]


@dataclass
class Done(LeftBehind):
    """One finished swarm mission and what it left behind."""

    records: list[dict[str, Any]]
    run_dir: Path | None
    exit_code: int = 0
    output: str = ""
    outcome: RunOutcome | None = None

    def events(self, name: str, branch: Any = ...) -> list[dict[str, Any]]:
        return [r for r in self.records if r["event"] == name
                and (branch is ... or r.get("branch") == branch)]

    @property
    def steps(self) -> list[dict[str, Any]]:
        return self.events("step_started")

    @property
    def meta(self) -> dict[str, Any]:
        assert self.run_dir is not None
        return json.loads((self.run_dir / "meta.json").read_text(encoding="utf-8"))["meta"]


    def branch_of_calls(self) -> list[tuple[str, str | None]]:
        return [(c["kind"], c["request"]["extra"].get("branch")) for c in self.model_calls]


def check(done: Done) -> None:
    """Every record conforms; one ordered stream; the store holds the sink's records."""
    for record in done.records:
        assert conforms(record) == [], record
    names = [r["event"] for r in done.records]
    assert names[0] == "mission_started" and names[-1] == "mission_finished"
    assert names.count("mission_finished") == 1 and names.count("mission_started") == 1
    indexes = [r["index"] for r in done.steps]
    assert indexes == list(range(len(indexes))), indexes  # unique, increasing, gap-free
    assert done.records[-1]["steps"] == len(indexes)
    opened: dict[int, Any] = {}
    for record in done.records:  # a turn's records follow its step_started, same branch
        if record["event"] == "step_started":
            opened[record["index"]] = record.get("branch")
        elif "index" in record and record["event"] != "model_state":
            assert record["index"] in opened, record
            assert opened[record["index"]] == record.get("branch"), record
    if done.run_dir is None:
        return
    assert read_stream(done.run_dir).records == done.records
    envelopes = read_jsonl(done.run_dir / "events.jsonl")
    assert [e["seq"] for e in envelopes] == list(range(1, len(envelopes) + 1))
    calls = done.model_calls
    assert [c["call"] for c in calls] == list(range(1, len(calls) + 1))
    dispatched = sorted(json.dumps([t["tool"], t["arguments"]], sort_keys=True)
                        for t in done.tool_lines if t["call"] > 0)
    results = sorted(json.dumps([r["tool"], r["arguments"]], sort_keys=True)
                     for r in done.events("tool_result"))
    assert dispatched == results


class BranchScripts:
    """A scripted model keyed by branch: each lane is served its own list, in order.

    ``scripts[None]`` serves the turn-level calls (triage, plan, synthesis),
    ``scripts["direct"]`` the direct loop, ``scripts["s1"]`` step s1, ….
    ``on_ask`` (branch, kind) runs before each reply (a test's hook).
    """

    provider = "scripted"
    model = "branch-scripts"

    def __init__(self, scripts: dict[str | None, list[Any]], on_ask: Any = None) -> None:
        self.scripts = {key: ScriptedBackend(items) for key, items in scripts.items()}
        self.on_ask = on_ask
        self.asked: list[tuple[str | None, str]] = []
        self._lock = threading.Lock()

    def describe(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model}

    def for_branch(self, branch: str) -> _Lane:
        return _Lane(self, branch)

    def complete(self, messages: list[dict[str, Any]], tools: Any, *, kind: str) -> Reply:
        return self.serve(None, kind)

    def serve(self, branch: str | None, kind: str) -> Reply:
        with self._lock:
            self.asked.append((branch, kind))
        if self.on_ask is not None:
            self.on_ask(branch, kind)
        return self.scripts[branch].complete([], None, kind=kind)


class _Lane:
    def __init__(self, owner: BranchScripts, branch: str) -> None:
        self.owner, self.branch = owner, branch
        self.provider, self.model = owner.provider, owner.model

    def describe(self) -> dict[str, Any]:
        return self.owner.describe()

    def complete(self, messages: list[dict[str, Any]], tools: Any, *, kind: str) -> Reply:
        return self.owner.serve(self.branch, kind)


@dataclass
class Lab:
    """A working folder with a run store; ``mission`` and ``library`` run swarm missions in it."""

    root: Path

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    def env(self) -> dict[str, str]:
        return {"EVALKIT_RUNS": str(self.runs), "EVALKIT_AUDIT": "off",
                "EVALKIT_APPROVALS": "off", "EVALKIT_SANDBOX": "none"}

    def script(self, items: list[Any], name: str = "script.json") -> Path:
        path = self.root / name
        path.write_text(json.dumps(items), encoding="utf-8")
        return path

    def mission(self, items: list[Any], *flags: str, objective: str = REVENUE,
                events: Path | None = None, skill: bool = True, swarm: bool = True) -> Done:
        """``evalkit mission OBJECTIVE --swarm --script … --mcp-stdio STUB FLAGS…``."""
        number = len(list(self.root.glob("script-*.json")))
        events = events or self.root / f"events-{number}.jsonl"
        events.parent.mkdir(parents=True, exist_ok=True)
        args = [objective, "--script", str(self.script(items, f"script-{number}.json")),
                "--mcp-stdio", STUB, "--events", str(events), *flags]
        if swarm:
            args.append("--swarm")
        if skill:
            args += ["--skill", str(SKILL)]
        result = self.invoke(args)
        records = read_jsonl(events)
        run_id = records[0].get("run_id") if records else None
        done = Done(records, self.runs / run_id if run_id else None, result.exit_code,
                    result.output)
        if records:
            check(done)
        return done

    def invoke(self, args: list[str]) -> Any:
        """``evalkit mission ARGS`` in-process, in the lab's working folder."""
        work = self.root / "work"
        work.mkdir(exist_ok=True)
        cwd = os.getcwd()
        os.chdir(work)
        try:
            return CliRunner().invoke(mission_command, args, env=self.env())
        finally:
            os.chdir(cwd)

    def library(self, model: Any, *, parallel: int = 1, steps: int = 0,
                objective: str = REVENUE, grounded: bool = True, **options: Any) -> Done:
        """``SwarmRun`` over a real plane, store and sink, with any backend."""
        work = self.root / "work"
        work.mkdir(exist_ok=True)
        events = self.root / f"lib-{len(list(self.root.glob('lib-*')))}.jsonl"
        store = RunStore(self.runs)
        results = ResultStore()
        grammar = parse_grammar(load_manifest(SKILL).grounding) if grounded else None
        with ToolPlane(root=work, results=results, mcp_stdio=[STUB],
                       sandbox=NoSandbox()) as plane, EventSink.open(str(events)) as sink:
            outcome = SwarmRun(model, plane, parallel=parallel, bounds=Bounds(steps=steps),
                               store=store, sink=sink, results=results, grounding=grammar,
                               **options).run(objective)
        assert outcome.error is None, outcome.error
        done = Done(read_jsonl(events), store.path_of(outcome.run_id), outcome=outcome)
        check(done)
        return done


@pytest.fixture
def lab(tmp_path: Path) -> Lab:
    return Lab(tmp_path)
