"""``evalkit report`` and ``evalkit diff``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

_SUITE_HELP = ("Suite file or folder: scores a folder of bare runs (e.g. a regrade's output), "
               "and lists the suite's prompts and rubric changes.")
_DIFF_SUITE_HELP = "Suite file or folder: scores A or B when it is a folder of bare runs."


def _suite(path: Path | None):
    if path is None:
        return None
    from evalkit.eval.check import gradeable

    return gradeable(path, refusing="nothing scored")


@click.command()
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("-o", "--out", type=click.Path(path_type=Path),
              help="Where to write the HTML file (default: FOLDER/report.html).")
@click.option("--suite", "suite_path", type=click.Path(path_type=Path), help=_SUITE_HELP)
def report(folder: Path, out: Path | None, suite_path: Path | None) -> None:
    """Render one self-contained HTML KPI report of a score, run or measure folder."""
    from evalkit.report import folders, html

    target = out or folder / "report.html"
    html.check_target(target)  # before the reading and drawing, not only after them
    suite = _suite(suite_path)
    scoring = folders.load(folder, suite)
    written = html.write(html.report_html(scoring, suite), target)
    click.echo(f"wrote {written}")


@click.command()
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON.")
@click.option("--fail-on", type=click.Choice(["regressions", "any"]),
              help="Exit 1 on any pass→fail (regressions) or on any flip (any). Default: exit 0.")
@click.option("--allow-mismatch", is_flag=True,
              help="Compare scorings of different suites or mission sets, on what they share.")
@click.option("--html", "html_out", type=click.Path(path_type=Path),
              help="Also write the diff as a self-contained HTML file.")
@click.option("--suite", "suite_path", type=click.Path(path_type=Path), help=_DIFF_SUITE_HELP)
def diff(a: Path, b: Path, as_json: bool, fail_on: str | None, allow_mismatch: bool,
         html_out: Path | None, suite_path: Path | None) -> None:
    """Which verdicts flipped between two scorings of one suite, and why.

    A and B are score, run or measure folders, or folders of bare runs (with --suite).
    Exit 0; 1 when --fail-on finds what it names; 2 when the scorings cannot be compared.
    """
    from evalkit.eval.diff import compare
    from evalkit.report import folders, html
    from evalkit.report.text import diff_text

    if html_out is not None:
        html.check_target(html_out)  # before the diff is printed, not after
    suite = _suite(suite_path)
    result = compare(folders.load(a, suite).side(), folders.load(b, suite).side(),
                     allow_mismatch=allow_mismatch)
    if html_out is not None:
        html.write(html.diff_html(result), html_out)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        click.echo(diff_text(result), nl=False)
    code = result.exit_code(fail_on or "never")
    if code:
        sys.exit(code)
