"""``evalkit conform``: parse, call ``evalkit.eval.conform``, print one line per rule, exit.

Exit 0 when no rule failed, 1 when one did, 2 on bad input (the CLI's one sentence).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from evalkit.eval.conform.battery import DEFAULT_TIMEOUT_S

#: The agent's command comes after ``--``, as for ``run``.
_SPAWN = {"allow_interspersed_args": False}
_WORDS = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP"}


@click.command(context_settings=_SPAWN)
@click.option("--suite", "suite_path", type=click.Path(path_type=Path),
              help="A conformance suite (default: the battery shipped with evalkit).")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout, for CI.")
@click.option("--out", type=click.Path(path_type=Path),
              help="A new folder for the missions' streams (default: a fresh temporary one).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True),
              default=DEFAULT_TIMEOUT_S, show_default=True, help="Seconds one mission may run.")
@click.option("--no-gates", "no_gates", is_flag=True,
              help="The agent honours no --gate-tool (a recorder-wrapped one): leave out the "
                   "missions that need a gate, skip their rules, send SIGTERM at the first "
                   "step_started.")
@click.argument("spawn", nargs=-1, type=click.UNPROCESSED)
def conform(suite_path: Path | None, as_json: bool, out: Path | None, timeout_s: float,
            no_gates: bool, spawn: tuple[str, ...]) -> None:
    """Check that an agent speaks the mission stream: its records, order, SIGTERM,
    control channel and exit codes, never its answers.

    The agent is everything after --, spawned as `evalkit run` spawns it; with
    nothing after --, the built-in runtime is checked. --no-gates checks an agent
    without gates: the gate rules are reported SKIP, never PASS.
    """
    from evalkit.eval.conform import conform as run_kit

    result = run_kit(spawn, suite_path=suite_path, out=out, timeout_s=timeout_s,
                    gates=not no_gates)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        for rule, finding in result.findings:
            where = f" {result.out / finding.where}" if finding.where else ""
            detail = f" — {finding.detail}" if finding.detail else ""
            click.echo(f"{_WORDS[finding.status]} {rule.id}{where}{detail}")
        counts = {s: sum(f.status == s for _, f in result.findings) for s in _WORDS}
        click.echo(f"conform: {counts['pass']} passed, {counts['fail']} failed, "
                   f"{counts['skip']} skipped; streams in {result.out}")
    if not result.passed:
        sys.exit(1)
