"""``evalkit record-corpus``: parse, call ``evalkit.eval.corpus``, print, exit code.

Exit codes: 0 the corpus was written and every verdict is the expected one;
1 it was written, but a good recording failed or a bad one passed; 2 usage
(an unknown suite, an --out that is not a corpus) or a recording that failed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from evalkit.eval.corpus import DEFAULT_JOBS, DEFAULT_OUT, DEFAULT_SUITES, GOOD


@click.command("record-corpus")
@click.option("--out", type=click.Path(path_type=Path), default=Path(DEFAULT_OUT),
              show_default=True, help="The corpus folder (new, empty, or an earlier corpus).")
@click.option("--suite", "names", multiple=True, metavar="NAME",
              help="Record only this shipped suite, all its agent variants (repeatable; "
                   "default: every suite).")
@click.option("--suites", "suites_dir", type=click.Path(path_type=Path),
              default=Path(DEFAULT_SUITES), show_default=True,
              help="Where the shipped suites are; its parent is the runs' working directory.")
@click.option("--jobs", type=click.IntRange(min=1), default=DEFAULT_JOBS, show_default=True,
              help="Missions run at once.")
def record_corpus(out: Path, names: tuple[str, ...], suites_dir: Path, jobs: int) -> None:
    """Regenerate recordings/: every shipped suite with every scripted agent, for real.

    Writes OUT/<suite>/<variant>/<key>/ (the run folders), OUT/<suite>/<variant>/report.json
    and OUT/README.md; score one with `evalkit score --suite suites/S --runs OUT/S/V`.
    """
    from evalkit.eval.corpus import Recorded
    from evalkit.eval.corpus import record_corpus as record
    from evalkit.report.markdown import write_report

    def done(r: Recorded) -> None:
        click.echo(f"{r.target.name}: {len(r.report['verdicts'])} missions, "
                   f"{len(r.passed)} passed, {len(r.failed)} failed ({r.seconds:.1f} s)")

    def write(report: dict[str, Any], folder: Path) -> None:
        write_report(report, folder)

    corpus = record(out, write=write, suites_dir=suites_dir, names=names, jobs=jobs,
                    on_done=done, warn=lambda line: click.echo(line, err=True))
    click.echo(f"corpus: {len(corpus.recorded)} suite/agent folders, "
               f"{sum(len(r.report['verdicts']) for r in corpus.recorded)} recordings in "
               f"{corpus.seconds:.1f} s, {corpus.size_bytes / 1e6:.1f} MB in {out}")
    wrong = [(r, k) for r in corpus.recorded for k in r.unexpected]
    for r, key in wrong:
        said = "failed" if r.target.variant == GOOD else "passed"
        reasons = next((v["reasons"] for v in r.report["verdicts"] if v["key"] == key), [])
        because = f": {'; '.join(reasons)}" if reasons else ""
        click.echo(f"unexpected: {r.target.name}/{key} {said}{because}", err=True)
    if wrong:
        sys.exit(1)
