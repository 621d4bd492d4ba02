"""``evalkit check`` and ``evalkit score``."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from evalkit.gcpause import collector_paused


@click.command()
@click.option("--suite", "suite_path", required=True, type=click.Path(path_type=Path),
              help="Suite file (YAML/JSON) or a folder holding missions.yaml.")
@click.option("--strict", is_flag=True,
              help="Hold a suite under 8 missions to the split, claimed flags and rubric "
                   "rules as errors, as measure does (warnings otherwise).")
def check(suite_path: Path, strict: bool) -> None:
    """Refuse a suite that cannot be graded, before spending a model."""
    import evalkit

    with collector_paused():  # a large suite is many objects built at once, none of them cycles
        result = evalkit.check(suite_path, strict=strict)
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    if not result.ok:
        click.echo(f"suite '{result.suite.name}' is not gradeable "
                   f"({len(result.problems)} problems):", err=True)
        for problem in result.problems:
            click.echo(f"  - {problem}", err=True)
        sys.exit(1)
    click.echo(result.summary)


@click.command()
@click.option("--suite", "suite_path", required=True, type=click.Path(path_type=Path),
              help="Suite file (YAML/JSON) or a folder holding missions.yaml.")
@click.option("--runs", type=click.Path(path_type=Path),
              help="Folder with one run directory (or events file) per mission key.")
@click.option("--map", "mapping", multiple=True, metavar="KEY=PATH",
              help="Score mission KEY from PATH (a run directory or events file). Repeatable.")
@click.option("--dataset", type=click.Path(path_type=Path),
              help="Score from a Parquet dataset written by `evalkit ingest` (DuckDB).")
@click.option("--split", type=click.Choice(["train", "test", "all"]), default="all",
              show_default=True, help="Which half to score.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--report", "report_dir", type=click.Path(path_type=Path),
              help="Write report.json and report.md into this folder.")
@click.option("--allow-failures", is_flag=True, help="Exit 0 even when a mission failed.")
@click.option("--no-verify", is_flag=True,
              help="Do not check streams against their seals (faster; the report says so).")
@click.option("--trust", "trust_files", multiple=True, type=click.Path(path_type=Path),
              metavar="KEY.pub", help="Also trust seals signed by this public key. Repeatable.")
@click.option("--require-signed", is_flag=True,
              help="Score an unsigned stream as tampered (for folders sealed whole).")
@click.option("--junit", "junit_path", type=click.Path(path_type=Path), metavar="FILE",
              help="Also write the verdicts as JUnit XML, for a CI server's test page.")
@click.option("--pricing", type=click.Path(path_type=Path), metavar="FILE",
              help="Price every run again from its recorded tokens at this file's prices "
                   "(the recordings are not changed).")
def score(suite_path: Path, runs: Path | None, mapping: tuple[str, ...], dataset: Path | None,
          split: str, as_json: bool, report_dir: Path | None,
          allow_failures: bool, no_verify: bool, trust_files: tuple[Path, ...],
          require_signed: bool, junit_path: Path | None, pricing: Path | None) -> None:
    """Verdicts and KPIs for a suite from recorded streams — no model needed.

    Every stream is checked against its seal first: one altered after it was
    closed is an infrastructure failure, never scored as the run it claims.
    """
    import evalkit
    from evalkit.errors import EvalkitError
    from evalkit.eval.score import parse_map
    from evalkit.report.markdown import Rendered, to_markdown, write_rendered
    from evalkit.store.replace import write_parts

    if runs is None and not mapping and dataset is None:
        raise EvalkitError("nothing to score: give --runs DIR, --map KEY=PATH or --dataset PATH")
    if no_verify and (trust_files or require_signed):
        raise EvalkitError("--no-verify checks no seal, so --trust and --require-signed "
                           "would do nothing; give one or the other")
    if dataset is not None and (trust_files or require_signed):
        raise EvalkitError("a dataset's seals were checked when it was ingested; --trust and "
                           "--require-signed apply to --runs and --map")
    if junit_path is not None:
        from evalkit.report import junit

        junit.check_target(junit_path)  # before scoring: a slip costs nothing
    checker = None
    if not no_verify and (runs is not None or mapping):
        from evalkit.eval.score import beside
        from evalkit.store.seal import Checker

        checker = Checker.for_scoring(beside(runs, parse_map(mapping)), trust_files,
                                      require_signed=require_signed)
    with collector_paused():
        report = evalkit.score(suite_path, runs=runs, mapping=parse_map(mapping), dataset=dataset,
                               split=split, verify=not no_verify, checker=checker,
                               pricing=pricing)
        rendered = Rendered(report.all_passed,
                            report.json_parts() if as_json or report_dir else None,
                            [to_markdown(report.to_dict()).encode()]
                            if not as_json or report_dir else None)
        if report_dir is not None:
            write_rendered(report_dir, rendered)
        if junit_path is not None:
            write_junit(report.to_dict(), runs, junit_path)
        # Bytes straight out, in parts: no 150 MB string to decode and encode again.
        sys.stdout.flush()  # anything printed as text goes first
        stdout = sys.stdout.buffer
        write_parts(stdout, (rendered.json if as_json else rendered.markdown) or [])
        stdout.flush()
    if not rendered.passed and not allow_failures:
        sys.exit(1)


def write_junit(report: dict, runs: Path | None, path: Path) -> None:
    """The JUnit file of a scoring, with the taxonomy ``run`` gives (read from the mission
    folders under ``runs`` where there are some), so an infrastructure failure is an
    ``error`` there too and not the agent's ``failure``."""
    import copy

    from evalkit.eval.taxonomy import annotate
    from evalkit.report import junit

    report = {**report, "halves": copy.deepcopy(report["halves"])}
    junit.write(junit.from_score(annotate(report, runs)), path)
