"""Orphans: a run whose process died is closed by the next mission; a live run never is."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from evalkit.contract import conforms
from evalkit.gate.certificates import read_certificates, recompute
from evalkit.store.orphans import STALE_AFTER_S, close_orphans
from evalkit.store.reader import read_stream
from evalkit.store.runstore import RunStore, RunWriter
from tests.replay.conftest import Lab, answer, digest


def _abandoned(store: RunStore, *, steps: int = 2, age_s: float = STALE_AFTER_S + 5,
               extra: list[dict[str, Any]] | None = None) -> Path:
    """A run left the way a killed process leaves it: no mission_finished, lock free."""
    writer = store.create({"objective": "lost"})
    writer.append({"event": "mission_started", "schema_version": 1, "objective": "lost",
                   "catalogue": [], "gated": [], "max_steps": 9, "history": 0})
    for index in range(steps):
        writer.append({"event": "step_started", "index": index})
    for record in extra or []:
        writer.append(record)
    writer.close()
    _age(writer.path, age_s)
    return writer.path


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path / "meta.json", (then, then))


def _meta(path: Path) -> dict[str, Any]:
    return json.loads((path / "meta.json").read_text())["meta"]


def test_the_next_mission_closes_an_orphan_and_leaves_a_live_run_alone(lab: Lab) -> None:
    store = RunStore(lab.runs)
    orphan = _abandoned(store, steps=2)
    live_path = _abandoned(store, steps=1)
    live = RunWriter(live_path)  # this process holds its lock: it is alive
    try:
        before = digest(live_path)
        done = lab.record([answer("hi")], mcp=False)
        assert done.meta["outcome"] == "answered"
        records = read_stream(orphan).records
        last = records[-1]
        assert last == {"event": "mission_finished", "outcome": "incomplete", "steps": 2,
                        "max_steps": 9, "reason": "orphaned"}
        assert conforms(last) == []
        meta = _meta(orphan)
        assert meta["outcome"] == "incomplete" and meta["orphaned_at"].endswith("Z")
        # closed as the mission closes its own run: with certificates that hold of its records
        assert (done.run_dir / "certificates.jsonl").is_file()
        assert read_certificates(orphan) and recompute(orphan) == []
        assert digest(live_path) == before
    finally:
        live.close()


def test_a_fresh_unfinished_run_is_not_an_orphan_yet(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    young = _abandoned(store, age_s=5)
    before = digest(young)
    assert close_orphans(store) == []
    assert digest(young) == before


def test_a_closed_run_is_never_touched(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    closed = _abandoned(store, extra=[{"event": "mission_finished", "outcome": "answered",
                                       "steps": 2, "max_steps": 9}])
    before = digest(closed)
    assert close_orphans(store) == []
    assert digest(closed) == before


def test_a_resumed_stretch_that_died_is_closed_again(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    path = _abandoned(store, steps=1, extra=[
        {"event": "mission_finished", "outcome": "incomplete", "steps": 1, "max_steps": 9},
        {"event": "step_started", "index": 1, "resumed": {"from_seq": 3, "steps_replayed": 1}}])
    assert close_orphans(store) == [path.name]
    records = read_stream(path).records
    assert records[-1]["event"] == "mission_finished" and records[-1]["steps"] == 2
    assert close_orphans(store) == []  # closed once, never twice


def test_kept_runs_are_spared_and_the_count_is_returned(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    first, second = _abandoned(store), _abandoned(store)
    assert close_orphans(store, keep={first.name}) == [second.name]
    assert read_stream(first).records[-1]["event"] == "step_started"
