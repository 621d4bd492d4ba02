"""Start-up cost of the commands a CI job or a spawning harness runs most.

Prints the best-of-N wall time of `evalkit --help`, `evalkit mission --help`
and `evalkit score --help` as fresh processes (targets: mission --help under
0.5 s; score on ~80 runs under 0.3 s, measured by bench_scoring.py).

    python benchmarks/bench_startup.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

COMMANDS = (["--help"], ["mission", "--help"], ["score", "--help"], ["--version"])


def best_of(args: list[str], repeat: int) -> float:
    walls = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "evalkit.cli", *args], capture_output=True,
                       check=True)
        walls.append(time.perf_counter() - start)
    return min(walls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    repeat = parser.parse_args().repeat
    for args in COMMANDS:
        print(f"evalkit {' '.join(args):<16} {best_of(args, repeat) * 1000:7.1f} ms (best of {repeat})")


if __name__ == "__main__":
    main()
