"""Folders as the harness writes them (docs/INTERFACES.md), built for report and diff tests.

``measure`` is written in parallel by another part of evalkit; these fixtures
follow its documented format: ``matrix.json`` (format evalkit-matrix, version 1)
with provenance, baseline, rows and statistics, runs at
``DIR/<row>/rep<n>/<key>/`` and one ``report.json`` per repeat.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalkit.eval import stats
from evalkit.eval.score import score
from evalkit.eval.suite import Suite, load_suite
from evalkit.report.markdown import write_report
from tests._stream_builders import (
    answer,
    call,
    finished,
    grounding,
    mission,
    started,
    step,
    write_stream,
    write_suite,
)

#: A mission's run: "pass", "fail" (wrong tool), "ungrounded" (grounding failed), or None (no run).
Shape = str | None


def run_records(shape: str, *, tokens: int = 120, unsupported: list[str] | None = None) -> list[dict]:
    tool = "mcp.echo" if shape == "fail" else "mcp.add"
    grounded = shape != "ungrounded"
    g = grounding(grounded)
    if not grounded:
        g.update(unsupported=unsupported or ["4,218,000"],
                 checks=[{"check": "identifiers", "verdict": "supported"},
                         {"check": "figures", "verdict": "unsupported"}])
    else:
        g.update(checks=[{"check": "identifiers", "verdict": "supported"},
                         {"check": "figures", "verdict": "supported"}])
    outcome = "answered" if grounded else "answered_with_caveat"
    done = finished(outcome)
    done["usage"]["total_tokens"] = tokens
    return [started(), step(1), *call(1, tool, {"a": 2, "b": 3}), step(2), g,
            answer("The sum is 5.", outcome), done]


def make_suite(path: Path, train: int = 5, test: int = 3, **top: Any) -> Path:
    missions = [mission(f"t{i}", split="train", expects_tools=["mcp.add"],
                        expects_outcome="answered", expects_grounded=True) for i in range(train)]
    missions += [mission(f"h{i}", split="test", expects_tools=["mcp.add"],
                         answer_must_match=["(?i)sum is 5"]) for i in range(test)]
    top.setdefault("flags", ["chaining"])
    top.setdefault("rubric_changes", [
        {"date": "2026-10-01", "key": "t0", "what": "must state the sum", "why": "older"},
        {"date": "2026-11-30", "key": "h1", "what": "must name the source", "why": "newest"},
    ])
    return write_suite(path, missions, **top)


def write_runs(folder: Path, suite: Suite, shape: Callable[[str], Shape], **kw: Any) -> Path:
    for m in suite.missions:
        s = shape(m.key)
        if s is not None:
            write_stream(folder / m.key / "events.jsonl", run_records(s, **kw))
    return folder


def score_folder(folder: Path, suite: Suite) -> dict[str, Any]:
    report = score(suite, runs=folder).to_dict()
    write_report(report, folder)
    return report


def run_folder(folder: Path, suite_path: Path, shape: Callable[[str], Shape]) -> Path:
    """A ``run --out`` folder: runs, report.json/md and run.json."""
    suite = load_suite(suite_path)
    write_runs(folder, suite, shape)
    score_folder(folder, suite)
    (folder / "run.json").write_text(json.dumps({
        "suite": suite.name, "suite_path": str(suite_path), "commit": "abc1234",
        "date": "2026-11-30T09:00:00Z", "spawn": ["evalkit", "mission", "--api-key", "[withheld]"],
        "jobs": 2, "timeout": 60, "split": "all"}), encoding="utf-8")
    return folder


def measure_folder(folder: Path, suite_path: Path, rows: dict[str, Callable[[str, int], Shape]],
                   repeat: int = 3, statistics: bool = True,
                   skipped: dict[str, str] | None = None) -> Path:
    """A ``measure --out`` folder; ``rows`` maps a row name to shape(key, rep)."""
    suite = load_suite(suite_path)
    matrix_rows, reports = [], {}
    for name, shape in rows.items():
        reps = []
        for n in range(1, repeat + 1):
            rep = folder / name / f"rep{n}"
            write_runs(rep, suite, lambda key, n=n, shape=shape: shape(key, n),
                       tokens=120 + 40 * len(matrix_rows))
            reports[(name, n)] = score_folder(rep, suite)
            reps.append(f"{name}/rep{n}")
        matrix_rows.append({"name": name, "question": f"is {name} better than direct?",
                            "delta": {"flags": [] if name == "direct" else [f"--{name}"]},
                            "status": "ran", "reps": reps})
    for name, reason in (skipped or {}).items():
        matrix_rows.append({"name": name, "question": f"is {name} worth it?", "delta": {},
                            "status": "skipped", "reason": reason, "reps": []})
    matrix = {"format": "evalkit-matrix", "version": 1,
              "provenance": {"suite": suite.name, "suite_path": str(suite_path),
                             "commit": "abc1234", "date": "2026-11-30T09:00:00Z",
                             "provider": "scripted", "model": "stub-model",
                             "endpoint": "http://user:hunter22@127.0.0.1:8000/v1?api_key=sk-abc",
                             "repeat": repeat, "bounds": {"max_steps": 8}, "split": "all"},
              "baseline": "direct", "rows": matrix_rows,
              "statistics": _statistics(rows, reports, repeat) if statistics else {}}
    (folder / "matrix.json").write_text(json.dumps(matrix, indent=2), encoding="utf-8")
    return folder


def _statistics(rows, reports, repeat):
    """What measure writes per row and half: ``stats.describe_cell`` plus ``vs_baseline``."""
    out: dict[str, Any] = {}
    words: dict[str, dict[str, dict[str, list[str]]]] = {}
    for name in rows:
        for n in range(1, repeat + 1):
            for v in reports[(name, n)]["verdicts"]:
                word = "pass" if v["passed"] else ("missing" if v["missing"] else "fail")
                words.setdefault(name, {}).setdefault(v["split"], {}).setdefault(
                    v["key"], []).append(word)
    for name in rows:
        out[name] = {}
        for half in ("train", "test"):
            cell = stats.describe_cell(words[name].get(half, {}))
            cell["vs_baseline"] = None if name == "direct" else stats.compare(
                words["direct"].get(half, {}), words[name].get(half, {}))
            out[name][half] = cell
    return out
