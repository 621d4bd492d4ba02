"""A mission runner with a grounding grammar and the supervisor as parameters.

The loop, the tool plane (built-ins plus the stub MCP server over stdio), the
run store and the sink are all real; only the model is a script. Every
mission goes through ``check_recording`` (each record conforms, the store
holds the sink's records, every model call — review calls too — and every
dispatch is recorded, usage counts every answered call).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalkit.grounding import Grammar
from evalkit.runtime import Bounds, Run, ScriptedBackend
from evalkit.runtime.tools import NoSandbox, ResultStore, ToolPlane
from evalkit.store.runstore import RunStore
from evalkit.store.sink import EventSink
from tests._agent import answer, call  # noqa: F401 (re-exported)
from tests.runtime.conftest import STUB, Mission, check_recording, read_jsonl

#: The stub's identifiers (asset.7f3a …) and a plain figure shape.
ASSET_IDS = r"\basset\.[0-9a-f]{4}\b"


def review(verdict: str, note: str | None = None) -> str:
    body: dict[str, Any] = {"verdict": verdict}
    if note is not None:
        body["note"] = note
    return json.dumps(body)


RunGrounded = Callable[..., Mission]


@pytest.fixture
def run_mission(tmp_path: Path) -> RunGrounded:
    """``run_mission(script, grammar=..., supervisor=True, ...)`` -> a checked ``Mission``."""
    counter = iter(range(1, 1000))

    def run(script: list[Any], *, grammar: Grammar | None = None, supervisor: bool = True,
            steps: int = 0, protocol: str = "json", mcp: bool = True, profile: str | None = None,
            objective: str = "how many units were shipped in Q3 2024?") -> Mission:
        n = next(counter)
        work = tmp_path / f"root{n}"
        work.mkdir()
        events = tmp_path / f"events{n}.jsonl"
        store = RunStore(tmp_path / "runs")
        results = ResultStore()
        with ToolPlane(root=work, results=results, mcp_stdio=[STUB] if mcp else [],
                       sandbox=NoSandbox()) as plane, EventSink.open(str(events)) as sink:
            outcome = Run(ScriptedBackend(script), plane,
                          bounds=Bounds(steps=steps, supervisor=supervisor), store=store,
                          sink=sink, protocol=protocol, results=results,
                          profile=profile, grounding=grammar).run(objective)
        run_dir = store.path_of(outcome.run_id) if outcome.run_id else None
        done = Mission(outcome, read_jsonl(events), run_dir)
        check_recording(done)
        return done

    return run
