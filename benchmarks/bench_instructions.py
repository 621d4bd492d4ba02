"""Instructions, not seconds: what scoring from a dataset costs, counted by callgrind.

On a small shared VM the same work takes one second in one hour and two in
the next, so a change worth 2% cannot be seen in wall times at all. Valgrind's
callgrind counts the instructions a process runs, which do not depend on what
else the machine is doing: this scores a dataset's suite in one process (every
share judged here, no fork) under callgrind, and once more only importing
the same modules, and prints both counts and their difference per mission.
With ``--against TREE`` it counts the evalkit package found in another source
tree too (``git worktree add /tmp/before HEAD~1``), so two versions compare to
a fraction of a percent. Hash seed, address layout and the temp folder are
fixed: left free, they move the count by a few tenths of a percent.

    python benchmarks/bench_instructions.py                       # n10000-r20, ~1 min
    python benchmarks/bench_instructions.py --against /tmp/before

Needs valgrind (Debian: valgrind) and a dataset from ``bench_scoring.py``.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scoring import OUT  # noqa: E402

#: What scoring imports: counted alone, it is subtracted from the scoring run.
_IMPORTS = """
from evalkit.eval import check, score, tables
from evalkit.report import markdown
"""

_SCORE = _IMPORTS + """
import sys
from pathlib import Path
base = Path(sys.argv[1])
suite = check.gradeable(base / "suite.yaml", refusing="nothing scored")
report = score.score(suite, dataset=base / "dataset.parquet", workers=1)
if {json}:
    report.json_parts()
if {markdown}:
    markdown.to_markdown(report.to_dict())
"""


def count(code: str, args: list[str], tree: str | None, scratch: Path) -> int:
    """Instructions callgrind counted for ``python -c code args``."""
    env = dict(os.environ, PYTHONHASHSEED="0", TMPDIR=str(scratch))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # compiling modules at every start is noise
    if tree:
        env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
    argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
            sys.executable, "-c", code, *args]
    if shutil.which("setarch"):
        argv = ["setarch", platform.machine(), "-R", *argv]  # the same addresses every run
    # Run from the scratch folder: ``python -c`` puts its working directory first on the
    # path, where a source tree would shadow the one asked for.
    done = subprocess.run(argv, env=env, cwd=scratch, capture_output=True, text=True,
                          check=False)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callgrind run failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="n10000-r20",
                        help="folder under benchmarks/out/ with suite.yaml and dataset.parquet")
    parser.add_argument("--against", help="another source tree whose evalkit to count too")
    parser.add_argument("--json", action="store_true", help="render the JSON report, not markdown")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    data = OUT / args.data
    if not (data / "dataset.parquet" / "dataset.json").is_file():
        raise SystemExit(f"{data} has no dataset: run bench_scoring.py first")
    missions = int(re.search(r"n(\d+)", args.data).group(1)) if re.search(r"n(\d+)", args.data) \
        else None
    score = _SCORE.format(json=args.json, markdown=not args.json)
    trees = [("installed", None)] + ([("against", args.against)] if args.against else [])
    for tree in [t for _, t in trees if t]:  # bytecode written once, not counted
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(tree) / "evalkit")],
                       check=False)
    print(f"{'tree':10} {'scoring':>16} {'imports only':>16} {'net':>16} {'per mission':>12}")
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as scratch:
        for name, tree in trees:
            whole = count(score, [str(data)], tree, Path(scratch))
            imports = count(_IMPORTS, [], tree, Path(scratch))
            per = f"{(whole - imports) / missions:12,.0f}" if missions else ""
            print(f"{name:10} {whole:16,} {imports:16,} {whole - imports:16,} {per}")


if __name__ == "__main__":
    main()
