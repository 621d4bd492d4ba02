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
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _alternate import Timing, alternate, medians, module_file, run_cli  # noqa: E402


def _jsonl_bytes(root: Path) -> int:
    return sum(entry.stat().st_size for entry in root.rglob("*.jsonl") if entry.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--against", help="a folder holding another evalkit package")
    args = parser.parse_args()
    nbytes = _jsonl_bytes(args.runs)
    codes = {"installed": None} | ({"against": args.against} if args.against else {})
    scratch = Path(tempfile.mkdtemp(prefix="bench-ingest-"))

    def once(name: str, tree: str | None) -> Timing:
        out = scratch / name / "ds.parquet"
        out.parent.mkdir(parents=True, exist_ok=True)
        return run_cli(["ingest", str(args.runs.resolve()), "--out", str(out)], tree, scratch)

    def shown(timing: Timing) -> str:
        wall, cpu, rss = timing
        return f"{wall:6.2f} s wall  {cpu:6.2f} s CPU  {rss:5d} MB  {nbytes / 1e6 / wall:6.1f} MB/s"

    try:
        for name, tree in codes.items():
            print(f"{name:9s} = {module_file('evalkit.store.ingest', tree, scratch)}")
        seen = alternate(codes, args.repeat, once, shown)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{nbytes / 1e6:.1f} MB of JSONL under {args.runs}; medians of {args.repeat}:")
    for name, rows in seen.items():
        print(f"  {name:9s} {shown(medians(rows))}")


if __name__ == "__main__":
    main()
