"""Regrade: every recorded run under a folder, replayed under a new skill manifest.

The grounding-grammar experiment at folder scale. Each run directory under
``DIR`` is replayed (recorded model replies, recorded tool results) with the
manifests given here, so grounding runs fresh under the new grammar; the
replay lands under ``OUT`` at the same relative place — a run at
``DIR/k/runs/run_x`` is replayed into the store ``OUT/k/runs/``, a run
directory ``DIR/k`` into ``OUT/k/`` — so ``evalkit score --runs OUT`` finds
one run per mission key exactly as it does under ``DIR``.

Replays run in worker processes (``jobs``), each replaying many runs in
process: nothing is spawned per run. Runs whose replay drifted, ran off the
end of its recording or could not be replayed are listed in
``OUT/regrade.json`` and handed back, never dropped.

With a pricing file (``--pricing``) every replayed call is priced from the
tokens its recording reported, so the replays (and ``score --runs OUT``) carry
what the runs cost at today's prices; the recordings under ``DIR`` are only read.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from evalkit import parallel
from evalkit.errors import EvalkitError
from evalkit.store import layout
from evalkit.store.replace import replace_file

REGRADE_FORMAT = "evalkit-regrade"
REGRADE_VERSION = 1
REPORT_FILE = "regrade.json"


def find_runs(root: Path) -> list[Path]:
    """Every run directory under ``root`` (events.jsonl beside meta.json), sorted."""
    found = []
    for here, dirs, files in os.walk(root):
        if layout.EVENTS_FILE in files and layout.META_FILE in files:
            found.append(Path(here))
            dirs[:] = []  # a run directory holds no other run
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
    return sorted(found)


def destination(out: Path, rel: Path) -> Path:
    """The store a run at ``rel`` (relative to the source folder) is replayed into."""
    if layout.is_run_id(rel.name):
        return out / rel.parent
    return out / rel


def check_skills(skills: Sequence[str]) -> None:
    """Load the manifests once up front, so a bad one is one sentence, not N failures."""
    if not skills:
        return
    try:
        from evalkit.runtime.governance.skills import load_all
    except ImportError:  # pragma: no cover - the governance package ships with the runtime
        raise EvalkitError("--skill needs the skill-manifest loader "
                           "(evalkit.runtime.governance.skills), which this install lacks") from None
    load_all(skills)


def replay_one(source: str, store: str, skills: Sequence[str],
               pricing: str | None = None) -> dict[str, Any]:
    """Replay one run into ``store`` (in this process); a row of the regrade report."""
    from evalkit.runtime.mission import MissionSettings, launch
    from evalkit.runtime.replay.recording import read_lines
    from evalkit.store.reader import file_bytes

    row: dict[str, Any] = {"source": source, "replay": None, "outcome_before": None,
                           "outcome_after": None, "drift": None, "ran_off_end": None,
                           "error": None}
    try:  # a meta.json that is a FIFO is refused here, not waited on
        meta = json.loads(file_bytes(Path(source) / layout.META_FILE) or b"{}")
    except (EvalkitError, ValueError):
        meta = None
    if isinstance(meta, dict) and isinstance(meta.get("meta"), dict):
        row["outcome_before"] = meta["meta"].get("outcome")
    if row["outcome_before"] is None:
        try:
            lines = read_lines(Path(source) / layout.EVENTS_FILE)
        except EvalkitError:
            lines = []  # the replay below says what is wrong with it
        finished = [r for r in lines if (r.get("record") or r).get("event") == "mission_finished"]
        row["outcome_before"] = (finished[-1].get("record") or finished[-1]).get("outcome") \
            if finished else None
    env = {**os.environ, layout.RUNS_ENV: store}
    try:
        launched = launch(MissionSettings(objective="", replay=source, skills=tuple(skills),
                                          pricing=pricing),
                          environ=env, durable=False)  # re-creatable: no fsync per line
    except EvalkitError as exc:
        row["error"] = exc.message
        return row
    except Exception as exc:  # a bug: this run's row says so, the others go on
        row["error"] = f"internal error: {type(exc).__name__}: {exc}"
        return row
    outcome = launched.outcome
    notes = launched.notes
    row.update(replay=str(Path(store) / outcome.run_id) if outcome.run_id else None,
               outcome_after=outcome.outcome, drift=(notes.get("drift") or {}).get("first"),
               ran_off_end=notes.get("ran_off_end"))
    if pricing is not None:
        row["cost"] = outcome.usage.get("cost")
    if outcome.error:
        row["error"] = f"the loop crashed: {outcome.reason}"
    return row


def _task(shared: tuple[tuple[str, ...], str | None], item: tuple[str, str]) -> dict[str, Any]:
    skills, pricing = shared
    return replay_one(*item, skills, pricing)


def regrade(source: Path, out: Path, *, skills: Sequence[str] = (), jobs: int | None = None,
            on_done: Callable[[dict[str, Any]], None] | None = None,
            pricing: str | Path | None = None) -> dict[str, Any]:
    """Replay every run under ``source`` into ``out``; writes and returns the report.

    ``pricing``: a pricing file every replayed call is priced at (each row then says the
    run's ``cost``)."""
    source, out = Path(source), Path(out)
    if not source.is_dir():
        raise EvalkitError(f"{source} is not a folder of runs")
    if out.resolve() == source.resolve() or out.resolve().is_relative_to(source.resolve()):
        raise EvalkitError(f"--out {out} lies inside {source}: give a folder outside it")
    if out.exists() and not out.is_dir():
        raise EvalkitError(f"--out {out} is a file: give a new or empty folder")
    if out.exists() and any(out.iterdir()):
        raise EvalkitError(f"--out {out} is not empty: give a new or empty folder")
    check_skills(skills)
    if pricing is not None:
        from evalkit.pricing import load

        load(pricing)  # a bad file is one sentence here, not one per run
        pricing = str(Path(pricing).resolve())
    runs = find_runs(source)
    if not runs:
        raise EvalkitError(f"no run directories under {source} (none holds events.jsonl "
                           "beside meta.json)")
    out.mkdir(parents=True, exist_ok=True)
    tasks = [(str(run), str(destination(out, run.relative_to(source)))) for run in runs]
    for _, store in tasks:
        Path(store).mkdir(parents=True, exist_ok=True)
    workers = max(1, min(jobs or parallel.cores(), len(tasks)))
    started = time.monotonic()
    rows = []
    for row in parallel.ordered(_task, tasks, shared=(tuple(skills), pricing), workers=workers,
                                   cycles=True):
        rows.append(row)
        if on_done is not None:
            on_done(row)
    carry_judgments(source, rows)
    report = _report(source, out, skills, workers, rows, time.monotonic() - started)
    replace_file(out / REPORT_FILE, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return report


def carry_judgments(source: Path, rows: list[dict[str, Any]]) -> None:
    """A model judge's judgments of each recording (``judge/`` beside its run, or beside its
    mission's stream) go beside its replay, checked against their seal and sealed again
    with this machine's key: they are filed under the answer's digest, so they grade the
    replay exactly when it gave the same answer, and the replay is scored with no model.
    Altered ones are not carried (the replay is then "not judged")."""
    from evalkit.store.seal import Checker, entry_of, signer_or_none, write_manifest

    checker = Checker.for_scoring([source])
    signer = None
    for row in rows:
        if not row["replay"]:
            continue
        found = _judgments_of(Path(row["source"]), source)
        if found is None:
            continue
        data = found.read_bytes()
        if checker.altered(found, data) is not None:
            continue
        folder = Path(row["replay"]) / layout.JUDGE_DIR
        folder.mkdir(exist_ok=True)
        (folder / layout.JUDGE_FILE).write_bytes(data)
        signer = signer or signer_or_none()[0]
        if signer is not None:
            write_manifest(folder, {layout.JUDGE_FILE: entry_of(data, chained=True)}, signer,
                           kind="judgments")


def _judgments_of(run: Path, source: Path) -> Path | None:
    """The judgments nearest a recorded run: beside it, or in a folder above it (up to the
    source folder), where the mission's stream is."""
    for folder in [run, *run.parents]:
        path = folder / layout.JUDGE_DIR / layout.JUDGE_FILE
        if path.is_file():
            return path
        if folder == source:
            return None
    return None


def _report(source: Path, out: Path, skills: Sequence[str], jobs: int,
            rows: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    for row in rows:
        row["source"] = str(Path(row["source"]).relative_to(source))
        if row["replay"]:
            row["replay"] = str(Path(row["replay"]).relative_to(out))
        row["outcome_changed"] = (row["error"] is None
                                  and row["outcome_after"] != row["outcome_before"])
    rows.sort(key=lambda r: r["source"])
    return {
        "format": REGRADE_FORMAT, "version": REGRADE_VERSION,
        "source": str(source), "out": str(out), "skills": list(skills), "jobs": jobs,
        "seconds": round(seconds, 3),
        "totals": {
            "runs": len(rows),
            "replayed": sum(1 for r in rows if r["error"] is None),
            "failed": sum(1 for r in rows if r["error"] is not None),
            "drifted": sum(1 for r in rows if r["drift"]),
            "ran_off_end": sum(1 for r in rows if r["ran_off_end"]),
            "outcome_changed": sum(1 for r in rows if r["outcome_changed"]),
        },
        "runs": rows,
    }
