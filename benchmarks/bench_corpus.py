"""What the committed corpus costs: scoring it (target: under 1 s per suite, process wall
time) and, with --regenerate, recording it again (target: under 2 minutes on 2 cores).

Scoring runs `evalkit score --suite suites/S --runs recordings/S/V` as a fresh process,
as CI does, so interpreter and library start-up are included; the figure per suite is
the sum over its agent variants (good + bad), best of --repeat. --regenerate runs
`evalkit record-corpus --out <temp> --jobs N` once and prints its wall time and size;
the committed corpus is not touched.

    python benchmarks/bench_corpus.py [--repeat 5] [--regenerate] [--jobs 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECORDINGS = REPO / "recordings"
SUITES = REPO / "suites"
TARGET_SCORE_S = 1.0
TARGET_REGENERATE_S = 120.0


def wall(argv: list[str], cwd: Path = REPO) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, capture_output=True, check=False)
    return time.perf_counter() - start


def size_of(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def score_figures(repeat: int) -> None:
    print(f"evalkit score per suite (process wall time, best of {repeat}; "
          f"target < {TARGET_SCORE_S:g} s per suite)")
    total = 0.0
    for suite in sorted(p for p in RECORDINGS.iterdir() if p.is_dir()):
        per_variant: dict[str, float] = {}
        for variant in sorted(p for p in suite.iterdir() if p.is_dir()):
            argv = [sys.executable, "-m", "evalkit.cli", "score", "--suite",
                    str(SUITES / suite.name), "--runs", str(variant), "--allow-failures"]
            per_variant[variant.name] = min(wall(argv) for _ in range(repeat))
        summed = sum(per_variant.values())
        total += summed
        shown = ", ".join(f"{name} {s:.3f} s" for name, s in per_variant.items())
        verdict = "ok" if summed < TARGET_SCORE_S else "OVER"
        print(f"  {suite.name:<10} {summed:6.3f} s  ({shown})  {verdict}")
    files, size = size_of(RECORDINGS)
    print(f"  whole corpus {total:6.3f} s; {files} files, {size / 1e6:.2f} MB committed")


def regenerate(jobs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "corpus"
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "evalkit.cli", "record-corpus", "--out",
                               str(out), "--jobs", str(jobs)], cwd=REPO, capture_output=True,
                              text=True, check=False)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            print(done.stdout + done.stderr, file=sys.stderr)
        files, size = size_of(out)
        verdict = "ok" if seconds < TARGET_REGENERATE_S else "OVER"
        print(f"evalkit record-corpus --jobs {jobs}: {seconds:.1f} s on {os.cpu_count()} cores "
              f"(target < {TARGET_REGENERATE_S:g} s) {verdict}; {files} files, "
              f"{size / 1e6:.2f} MB; exit {done.returncode}")
        for line in done.stdout.splitlines():
            print(f"  {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--regenerate", action="store_true",
                        help="Also time a full regeneration into a temporary folder.")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    score_figures(args.repeat)
    if args.regenerate:
        regenerate(args.jobs)


if __name__ == "__main__":
    main()
