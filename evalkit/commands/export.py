"""``evalkit export``: scored runs in other tools' formats (``export inspect``, ``export otel``)."""

from __future__ import annotations

from pathlib import Path

import click

from evalkit.commands.otel import export_otel


@click.group()
def export() -> None:
    """Write scored runs in another tool's format."""


@export.command("inspect")
@click.argument("runs", type=click.Path(path_type=Path))
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="A new (or empty) folder for the logs; `inspect view --log-dir OUT`.")
def inspect_logs(runs: Path, out: Path) -> None:
    """Inspect AI eval logs, one per score report under RUNS (a suite run), for `inspect view`.

    Samples carry the objective, the recorded messages and tool calls, the answer,
    the verdict as the score and the run's token usage.
    """
    from evalkit import extras
    from evalkit.errors import EvalkitError

    extras.require(extras.INSPECT_EXPORT)  # before anything is read or written
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise EvalkitError(f"--out {out} already exists and is not empty; choose a new folder "
                           "(logs are never written over)")
    from evalkit.report.inspect_log import export as write_logs

    for written in write_logs(runs, out):
        click.echo(f"{written.log}: {written.samples} samples from {written.report}")


export.add_command(export_otel)
