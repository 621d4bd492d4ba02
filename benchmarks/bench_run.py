"""What a mission of the built-in runtime costs beyond its own loop: ``evalkit run`` of a suite.

Runs ``evalkit run --suite SUITE --jobs N`` (the stub suite by default: the
built-in runtime, scripted agents, the stub MCP plane) as a fresh process and
sets what the missions cost against the work their loops report:

- wall per mission: the whole command's wall time over the missions it ran
  (harness start-up, scoring and reports included);
- mission wall: spawn to exit of each mission's process (``command.json``);
- loop: the ``elapsed_s`` each stream's ``mission_finished`` reports;
- beyond the loop: mission wall less loop (issue 30's figure: aim 0.25 s, at most 0.5 s);
- CPU per mission: user + system time of the command's whole process tree
  (``RUSAGE_CHILDREN``) over the missions.

Each figure is the median over ``--repeat`` runs. ``--spawn`` spawns every
mission (``EVALKIT_FORKSERVER=off``), as ``run`` did before it forked them from
a fork server. Everything is written under benchmarks/out/ (gitignored).

    python benchmarks/bench_run.py [--suite suites/stub] [--jobs 1] [--repeat 3] [--spawn]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = Path(__file__).resolve().parent / "out" / "run"


@dataclass
class Figures:
    missions: int
    wall_s: float
    cpu_s: float
    mission_walls: list[float]
    loops: list[float]

    @property
    def beyond(self) -> list[float]:
        return [w - loop for w, loop in zip(self.mission_walls, self.loops, strict=True)]


def cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def loop_seconds(events: Path) -> float:
    """The ``elapsed_s`` of the stream's ``mission_finished``."""
    for line in reversed(events.read_text(encoding="utf-8").splitlines()):
        record = json.loads(line)
        if record.get("event") == "mission_finished":
            return float(record["elapsed_s"])
    raise SystemExit(f"{events} holds no mission_finished: the mission did not finish")


def run_once(suite: Path, jobs: int, out: Path, spawn: bool) -> Figures:
    shutil.rmtree(out, ignore_errors=True)
    argv = [sys.executable, "-m", "evalkit.cli", "run", "--suite", str(suite), "--out", str(out),
            "--jobs", str(jobs), "--quiet"]
    cpu0, t0 = cpu_of_children(), time.perf_counter()
    env = {**os.environ, **({"EVALKIT_FORKSERVER": "off"} if spawn else {})}
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    wall, cpu = time.perf_counter() - t0, cpu_of_children() - cpu0
    if done.returncode != 0:
        raise SystemExit(f"evalkit run exited {done.returncode}:\n{done.stderr}")
    captures = sorted(out.glob("*/command.json"))
    mission_walls = [json.loads(p.read_text(encoding="utf-8"))["wall_s"] for p in captures]
    loops = [loop_seconds(p.parent / "events.jsonl") for p in captures]
    return Figures(len(captures), wall, cpu, mission_walls, loops)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", type=Path, default=REPO / "suites" / "stub")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--spawn", action="store_true",
                        help="spawn every mission (EVALKIT_FORKSERVER=off)")
    args = parser.parse_args()
    runs = [run_once(args.suite.resolve(), args.jobs, OUT / f"rep{i}", args.spawn)
            for i in range(args.repeat)]
    missions = runs[0].missions
    med = statistics.median

    def per_run(values: list[float]) -> str:
        return "  ".join(f"{v:6.3f}" for v in values)

    rows = [
        ("wall per mission", [r.wall_s / r.missions for r in runs]),
        ("mission wall", [statistics.mean(r.mission_walls) for r in runs]),
        ("loop (elapsed_s)", [statistics.mean(r.loops) for r in runs]),
        ("beyond the loop", [statistics.mean(r.beyond) for r in runs]),
        ("CPU per mission", [r.cpu_s / r.missions for r in runs]),
    ]
    how = "spawned" if args.spawn else "forked where the fork server can"
    print(f"suite {args.suite}, --jobs {args.jobs}: {missions} missions ({how}), "
          f"{args.repeat} run(s); seconds per mission")
    print(f"{'':18} {'median':>7}   each run")
    for name, values in rows:
        print(f"{name:18} {med(values):7.3f}   {per_run(values)}")
    print(f"{'whole command':18} {med([r.wall_s for r in runs]):7.3f}   "
          f"{per_run([r.wall_s for r in runs])}")


if __name__ == "__main__":
    main()
