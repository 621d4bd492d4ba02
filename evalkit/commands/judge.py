"""``evalkit judge RUNS --suite S``: ask the judge once per answer and record it."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.argument("runs", type=click.Path(path_type=Path))
@click.option("--suite", "suite_path", required=True, type=click.Path(path_type=Path),
              help="Suite file (YAML/JSON) or a folder holding missions.yaml.")
@click.option("--model", help="Judge with this model instead of the suite's judge.")
@click.option("--endpoint", metavar="URL",
              help="The OpenAI-compatible base URL of the judge model (else the suite's).")
@click.option("--api-key-env", metavar="NAME",
              help="The environment variable holding the judge's key "
                   "(default: the suite's, else EVALKIT_JUDGE_API_KEY).")
@click.option("--scripted", type=click.Path(path_type=Path), metavar="FILE",
              help="Judge with this file of canned judgments instead of the suite's judge.")
@click.option("--split", type=click.Choice(["train", "test", "all"]), default="all",
              show_default=True, help="Which half to judge.")
def judge(runs: Path, suite_path: Path, model: str | None, endpoint: str | None,
          api_key_env: str | None, scripted: Path | None, split: str) -> None:
    """Grade each judged mission's answer under RUNS with a model judge, once.

    A judgment already recorded for the same rubric, answer, judge model and
    prompt version is not asked again. Judgments go to each run's
    judge/judge.jsonl, redacted and sealed; `evalkit score` reads them and
    calls no model.
    """
    import evalkit
    from evalkit.errors import EvalkitError
    from evalkit.judge import judge_runs
    from evalkit.store.seal import Checker, signer_or_none

    if model and scripted:
        raise EvalkitError("give --model or --scripted, not both: one judge per run of judge")
    if api_key_env and not model:
        raise EvalkitError("--api-key-env goes with --model: a scripted judge needs no key")
    suite = evalkit.load_suite(suite_path)
    result = evalkit.check(suite)
    if not result.ok:
        raise EvalkitError(f"suite '{suite.name}' is not gradeable: {result.problems[0]} "
                           f"(evalkit check --suite {suite_path} lists all)", exit_code=1)
    override: dict[str, object] = {}
    if model:
        override = {"model": model, "api_key_env": api_key_env, "base_url": endpoint}
    elif scripted:
        override = {"scripted": str(scripted.absolute())}
    signer, why = signer_or_none()
    if why:
        click.echo(why, err=True)
    outcome = judge_runs(suite, runs, override=override, endpoint=endpoint, split=split,
                         signer=signer, checker=Checker.for_scoring([runs]))
    for key, reason in outcome.skipped.items():
        click.echo(f"not judged: {key}: {reason}", err=True)
    for key in outcome.unreadable:
        click.echo(f"the judge's reply for {key} could not be read; it is recorded as such",
                   err=True)
    click.echo(outcome.summary())
