"""What replay and regrade cost.

One 10-tool-call mission is recorded for real (scripted model, the stub MCP
plane). Then:

- **replay loop time**: the recording replayed in this process ``--replays``
  times (recorded tools, nothing dialled); the loop's own clock
  (``mission_finished.elapsed_s``: first record to last) and the whole
  ``launch`` call are reported as medians, once with every line fsync'd (what
  ``evalkit replay`` writes) and once without (what ``regrade`` writes), so
  the disk's share is visible. Target: loop under 50 ms.
- **regrade throughput**: the recording copied into ``--runs`` mission
  folders (``DIR/<key>/runs/<run_id>/``, the layout ``evalkit run`` writes),
  regraded with ``--jobs`` worker processes. Target: 1,000 runs in under
  30 s on 2 cores.

    python benchmarks/bench_replay.py [--runs 1000] [--jobs 2] [--replays 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from evalkit.runtime.mission import MissionSettings, launch
from evalkit.runtime.regrade import regrade

CALLS = 10


def _env(runs: Path) -> dict[str, str]:
    return {**os.environ, "EVALKIT_RUNS": str(runs), "EVALKIT_AUDIT": "off",
            "EVALKIT_APPROVALS": "off"}


def record(work: Path) -> Path:
    script = [json.dumps({"tool": "mcp.add", "arguments": {"a": n, "b": n + 1}})
              for n in range(CALLS)]
    script.append(json.dumps({"answer": "done"}))
    path = work / "script.json"
    path.write_text(json.dumps(script), encoding="utf-8")
    runs = work / "recorded"
    launched = launch(MissionSettings(
        objective="add ten pairs", provider="scripted", script=str(path), sandbox="none",
        mcp_stdio=(f"{sys.executable} -m evalkit.planes.stub",), root=work), environ=_env(runs))
    assert launched.outcome.outcome == "answered", launched.outcome
    return runs / str(launched.outcome.run_id)


def bench_replay(run: Path, work: Path, times: int, *, durable: bool) -> None:
    loops, walls = [], []
    for n in range(times):
        started = time.perf_counter()
        launched = launch(MissionSettings(objective="", replay=str(run), root=work),
                          environ=_env(work / f"replays{n % 2}"), durable=durable)
        walls.append(time.perf_counter() - started)
        loops.append(launched.outcome.elapsed_s)
        assert launched.notes["drift"]["first"] is None
    how = "every line fsync'd" if durable else "no fsync, as regrade writes"
    print(f"replay of a {CALLS}-call mission (recorded tools, {how}), median of {times}: "
          f"loop {statistics.median(loops) * 1000:.1f} ms, whole launch "
          f"{statistics.median(walls) * 1000:.1f} ms (target: loop < 50 ms)")


def bench_regrade(run: Path, work: Path, count: int, jobs: int) -> None:
    source = work / "folder"
    for n in range(count):
        shutil.copytree(run, source / f"m{n:05d}" / "runs" / run.name,
                        ignore=shutil.ignore_patterns("lock"))
    started = time.perf_counter()
    report = regrade(source, work / "regraded", jobs=jobs)
    seconds = time.perf_counter() - started
    totals = report["totals"]
    assert totals["replayed"] == count and totals["drifted"] == 0, totals
    print(f"regrade of {count} runs with {jobs} job(s): {seconds:.2f} s, "
          f"{count / seconds:.0f} runs/s (target: 1,000 runs < 30 s on 2 cores)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--replays", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="evalkit-bench-replay-") as tmp:
        work = Path(tmp)
        run = record(work)
        bench_replay(run, work, args.replays, durable=True)
        bench_replay(run, work, args.replays, durable=False)
        bench_regrade(run, work, args.runs, args.jobs)


if __name__ == "__main__":
    main()
