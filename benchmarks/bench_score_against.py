"""`evalkit score` of one suite, timed several times against another evalkit tree.

Issue 30's budget sets a scoring against the figure of the code before it, "on
the same machine in the same hour". On a small shared VM one best-of-three
against another taken a minute later moves by a third, so this alternates the
two codes round by round (``_alternate``) and prints each run, the medians, the
minima, and the ratios of both and of each round's pair.

    python benchmarks/bench_score_against.py benchmarks/out/n100000-r20 --against /tmp/old-tree
    python benchmarks/bench_score_against.py DIR --against TREE --runs --repeat 3

DIR holds ``suite.yaml`` and ``dataset.parquet`` (``bench_scoring.py`` writes them);
the other tree reads the folder of the same name under its own ``benchmarks/out``
(each code scores the dataset its own ingest wrote), unless ``--against-dir`` says
where. ``--runs`` scores ``DIR/runs`` instead of the dataset.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _alternate import Timing, alternate, medians, module_file, run_cli  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="a folder with suite.yaml and dataset.parquet")
    parser.add_argument("--against", required=True, help="a folder holding another evalkit")
    parser.add_argument("--against-dir", type=Path,
                        help="the other code's folder (default: its benchmarks/out/<DIR's name>)")
    parser.add_argument("--runs", action="store_true", help="score DIR/runs, not the dataset")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    folders = {"installed": args.dir.resolve(),
               "against": (args.against_dir or Path(args.against) / "benchmarks" / "out"
                           / args.dir.name).resolve()}
    source = ["--runs", "runs"] if args.runs else ["--dataset", "dataset.parquet"]
    for folder in folders.values():
        if not (folder / "suite.yaml").is_file() or not (folder / source[1]).exists():
            raise SystemExit(f"{folder} lacks suite.yaml or {source[1]}: run "
                             "bench_scoring.py with that size in its tree first")
    codes = {"installed": None, "against": args.against}
    with tempfile.TemporaryDirectory(prefix="bench-score-") as where:
        seen = _timed(codes, folders, source, args.repeat, Path(where))
    print(f"score {source[0]} of {args.dir.name}; medians of {args.repeat}:")
    for name, rows in seen.items():
        print(f"  {name:9s} {_shown(medians(rows))}  (fastest {min(r[0] for r in rows):.2f} s)")
    mine, theirs = ([r[0] for r in seen[name]] for name in codes)
    print(f"installed / against: medians {statistics.median(mine) / statistics.median(theirs):.2f}x,"
          f" fastest {min(mine) / min(theirs):.2f}x, median of the rounds' pairs "
          f"{statistics.median(a / b for a, b in zip(mine, theirs, strict=True)):.2f}x")


def _shown(timing: Timing) -> str:
    wall, cpu, rss = timing
    return f"{wall:6.2f} s wall  {cpu:6.2f} s CPU  {rss:5d} MB"


def _timed(codes: dict[str, str | None], folders: dict[str, Path], source: list[str],
           repeat: int, scratch: Path) -> dict[str, list[Timing]]:
    """Each code's scoring of its folder, ``repeat`` times, alternated; run from ``scratch``."""
    def once(name: str, tree: str | None) -> Timing:
        folder = folders[name]
        return run_cli(["score", "--suite", str(folder / "suite.yaml"), source[0],
                        str(folder / source[1]), "--json", "--allow-failures"], tree, scratch)

    for name, tree in codes.items():
        print(f"{name:9s} = {module_file('evalkit', tree, scratch)}, {folders[name]}")
    return alternate(codes, repeat, once, _shown)


if __name__ == "__main__":
    main()
