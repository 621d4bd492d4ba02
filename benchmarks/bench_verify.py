"""What checking seals costs scoring: ``evalkit score`` with and without ``--no-verify``.

Synthesises N mission-shaped runs (``synth.py``), seals each run directory as
the run store does when it closes, then the runs folder as ``run`` does when
every mission is done, with a key made for the benchmark (its public key put
beside the runs, where ``score`` finds it). Then times, in fresh processes and
alternating so a noisy minute hits both alike, ``score`` checking every stream
against the folder's seal and ``score --no-verify``; best of ``--repeat`` each.
Issue 29's budget: checking costs at most 10% of scoring at 10,000 runs.

Also times ``evalkit verify`` of the whole folder (every file of every run
hashed, every seal's signature checked), which is not on scoring's path.

Usage: python benchmarks/bench_verify.py [-n 10000] [--repeat 5]
Everything it writes goes under benchmarks/out/ (gitignored).
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from synth import synthesise  # noqa: E402

from evalkit.store import seal  # noqa: E402
from evalkit.store.signing import PUBLIC_FILE, Signer  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"


def prepare(n: int) -> dict[str, Path]:
    folder = OUT / f"verify-n{n}"
    marker = folder / "sealed.json"
    paths = {"runs": folder / "runs", "suite": folder / "suite.yaml"}
    if marker.is_file() and json.loads(marker.read_text()).get("version") == seal.VERSION:
        return paths  # sealed already, in this evalkit's manifest format
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    synthesise(folder, n)
    signer = Signer.generate()
    t0 = time.perf_counter()
    runs = sorted(p for p in paths["runs"].glob("*/run_*") if p.is_dir())
    for run in runs:
        seal.seal_run(run, signer, fsync=False)
    sealed_runs = time.perf_counter() - t0
    t0 = time.perf_counter()
    seal.seal_folder(paths["runs"], runs, signer)
    sealed_folder = time.perf_counter() - t0
    (paths["runs"] / PUBLIC_FILE).write_bytes(signer.public_pem())
    marker.write_text(json.dumps({"n": n, "version": seal.VERSION, "seal_runs_s": sealed_runs,
                                  "seal_folder_s": sealed_folder}))
    return paths


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and every child it forked)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          check=False)
    took = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return took, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    paths = prepare(args.n)
    sealed = json.loads((paths["runs"].parent / "sealed.json").read_text())
    for path in paths["runs"].rglob("*"):  # timed from the page cache, not the disk
        if path.is_file():
            path.read_bytes()
    base = [sys.executable, "-m", "evalkit.cli", "score", "--suite", str(paths["suite"]),
            "--runs", str(paths["runs"]), "--allow-failures"]
    tries: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(args.repeat):
        tries[False].append(timed([*base, "--no-verify"]))
        tries[True].append(timed(base))
    verify, _ = timed([sys.executable, "-m", "evalkit.cli", "verify", str(paths["runs"])])
    unchecked, checked = ([wall for wall, _ in tries[k]] for k in (False, True))
    cpu_unchecked, cpu_checked = ([cpu for _, cpu in tries[k]] for k in (False, True))
    fast, slow = min(unchecked), min(checked)
    overhead = (slow - fast) / fast * 100
    paired = statistics.median(c - u for c, u in zip(checked, unchecked, strict=True))
    median_overhead = paired / statistics.median(unchecked) * 100
    print(f"{args.n} runs, {args.repeat} tries each, {os.cpu_count()} cores")
    print(f"  sealing each run as it closes: {sealed['seal_runs_s'] / args.n * 1e6:.0f} us a run; "
          f"the folder seal: {sealed['seal_folder_s']:.2f} s")
    print(f"  score --no-verify: best {fast:.3f} s, median {statistics.median(unchecked):.3f} s")
    print(f"  score (verified):  best {slow:.3f} s, median {statistics.median(checked):.3f} s")
    cpu_overhead = (statistics.median(cpu_checked) - statistics.median(cpu_unchecked)) \
        / statistics.median(cpu_unchecked) * 100
    print(f"  CPU of the process tree: median {statistics.median(cpu_unchecked):.3f} s "
          f"unchecked, {statistics.median(cpu_checked):.3f} s checked")
    for what, value in (("wall, best against best", overhead),
                        ("wall, median of paired differences", median_overhead),
                        ("CPU, median against median", cpu_overhead)):
        print(f"  verification overhead, {what}: {value:+.1f}% (budget 10%: "
              f"{'met' if value <= 10 else 'missed'})")
    print(f"  evalkit verify of the whole folder: {verify:.2f} s")


if __name__ == "__main__":
    main()
