"""`evalkit ingest` alone, timed several times, optionally against another evalkit tree.

Timings on a small shared VM move by a third from run to run, so one run says
little and two codes timed an hour apart say less: this runs the CLI (in a
fresh process, reaped with ``wait4``) N times per code, alternating the codes,
and prints each run and the medians. MB/s is over the JSONL files under the runs
folder (events, model and tools: the bytes ingest reports), per second of wall time.

    python benchmarks/bench_ingest_only.py benchmarks/out/n10000-r20/runs
    python benchmarks/bench_ingest_only.py RUNS --repeat 7 --against /tmp/old-tree

``--against DIR`` runs the evalkit package found in DIR (a copy of the source
tree, say with the previous ``ingest.py``) beside the installed one; both write
to a scratch folder that is removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _jsonl_bytes(root: Path) -> int:
    return sum(entry.stat().st_size for entry in root.rglob("*.jsonl") if entry.is_file())


def _run_once(runs: Path, out: Path, tree: str | None) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the whole process tree, peak RSS in MB) of one ingest."""
    out.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
    started = time.perf_counter()
    # From the scratch folder: ``-m`` puts the working directory first on the path, and
    # in a source tree that is the tree's own evalkit, whatever PYTHONPATH says.
    proc = subprocess.Popen([sys.executable, "-m", "evalkit.cli", "ingest", str(runs.resolve()),
                             "--out", str(out)], env=env, stdout=subprocess.DEVNULL,
                            cwd=out.parent.parent)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"ingest failed ({proc.returncode}) for {tree or 'installed'}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss // 1024


def _ingest_module(tree: str | None, cwd: Path) -> str:
    """The ingest.py a run with this tree would import (what is being timed)."""
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", "import evalkit.store.ingest as m; print(m.__file__)"],
                          env=env, cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--against", help="a folder holding another evalkit package")
    args = parser.parse_args()
    nbytes = _jsonl_bytes(args.runs)
    codes = {"installed": None} | ({"against": args.against} if args.against else {})
    seen: dict[str, list[tuple[float, float, int]]] = {name: [] for name in codes}
    scratch = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    try:
        for name, tree in codes.items():
            print(f"{name:9s} = {_ingest_module(tree, scratch)}")
        for i in range(args.repeat):
            for name, tree in (codes.items() if i % 2 == 0 else reversed(codes.items())):
                wall, cpu, rss = _run_once(args.runs, scratch / name / "ds.parquet", tree)
                seen[name].append((wall, cpu, rss))
                print(f"{name:9s} run {i + 1}: {wall:6.2f} s wall  {cpu:6.2f} s CPU  "
                      f"{rss:5d} MB  {nbytes / 1e6 / wall:6.1f} MB/s", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{nbytes / 1e6:.1f} MB of JSONL under {args.runs}; medians of {args.repeat}:")
    for name, rows in seen.items():
        wall = statistics.median(r[0] for r in rows)
        cpu = statistics.median(r[1] for r in rows)
        rss = statistics.median(r[2] for r in rows)
        print(f"  {name:9s} {wall:6.2f} s wall  {cpu:6.2f} s CPU  {rss:5.0f} MB  "
              f"{nbytes / 1e6 / wall:6.1f} MB/s")


if __name__ == "__main__":
    main()
