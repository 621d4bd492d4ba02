"""``evalkit run`` and ``evalkit measure``: parse, call the library, print, exit code.

The work is in ``evalkit.eval.runner`` (spawning, capture), ``evalkit.eval.measure``
(the matrix) and ``evalkit.eval.stats``; this module only wires flags to them and
hands them the report writer (rendering belongs to ``evalkit.report``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

#: The agent's command comes after ``--`` (or is the trailing arguments, from the first
#: one that does not start with ``-``); an option evalkit does not know is refused with
#: click's "No such option … Did you mean …", exit 2 — never taken as the agent, which
#: would run every mission as "could not start" and report it as a measurement.
_SPAWN = {"allow_interspersed_args": False}


def refuse_if_nothing_ran(out: Path) -> None:
    """Exit 1 with one ``Error:`` line when every try was an infrastructure failure.

    The line is the command's last, and names the first distinct causes.
    """
    from evalkit.eval.taxonomy import all_infra

    found = all_infra(out)
    if found is None:
        return
    tries, causes = found
    click.echo(f"Error: every one of the {tries} tries was an infrastructure failure, so "
               f"nothing was measured; first causes: {' | '.join(causes)} "
               "(`evalkit doctor` says what this machine lacks)", err=True)
    sys.exit(1)


def write_report_files(report: dict[str, Any], folder: Path) -> None:
    """``report.json`` and ``report.md``: the score report, then the failure taxonomy."""
    from evalkit.eval.taxonomy import to_markdown as taxonomy_markdown
    from evalkit.report.markdown import to_markdown, write_file, write_report

    _, md = write_report(report, folder)
    write_file(md, [(to_markdown(report) + "\n" + taxonomy_markdown(report)).encode("utf-8")])


def _junit_target(path: Path | None) -> None:
    """Refuse a ``--junit`` file that cannot be written before any agent is spawned."""
    if path is not None:
        from evalkit.report import junit

        junit.check_target(path)


def _common(fn: Any) -> Any:
    options = [
        click.option("--suite", "suite_path", required=True, type=click.Path(path_type=Path),
                     help="Suite file (YAML/JSON) or a folder holding missions.yaml."),
        click.option("--out", required=True, type=click.Path(path_type=Path),
                     help="A new (or empty) folder for the runs and reports."),
        click.option("--split", type=click.Choice(["train", "test", "all"]), default="all",
                     show_default=True, help="Which half to run."),
        click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Missions run at once (each its own agent process)."),
        click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True),
                     default=600.0, show_default=True,
                     help="Seconds a mission may run before its process group is killed."),
        click.option("--agent", "variant", metavar="VARIANT",
                     help="Built-in runtime only: run <key>.VARIANT.yaml from the suite's "
                          "agents folder instead of <key>.yaml (which is 'good')."),
        click.option("--executor", type=click.Choice(["local", "ray"]), default="local",
                     show_default=True, help="local processes, or Ray tasks (shared storage)."),
        click.option("--ray-address", metavar="ADDR",
                     help="Ray cluster to join (default: RAY_ADDRESS, else a local one)."),
        click.option("--secret", "secrets", metavar="NAME", multiple=True,
                     help="An environment variable whose value is secret (repeatable; it must "
                          "be set): scrubbed from everything the harness writes, and named to "
                          "the built-in runtime with --secret so its records are scrubbed too "
                          "(a spawn line's agent is told nothing: add it there)."),
        click.option("--quiet", is_flag=True, help="No progress display."),
        click.option("--overwrite", is_flag=True,
                     help="Replace --out when it holds an earlier run's or measure's output "
                          "(refused for any other folder)."),
        click.option("--junit", "junit_path", type=click.Path(path_type=Path), metavar="FILE",
                     help="Also write the verdicts as JUnit XML, for a CI server's test page."),
        click.option("--pricing", type=click.Path(path_type=Path), metavar="FILE",
                     help="A pricing file: every run is costed at its prices (and the built-in "
                          "agent is given it)."),
        click.option("--max-tokens", type=int, metavar="N",
                     help="Built-in agent: end each mission before it uses more than N tokens."),
        click.option("--max-cost", type=float, metavar="AMOUNT",
                     help="Built-in agent: end each mission before it costs more than AMOUNT "
                          "(needs --pricing)."),
        click.argument("spawn", nargs=-1, type=click.UNPROCESSED),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@click.command(context_settings=_SPAWN)
@_common
@click.option("--allow-failures", is_flag=True, help="Exit 0 even when a mission failed.")
def run(suite_path: Path, out: Path, split: str, jobs: int, timeout_s: float,
        variant: str | None, executor: str, ray_address: str | None, secrets: tuple[str, ...],
        quiet: bool, overwrite: bool, junit_path: Path | None, pricing: Path | None,
        max_tokens: int | None, max_cost: float | None, spawn: tuple[str, ...],
        allow_failures: bool) -> None:
    """Spawn the agent once per mission, capture its stream, score it.

    The agent is everything after --, e.g. `-- my-agent --model m`; without one,
    the built-in runtime runs the suite's scripted agents.
    """
    from evalkit.eval.runner import Spending, run_suite

    _junit_target(junit_path)
    result = run_suite(suite_path, out, write=write_report_files, spawn=spawn or None,
                       split=split, jobs=jobs, timeout_s=timeout_s, variant=variant,
                       executor=executor, ray_address=ray_address, progress=not quiet,
                       warn=lambda line: click.echo(line, err=True), secrets=secrets,
                       overwrite=overwrite, spending=Spending(pricing, max_tokens, max_cost))
    failing = [v for v in result.report["verdicts"] if not v.get("passed")]
    if failing:
        click.echo(f"failed ({len(failing)}):")
        for v in failing:
            word = str(v.get("category") or ("missing" if v.get("missing") else "fail")).upper()
            first = (v.get("reasons") or [v.get("infra") or ""])[0]
            click.echo(f"  {word:<7} {v['key']} ({v['split']}){' — ' + first if first else ''}")
    for half, data in result.report["halves"].items():
        c = data["categories"]
        click.echo(f"{half}: {c['pass']}/{data['totals']['missions']} passed; "
                   f"{c['fail']} failed, {c['missing']} missing, {c['infra']} infra errors")
    click.echo(f"report: {out / 'report.md'}")
    if junit_path is not None:
        from evalkit.report import junit

        junit.write(junit.from_score(result.report), junit_path)
    refuse_if_nothing_ran(out)
    if not result.report["passed"] and not allow_failures:
        sys.exit(1)


@click.command(context_settings=_SPAWN)
@_common
@click.option("--config", "configs", multiple=True, metavar="NAME",
              help="A row of the matrix (repeatable; default: every row). The baseline "
                   "'direct' always runs.")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="Runs of every mission per row.")
@click.option("--rescore", is_flag=True,
              help="Re-derive every report and the statistics of an existing --out; no agent.")
def measure(suite_path: Path, out: Path, split: str, jobs: int, timeout_s: float,
            variant: str | None, executor: str, ray_address: str | None,
            secrets: tuple[str, ...], quiet: bool, overwrite: bool, junit_path: Path | None,
            pricing: Path | None, max_tokens: int | None, max_cost: float | None,
            spawn: tuple[str, ...], configs: tuple[str, ...], repeat: int,
            rescore: bool) -> None:
    """Run a suite over a configuration matrix with repeats; compare every row with direct.

    Rows: direct (baseline), swarm, native, grounding, must-cite, claim-table, planes.
    A row the agent or the manifest cannot honour is skipped with the reason.
    """
    from evalkit.eval import measure as matrix_mod
    from evalkit.eval.runner import Spending

    _junit_target(junit_path)
    written: dict[str, dict[str, Any]] = {}

    def write(report: dict[str, Any], folder: Path) -> None:
        write_report_files(report, folder)
        written[folder.relative_to(out).as_posix()] = report

    if rescore:
        if max_tokens is not None or max_cost is not None:
            from evalkit.errors import EvalkitError

            raise EvalkitError("--rescore runs no agent, so --max-tokens and --max-cost "
                               "would hold nothing; --pricing re-costs the runs")
        result = matrix_mod.rescore(suite_path, out, write=write, pricing=pricing)
    else:
        result = matrix_mod.measure_suite(
            suite_path, out, write=write, spawn=spawn or None, configs=configs,
            repeat=repeat, jobs=jobs, timeout_s=timeout_s, split=split, variant=variant,
            executor=executor, ray_address=ray_address, progress=not quiet,
            warn=lambda line: click.echo(line, err=True), secrets=secrets, overwrite=overwrite,
            spending=Spending(pricing, max_tokens, max_cost))
    click.echo(matrix_mod.to_markdown(result.matrix), nl=False)
    click.echo(f"matrix: {out / 'matrix.json'}")
    if junit_path is not None:
        from evalkit.report import junit

        junit.write(junit.from_matrix(result.matrix, written), junit_path)
    refuse_if_nothing_ran(out)
