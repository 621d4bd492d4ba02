"""Timing one evalkit command against the same command of another evalkit tree.

Timings on a small shared VM move by a third from one minute to the next, so two
codes timed an hour apart compare little: the benchmarks that compare codes run
each command in a fresh process (reaped with ``wait4`` for its CPU and peak
RSS), alternating the codes round by round, and set the medians side by side.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

#: (wall seconds, CPU seconds of the whole process tree, peak RSS in MB) of one run.
Timing = tuple[float, float, int]


def tree_env(tree: str | None) -> dict[str, str]:
    """The environment of a run of the evalkit package in ``tree`` (None: the installed one)."""
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_cli(args: Sequence[str], tree: str | None, cwd: Path) -> Timing:
    """``evalkit ARGS`` of ``tree``, timed. Run from ``cwd``, a folder outside any source
    tree: ``-m`` puts the working directory first on the path, and in a source tree that
    is the tree's own evalkit, whatever PYTHONPATH says."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "evalkit.cli", *args], env=tree_env(tree),
                            stdout=subprocess.DEVNULL, cwd=cwd)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    if code:
        raise SystemExit(f"evalkit {' '.join(args[:1])} failed ({code}) for {tree or 'installed'}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss // 1024


def module_file(module: str, tree: str | None, cwd: Path) -> str:
    """Where the module a run with this tree imports is (what is being timed)."""
    return subprocess.run([sys.executable, "-c", f"import {module} as m; print(m.__file__)"],
                          env=tree_env(tree), cwd=cwd, capture_output=True, text=True,
                          check=True).stdout.strip()


def alternate(codes: dict[str, str | None], repeat: int,
              once: Callable[[str, str | None], Timing],
              shown: Callable[[Timing], str]) -> dict[str, list[Timing]]:
    """``once(name, tree)`` ``repeat`` times per code, the codes' order swapped every round;
    each run printed as it ends."""
    seen: dict[str, list[Timing]] = {name: [] for name in codes}
    for i in range(repeat):
        for name, tree in (codes.items() if i % 2 == 0 else reversed(codes.items())):
            timing = once(name, tree)
            seen[name].append(timing)
            print(f"{name:9s} run {i + 1}: {shown(timing)}", flush=True)
    return seen


def medians(rows: list[Timing]) -> Timing:
    return (statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows),
            int(statistics.median(r[2] for r in rows)))
