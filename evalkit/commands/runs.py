"""``evalkit runs list|show``: the run store as records, events and terminal summaries.

A thin reader over ``evalkit.store.runviews``: what a host keeps of a run
(refs and bounded metadata), never the prompts, arguments, outputs or answers
themselves. Exit codes: 0 shown (an empty list too), 2 a bad word, date or run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

RUNS_FORMAT = "evalkit-runs"
RUNS_VERSION = 1
#: How many events ``runs show`` prints unless told.
EVENTS_SHOWN = 20


def _root(given: Path | None) -> Path:
    from evalkit.errors import EvalkitError
    from evalkit.store.layout import runs_root

    if given is not None:
        return given
    root = runs_root()
    if root is None:
        raise EvalkitError("recording is switched off (EVALKIT_RUNS=off): give the run store "
                           "folder as ROOT")
    return root


@click.group("runs")
def runs() -> None:
    """List and show recorded runs (refs and bounded metadata, never payloads)."""


@runs.command("list")
@click.argument("root", required=False, type=click.Path(path_type=Path))
@click.option("--suite", metavar="NAME", help="Only runs of this suite.")
@click.option("--outcome", metavar="WORD", help="Only runs that ended with this outcome.")
@click.option("--since", metavar="DATE", help="Only runs created at or after DATE (ISO, UTC).")
@click.option("--until", metavar="DATE",
              help="Only runs created at or before DATE (a bare date: that whole day).")
@click.option("--json", "as_json", is_flag=True, help="Print the run records as JSON.")
def list_command(root: Path | None, suite: str | None, outcome: str | None,
                 since: str | None, until: str | None, as_json: bool) -> None:
    """Every run under ROOT (default: the run store), oldest first."""
    from evalkit.store.runviews import list_runs

    where = _root(root)
    found = list_runs(where, suite=suite, outcome=outcome, since=since, until=until)
    if as_json:
        click.echo(json.dumps({"format": RUNS_FORMAT, "version": RUNS_VERSION,
                               "root": str(where), "runs": [r.to_dict() for r in found]},
                              indent=2, ensure_ascii=False))
        return
    for record in found:
        click.echo(f"{record.run_id}  {record.status:<20}  {record.created_at or '-':<24}  "
                   f"{record.workflow_id or '-'}  {record.task_id or '-'}")
    click.echo(f"{len(found)} run(s) in {where}")


@runs.command("show")
@click.argument("run")
@click.option("--root", type=click.Path(path_type=Path),
              help="The run store a run id is looked up in (default: the run store).")
@click.option("--events", "limit", type=click.IntRange(min=0), default=EVENTS_SHOWN,
              show_default=True, metavar="N", help="Show the first N events.")
@click.option("--json", "as_json", is_flag=True, help="Print record, summary and events as JSON.")
def show(run: str, root: Path | None, limit: int, as_json: bool) -> None:
    """One run (a run id or a run directory): its record, how it ended, its first events."""
    from evalkit.store.runviews import find_run, run_events, run_record, terminal_summary

    path = find_run(run, _root(root) if root is not None or not Path(run).is_dir() else None)
    record = run_record(path, root=root)
    summary = terminal_summary(path)
    events = run_events(path, limit=limit)
    if as_json:
        click.echo(json.dumps({"format": RUNS_FORMAT, "version": RUNS_VERSION,
                               "record": record.to_dict(), "summary": summary.to_dict(),
                               "events": [e.to_dict() for e in events]},
                              indent=2, ensure_ascii=False))
        return
    for line in show_lines(record.to_dict(), summary.to_dict(),
                           [e.to_dict() for e in events]):
        click.echo(line)


def show_lines(record: dict[str, Any], summary: dict[str, Any],
               events: list[dict[str, Any]]) -> list[str]:
    """What a person reads of one run."""
    tokens = (f"{_n(summary['input_tokens'])} in / {_n(summary['output_tokens'])} out "
              f"({_n(summary['total_tokens'])})")
    lines = [
        f"run {record['run_id']}: {record['status']}",
        f"  suite {record['workflow_id'] or '-'}, task {record['task_id'] or '-'}",
        f"  created {record['created_at'] or '-'}, updated {record['updated_at'] or '-'}, "
        f"finished {record['finished_at'] or '-'}",
        f"  path {record['path']}",
        f"  steps {_n(summary['steps'])}, tokens {tokens}, model calls "
        f"{_n(summary['llm_calls'])}, tool calls {summary['tool_calls']} "
        f"({', '.join(summary['used_tools']) or 'none'})",
        f"  gated {', '.join(summary['gated_tools']) or 'none'}, denied "
        f"{summary['denied_calls']}, failed {summary['failed_calls']}",
        f"  answer {summary['content_ref'] or 'none'}"
        + (f" ({summary['answer_chars']} chars)" if summary["answer_chars"] is not None else ""),
    ]
    if summary["abort_reason"]:
        lines.append(f"  ended: {summary['abort_reason']}")
    meta = {k: v for k, v in record["metadata"].items() if k not in ("reason", "steps")}
    if meta:
        lines.append("  " + " ".join(f"{k}={_value(v)}" for k, v in meta.items()))
    lines.append(f"events ({len(events)} of {summary['events']}"
                 + (f", {summary['skipped_lines']} unreadable line(s) skipped"
                    if summary["skipped_lines"] else "") + "):")
    for event in events:
        step = f" [{_n(event['index'])}]" if event["index"] is not None else ""
        said = " ".join(f"{k}={_value(v)}" for k, v in event["metadata"].items())
        lines.append(f"  {event['seq']:>4}  {event['at'] or '-'}  {event['type']}{step}"
                     + (f"  {said}" if said else ""))
    return lines


def _n(value: Any) -> str:
    return "-" if value is None else str(value)


def _value(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False) if (" " in value or not value) else value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
