"""Speed and weight of `evalkit report` and `evalkit diff`, against the targets of issue 9.

    python benchmarks/bench_report.py [--out benchmarks/out/report]

Targets: the HTML report of a 6-configuration × 3-repeat × 50-mission measure
renders in under 3 s and weighs under 2 MB; `diff` of two 10,000-run scorings
runs in under 2 s. The folders are synthetic but shaped as the harness writes
them (docs/INTERFACES.md): matrix.json, one report.json per row and repeat with
verdicts shaped like `ScoreReport.to_dict()`, and events files for the runs whose
grounding flips (the diff reads those for the tokens). Deterministic: seeded.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from evalkit.eval.verdict import KPI_NAMES

FLAGS = ("orientation", "chaining", "absence", "state", "boundary", "disambiguation",
         "submission", "synthesis", "routing", "partial_synthesis", "protocol_shape")
ROWS = ("direct", "swarm", "native", "grounding-figures", "grounding-claims", "grounding-planes")


def verdict(key: str, index: int, passed: bool, *, grounded: bool = True,
            rng: random.Random) -> dict[str, Any]:
    kpis = dict.fromkeys(KPI_NAMES)
    kpis.update(records=rng.randrange(8, 40), outcome="answered" if grounded
                else "answered_with_caveat", steps=rng.randrange(2, 9), max_steps=12,
                elapsed_s=round(rng.uniform(2, 40), 2), tokens=rng.randrange(800, 9000),
                model_calls=rng.randrange(2, 9), tool_calls=rng.randrange(1, 7), refusals=0,
                reply_rejected=rng.choice((0, 0, 0, 1)), staged=False, gate_requested=0,
                injected=0, human_interventions=rng.choice((0, 0, 0, 0, 1)), grounding_ran=True,
                grounded=grounded, verified=grounded, repairs=0 if grounded else 1,
                answer_chars=rng.randrange(80, 1200), protocol="json", profile="safe",
                sandbox="none", run_id=f"run_{key}", tools=["mcp.read_asset", "mcp.multiply"],
                skipped_lines=0)
    reasons = []
    if not passed:
        reasons = (["ended 'answered_with_caveat'; this mission wants answered",
                    "grounding says grounded=False; this mission wants True"] if not grounded
                   else [rng.choice(["never called mcp.multiply; it called ['mcp.read_asset']",
                                     "the answer does not match /4,?218,?578/",
                                     "2 replies could not be read; this mission allows 0"])])
    return {"key": key, "flag": FLAGS[index % len(FLAGS)],
            "split": "test" if index % 10 < 3 else "train", "passed": passed, "missing": False,
            "reasons": reasons,
            "needs_reader": {"must": [f"gives the figure asked for in case {key}",
                                      "names the table it came from"],
                             "must_not": ["states a figure no tool printed"]},
            "kpis": kpis, "source": f"{key}/events.jsonl"}


def report(suite: str, verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"format": "evalkit-score", "version": 1, "suite": suite, "split": "all",
            "passed": all(v["passed"] for v in verdicts), "halves": {"train": {}, "test": {}},
            "verdicts": verdicts}


def measure(folder: Path, rows: tuple[str, ...], repeat: int, missions: int, *, seed: int,
            flip_share: float = 0.0, streams: bool = False) -> None:
    """A measure folder; with ``flip_share`` > 0 a share of runs is grounded differently."""
    rng = random.Random(seed)
    keys = [f"m{i:05d}" for i in range(missions)]
    skill = {k: rng.random() for k in keys}
    folder.mkdir(parents=True, exist_ok=True)
    matrix_rows, statistics = [], {}
    for r, row in enumerate(rows):
        reps = []
        for n in range(1, repeat + 1):
            rep = folder / row / f"rep{n}"
            rep.mkdir(parents=True, exist_ok=True)
            vs = []
            for i, key in enumerate(keys):
                base = random.Random(f"{row}/{n}/{key}").random()
                passed = base < 0.35 + 0.5 * skill[key] + 0.02 * r
                grounded = True
                if flip_share and rng.random() < flip_share:
                    grounded, passed = False, False
                vs.append(verdict(key, i, passed, grounded=grounded, rng=rng))
                if streams:
                    write_stream(rep / key / "events.jsonl", grounded=grounded)
            (rep / "report.json").write_text(json.dumps(report("bench", vs)), encoding="utf-8")
            reps.append(f"{row}/rep{n}")
        matrix_rows.append({"name": row, "question": f"does {row} beat direct?",
                            "delta": {"flags": [] if row == "direct" else [f"--{row}"]},
                            "status": "ran", "reps": reps})
        statistics[row] = {}
    matrix = {"format": "evalkit-matrix", "version": 1,
              "provenance": {"suite": "bench", "commit": "0" * 12, "date": "2026-11-30T09:00:00Z",
                             "provider": "openai", "model": "bench-model",
                             "endpoint": "http://127.0.0.1:8000/v1", "repeat": repeat,
                             "bounds": {"max_steps": 12}, "split": "all"},
              "baseline": "direct", "rows": matrix_rows, "statistics": statistics}
    (folder / "matrix.json").write_text(json.dumps(matrix), encoding="utf-8")


def write_stream(path: Path, *, grounded: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    records = [
        {"event": "mission_started", "schema_version": 1, "objective": "q", "catalogue": [],
         "gated": [], "max_steps": 12, "history": 0},
        {"event": "grounding", "ran": True, "grounded": grounded, "verified": grounded,
         "repairs": 1, "repairing": False, "caveat": None,
         "unsupported": [] if grounded else ["4,218,000"], "silent": [], "uncited": [],
         "checks": [{"check": "figures", "verdict": "supported" if grounded else "unsupported"}]},
        {"event": "mission_finished", "outcome": "answered_with_caveat", "steps": 3,
         "max_steps": 12},
    ]
    path.write_text("".join(json.dumps({"seq": i, "at": "2026-11-30T09:00:00Z", "record": r})
                            + "\n" for i, r in enumerate(records, 1)), encoding="utf-8")


def timed(argv: list[str]) -> tuple[float, float, subprocess.CompletedProcess]:
    """Wall seconds, CPU seconds (user + system; steadier on a busy machine) and the result."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/report"))
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    evalkit = [sys.executable, "-m", "evalkit.cli"]

    big = args.out / "measure-6x3x50"
    measure(big, ROWS, 3, 50, seed=1)
    html = args.out / "measure-6x3x50.html"
    # In process: loading and rendering, matplotlib already imported (warm) and not (cold).
    from evalkit.report import folders
    from evalkit.report import html as render

    start = time.perf_counter()
    text = render.report_html(folders.load(big))
    cold = time.perf_counter() - start
    start = time.perf_counter()
    again = render.report_html(folders.load(big))
    warm = time.perf_counter() - start
    assert text == again, "the report is not deterministic"
    wall, cpu, done = timed([*evalkit, "report", str(big), "-o", str(html)])
    if done.returncode:
        print(done.stderr, file=sys.stderr)
        return 1
    size = html.stat().st_size
    print(f"report 6 configurations x 3 repeats x 50 missions: CLI {wall:.2f} s end to end "
          f"({cpu:.2f} s CPU; in process {cold:.2f} s first, {warm:.2f} s warm); "
          f"{size / 1e6:.2f} MB (targets: < 3 s, < 2 MB)")

    a, b = args.out / "diff-a", args.out / "diff-b"
    rows5 = ROWS[:5]
    measure(a, rows5, 4, 500, seed=2, streams=True)  # 5 × 4 × 500 = 10,000 runs
    measure(b, rows5, 4, 500, seed=2, flip_share=0.05, streams=True)
    wall, cpu, done = timed([*evalkit, "diff", str(a), str(b), "--json"])
    if done.returncode not in (0, 1):
        print(done.stderr, file=sys.stderr)
        return 1
    result = json.loads(done.stdout)
    counts = {h: c for h, c in result["counts"].items() if c["compared"]}
    compared = sum(c["compared"] for c in counts.values())
    flips = len(result["flips"])
    grounding = sum(1 for f in result["flips"] if f["grounding"])
    print(f"diff of two {compared:,}-run scorings: CLI {wall:.2f} s end to end ({cpu:.2f} s CPU); "
          f"{flips:,} flips, "
          f"{grounding:,} with grounding tokens read from their streams (target: < 2 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
