"""``evalkit replay RUN`` and ``evalkit regrade DIR``: parse, call, print, exit code.

Exit codes: 0 the replay ran (drift and running off the end are reported,
not failures), 1 no event was written (replay) or a run could not be
replayed (regrade), 2 usage or a refusal to start, 3 the loop crashed.
``regrade --policy`` replays nothing (``evalkit.gate.policy_regrade``): 0, or 1
with ``--fail-on-change`` when a recorded decision would change.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

EXIT_OK, EXIT_FAILED, EXIT_CRASHED = 0, 1, 3


@click.command("replay")
@click.argument("run")
@click.option("--skill", "skills", metavar="PATH", multiple=True,
              help="Skill manifest for the replay (repeatable; replaces the recorded ones): "
                   "grounding runs fresh under it.")
@click.option("--tools", type=click.Choice(["recorded", "live"]), default="recorded",
              show_default=True, help="Serve recorded tool results, or dispatch live.")
@click.option("--events", metavar="SINK", help="Where the replay's stream goes: -, fd:N or a path.")
@click.option("--objective", metavar="TEXT",
              help="Replay under a different objective (measured as drift).")
@click.option("--live-from", type=int, metavar="STEP",
              help="Serve the recording before step STEP, then continue against a live model.")
@click.option("--provider", metavar="NAME", help="With --live-from: openai or scripted.")
@click.option("--model", metavar="NAME", help="With --live-from: the model name.")
@click.option("--api-base", metavar="URL", help="With --live-from: the endpoint's base URL.")
@click.option("--api-key", metavar="KEY", envvar="EVALKIT_API_KEY", show_envvar=False,
              help="With --live-from: the endpoint key (never recorded).")
@click.option("--script", metavar="FILE", help="With --live-from: a scripted model's replies.")
@click.option("--quiet", is_flag=True, help="Print only the summary, not the narration.")
@click.pass_context
def replay(ctx: click.Context, run: str, skills: tuple[str, ...], tools: str,
           events: str | None, objective: str | None, live_from: int | None, quiet: bool,
           **live: Any) -> None:
    """Re-run recording RUN (a run id or a run directory) through the loop, no model asked."""
    from evalkit.errors import EvalkitError
    from evalkit.runtime.console import Console, diagnostic
    from evalkit.runtime.mission import MissionSettings, launch
    from evalkit.runtime.replay.session import summary_lines

    if live_from is None and any(live[k] for k in ("provider", "model", "api_base", "script")):
        raise EvalkitError("--provider, --model, --api-base and --script choose the live model "
                           "of a fork: give --live-from STEP too")
    provider = live["provider"] or ("scripted" if live["script"] else "openai")
    settings = MissionSettings(
        objective=objective or "", events=events, replay=run, tools=tools, skills=skills,
        live_from=live_from, provider=provider, model=live["model"],
        api_base=live["api_base"], api_key=live["api_key"], script=live["script"])
    prose = sys.stderr if events in ("-", "fd:1") else sys.stdout
    launched = launch(settings, observer=None if quiet else Console(prose),
                      notice=lambda said: click.echo(diagnostic(said), err=True))
    outcome = launched.outcome
    if outcome.records == 0:
        click.echo(diagnostic(f"Error: no event was written: {outcome.reason}"), err=True)
        ctx.exit(EXIT_FAILED)
    why = f": {outcome.reason}" if outcome.reason else ""
    click.echo(f"replay {outcome.run_id} of {run}: {outcome.outcome} after "
               f"{outcome.steps} step(s){why}", file=prose)
    for line in summary_lines(launched.notes):
        click.echo(diagnostic(line), file=prose)
    if outcome.error:
        click.echo(diagnostic(f"internal error in the mission loop:\n{outcome.error}"), err=True)
        ctx.exit(EXIT_CRASHED)
    ctx.exit(EXIT_OK)


@click.command("regrade")
@click.argument("source", metavar="DIR", type=click.Path(path_type=Path))
@click.option("--skill", "skills", metavar="PATH", multiple=True,
              help="The new skill manifest(s) every run is replayed under (repeatable).")
@click.option("--out", type=click.Path(path_type=Path),
              help="A new folder: one replayed run per input, at the same relative place "
                   "(required unless --policy).")
@click.option("--jobs", type=click.IntRange(min=1), metavar="N",
              help="Worker processes (default: one per CPU).")
@click.option("--json", "as_json", is_flag=True, help="Print the regrade report as JSON.")
@click.option("--pricing", type=click.Path(path_type=Path), metavar="FILE",
              help="Price every replayed call from its recorded tokens at this file's prices "
                   "(the recordings are only read).")
@click.option("--policy", type=click.Path(path_type=Path), metavar="NEW.yaml",
              help="Replay nothing: decide every recorded tool call again under this gate "
                   "policy and show what it would have allowed, held or denied.")
@click.option("--grant", "grants", metavar="SCOPE", multiple=True,
              help="With --policy: the scopes the caller holds (repeatable); without it "
                   "scopes are not checked.")
@click.option("--changed-only", is_flag=True, help="With --policy: list only changed calls.")
@click.option("--fail-on-change", is_flag=True,
              help="With --policy: exit 1 when any decision would change.")
@click.pass_context
def regrade(ctx: click.Context, source: Path, skills: tuple[str, ...], out: Path | None,
            jobs: int | None, as_json: bool, pricing: Path | None, policy: Path | None,
            grants: tuple[str, ...], changed_only: bool, fail_on_change: bool) -> None:
    """Replay every run under DIR with a new skill manifest, so `score --runs OUT` re-grades it;
    or, with --policy, show what a new gate policy would have decided for every recorded call."""
    import json

    from evalkit.errors import EvalkitError

    if policy is not None:
        if out is not None or skills or pricing is not None or jobs is not None:
            raise EvalkitError("--policy decides the recorded calls again and replays "
                               "nothing: --out, --skill, --pricing and --jobs do not apply")
        _regrade_policy(ctx, source, policy, grants, as_json, changed_only, fail_on_change)
        return
    if grants or changed_only or fail_on_change:
        raise EvalkitError("--grant, --changed-only and --fail-on-change go with --policy")
    if out is None:
        raise EvalkitError("regrade needs --out (a new folder for the replays), or --policy "
                           "NEW.yaml to decide the recorded calls again")

    from evalkit.extras import require

    require("evalkit regrade")  # the replays need the runtime (--policy, above, does not)

    from evalkit.runtime.regrade import REPORT_FILE, find_runs
    from evalkit.runtime.regrade import regrade as regrade_folder

    if not sys.stderr.isatty():  # a bar is for a person watching; a log gets no stray line
        report = regrade_folder(source, out, skills=skills, jobs=jobs, pricing=pricing)
    else:
        total = len(find_runs(source)) if source.is_dir() else 0
        with click.progressbar(length=total, label="regrade", file=sys.stderr,
                               show_pos=True) as bar:
            report = regrade_folder(source, out, skills=skills, jobs=jobs, pricing=pricing,
                                    on_done=lambda _row: bar.update(1))
    if as_json:
        click.echo(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        for line in regrade_lines(report):
            click.echo(line)
        click.echo(f"report: {out / REPORT_FILE}")
    ctx.exit(EXIT_FAILED if report["totals"]["failed"] else EXIT_OK)


def _regrade_policy(ctx: click.Context, source: Path, policy: Path, grants: tuple[str, ...],
                    as_json: bool, changed_only: bool, fail_on_change: bool) -> None:
    """``regrade --policy``: exit 0, or 1 with ``--fail-on-change`` when a decision moved."""
    import json

    from evalkit.gate.policy_regrade import regrade_policy, report_lines

    report = regrade_policy(source, policy, granted_scopes=list(grants) if grants else None)
    if as_json:
        click.echo(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        for line in report_lines(report, changed_only=changed_only):
            click.echo(line)
    ctx.exit(EXIT_FAILED if fail_on_change and report["totals"]["changed"] else EXIT_OK)


def regrade_lines(report: dict[str, Any]) -> list[str]:
    """The summary a person reads: totals, then every run that needs a look, by name."""
    totals = report["totals"]
    lines = [f"regraded {totals['replayed']} of {totals['runs']} run(s) into {report['out']} "
             f"in {report['seconds']} s: {totals['outcome_changed']} outcome(s) changed, "
             f"{totals['drifted']} drifted, {totals['ran_off_end']} ran off the end, "
             f"{totals['failed']} failed"]
    for row in report["runs"]:
        if row["error"]:
            lines.append(f"  failed       {row['source']}: {row['error']}")
            continue
        if row["outcome_changed"]:
            lines.append(f"  changed      {row['source']}: {row['outcome_before']} -> "
                         f"{row['outcome_after']}")
        if row["drift"]:
            first = row["drift"]
            lines.append(f"  drifted      {row['source']}: model call {first['call']}: "
                         f"{first['detail']}")
        if row["ran_off_end"]:
            lines.append(f"  ran off end  {row['source']}: at model call "
                         f"{row['ran_off_end']['call']}")
    return lines
