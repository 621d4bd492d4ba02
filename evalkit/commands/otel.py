"""``evalkit import otel`` and ``evalkit export otel``: OpenTelemetry GenAI traces in and out."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.group("import")
def import_() -> None:
    """Turn another tool's recordings into evalkit runs."""


@import_.command("otel")
@click.argument("source", type=click.Path(path_type=Path))
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="The runs folder: each run lands in OUT/<key>/, as `score --runs OUT` reads.")
@click.option("--key", default=None,
              help="File the one run of SOURCE under this mission key (default: its "
                   "gen_ai.agent.name).")
def import_otel(source: Path, out: Path, key: str | None) -> None:
    """OTLP/JSON traces (FILE or a folder of them) that follow the GenAI conventions,
    one run per invoke_agent span or per trace."""
    from evalkit.otel.importer import import_traces

    for run in import_traces(source, out, key=key):
        click.echo(f"{run.key}: {run.run_dir} ({run.outcome}, trace {run.trace_id})")


@click.command("otel")
@click.argument("runs", type=click.Path(path_type=Path))
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="The OTLP/JSON file to write (never over an existing one).")
def export_otel(runs: Path, out: Path) -> None:
    """evalkit runs (a folder of mission folders) as OTLP/JSON GenAI spans."""
    from evalkit.errors import EvalkitError
    from evalkit.otel.exporter import export
    from evalkit.store.replace import replace_file

    if out.exists():
        raise EvalkitError(f"--out {out} already exists; choose a new file")
    data = export(runs)
    replace_file(out, json.dumps(data, ensure_ascii=False).encode() + b"\n")
    spans = sum(len(s["spans"]) for r in data["resourceSpans"] for s in r["scopeSpans"])
    click.echo(f"{out}: {spans} spans")
