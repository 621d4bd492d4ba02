"""``evalkit ingest`` and ``evalkit sql``: the Parquet dataset and DuckDB over it."""

from __future__ import annotations

import csv
import json
import math
import sys
from datetime import datetime
from pathlib import Path

import click


@click.command()
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path),
              help="Dataset folder to write (default: FOLDER/dataset.parquet).")
def ingest(folder: Path, out: Path | None) -> None:
    """Turn every run directory under FOLDER (and events file in it) into a Parquet dataset.

    The verdicts of the score reports under FOLDER (report.json, as run, measure and
    score --report leave them) become its verdicts table.
    """
    import evalkit
    from evalkit.eval.tables import gathered_words

    result = evalkit.ingest(folder, out, warn=_warn)
    click.echo(f"ingested {result.runs} runs, {result.events} records"
               f"{gathered_words(result.gathered)} into {result.out} "
               f"({result.bytes / 1e6:.1f} MB in {result.seconds:.2f} s, "
               f"{result.mb_per_s:.0f} MB/s)")


def _warn(sentence: str) -> None:
    """Told of each score report the verdicts table leaves out."""
    click.echo(f"evalkit: {sentence}", err=True)


@click.command()
@click.argument("folder", type=click.Path(path_type=Path), required=False)
@click.argument("query", required=False)
@click.option("--query", "name", metavar="NAME",
              help="Ask a question evalkit ships: pass-rates, slowest-tools, token-cost, flaky.")
@click.option("--show", is_flag=True, help="Print the SQL of --query NAME instead of running it.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
              show_default=True)
def sql(folder: Path | None, query: str | None, name: str | None, show: bool, fmt: str) -> None:
    """Answer QUERY with DuckDB over the runs, events, model_calls, tool_calls,
    tool_catalogue, summaries and verdicts tables, and the views runs_latest,
    events_latest and verdicts_latest (docs/TABLES.md).

    FOLDER is a dataset written by `evalkit ingest`, or a folder of runs and score
    reports (ingested first).
    QUERY is one SELECT (DESCRIBE, SHOW, SUMMARIZE, FROM and WITH included) or an EXPLAIN
    of one: sql only reads, so anything that could write (COPY, CREATE, ATTACH, SET …)
    is refused before it runs, and files outside the dataset cannot be read.
    --query NAME asks a named question instead; --show prints its SQL.
    """
    import evalkit
    from evalkit.errors import EvalkitError

    if name is not None:
        from evalkit.eval.named_queries import named

        if query is not None:
            raise EvalkitError("give either a QUERY or --query NAME, not both")
        text = named(name).sql
        if show:
            click.echo(text, nl=False)
            return
        query = text
    elif show:
        raise EvalkitError("--show prints the SQL of a named query: give --query NAME too")
    if folder is None or query is None:
        raise EvalkitError("give a FOLDER (a dataset or a folder of runs) and a QUERY, "
                           "or --query NAME")
    columns, rows = evalkit.query(folder, query, warn=_warn)
    if fmt == "json":
        for row in rows:
            click.echo(json.dumps(dict(zip(columns, map(_json_value, row), strict=True)),
                                  ensure_ascii=False, default=str, allow_nan=False))
    elif fmt == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows(rows)
    else:
        click.echo(_table(columns, rows), nl=False)


def _json_value(value: object) -> object:
    """A value as a JSON line can hold it: NaN and infinities (DuckDB's DOUBLE has them,
    JSON has not) as null, so every line stays JSON a program can read; a time as ISO 8601."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, datetime):  # a TIMESTAMP WITH TIME ZONE: ISO 8601, as recorded
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return [_json_value(item) for item in value]
    if isinstance(value, dict):
        return {key: _json_value(item) for key, item in value.items()}
    return value


def _table(columns: list[str], rows: list[tuple]) -> str:
    shown = [[("NULL" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in shown]) for i, c in enumerate(columns)]
    line = " | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))
    out = [line, "-+-".join("-" * w for w in widths)]
    out += [" | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in shown]
    out.append(f"({len(rows)} rows)")
    return "\n".join(out) + "\n"
