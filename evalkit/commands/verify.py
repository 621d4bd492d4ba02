"""``evalkit verify PATH...``: is every recording as it was when it was closed?"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--trust", "trust_files", multiple=True, type=click.Path(path_type=Path),
              metavar="KEY.pub", help="Also trust seals signed by this public key. Repeatable.")
@click.option("--require-signed", is_flag=True,
              help="Exit 1 when a stream carries no seal (a folder meant to be sealed whole).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per folder.")
@click.option("--certificates", is_flag=True,
              help="Also recompute each run's certificates from its records; exit 1 when one "
                   "no longer holds up.")
@click.option("--issue", is_flag=True,
              help="With --certificates: first write certificates.jsonl for each run that has "
                   "none (runs closed without them; an existing file is never replaced).")
def verify(paths: tuple[Path, ...], trust_files: tuple[Path, ...], require_signed: bool,
           as_json: bool, certificates: bool, issue: bool) -> None:
    """Check runs, a run/measure output folder or recordings/ against their seals.

    Each sealed folder is verified (every file as recorded, signed by a trusted
    key) or tampered (which file, which line); a stream no seal lists is
    unsigned — a foreign stream, or a run whose writer died before closing it.
    Exit 1 when anything is tampered (or, with --require-signed, unsigned).

    With --certificates, each run folder's certificates (docs/GOVERNANCE.md) are
    recomputed from its records: certified, certificate broken (which theorem,
    why) or no certificates; exit 1 on a broken one.
    """
    from evalkit.errors import EvalkitError

    if issue and not certificates:
        raise EvalkitError("--issue writes certificates for --certificates to check; "
                           "give both.")
    from evalkit.store.seal import TAMPERED, UNSIGNED, Checker, summary, verify_paths

    checker = Checker.for_scoring(paths, trust_files)
    findings = verify_paths(paths, checker)
    for f in findings:
        shown = os.path.relpath(f.path) if f.path.is_relative_to(Path.cwd()) else str(f.path)
        if as_json:
            click.echo(json.dumps({"path": shown, "result": f.word, "seal": f.kind,
                                   "files": f.files, "problems": list(f.problems),
                                   "key": f.key, "trusted_by": f.trusted_by},
                                  ensure_ascii=False))
            continue
        if f.word == UNSIGNED:
            click.echo(f"unsigned  {shown}: no seal lists it")
        elif f.word == TAMPERED:
            click.echo(f"tampered  {shown}: {'; '.join(f.problems)}")
        else:
            trusted = f", trusted by {f.trusted_by}" if f.trusted_by else ""
            click.echo(f"verified  {shown} ({f.kind} seal, {f.files} files, key {f.key}"
                       f"{trusted})")
    counts = summary(findings)
    if not as_json:
        click.echo(", ".join(f"{n} {word}" for word, n in counts.items()), err=True)
    unsealed = {(f.path.parent if f.path.is_file() else f.path).resolve()
                for f in findings if f.word == UNSIGNED}
    broken = _certificates(paths, issue, as_json, unsealed) if certificates else 0
    if counts[TAMPERED] or (require_signed and counts[UNSIGNED]) or broken:
        sys.exit(1)


def _certificates(paths: tuple[Path, ...], issue: bool, as_json: bool,
                  unsealed: set[Path]) -> int:
    """One line per run folder: certified, certificate broken, or no certificates; returns
    how many runs hold a broken certificate. A certificate recomputes from what the records
    say now: for a run no seal covers (``unsealed``) that is said, since anyone could have
    rewritten its records and issued certificates for them."""
    from evalkit.errors import EvalkitError
    from evalkit.gate.certificates import issue as issue_run
    from evalkit.gate.certificates import read_certificates, recompute, runs_under

    runs = sorted({run for path in paths for run in runs_under(path)})
    counts = {"certified": 0, "broken": 0, "none": 0}
    for run in runs:
        shown = os.path.relpath(run) if run.absolute().is_relative_to(Path.cwd()) else str(run)
        if issue and read_certificates(run) is None:
            try:
                issue_run(run)
            except OSError as exc:
                raise EvalkitError(f"cannot write the certificates of {shown}: "
                                   f"{exc.strerror or exc}.") from None
        held = read_certificates(run)
        problems = [str(f) for f in recompute(run)] if held is not None else []
        word = "no certificates" if held is None else (
            "certificate broken" if problems else "certified")
        counts["none" if held is None else "broken" if problems else "certified"] += 1
        if as_json:
            click.echo(json.dumps({"path": shown, "certificates": word,
                                   "verdicts": {str(c.get("theorem")): c.get("verdict")
                                                for c in held or []},
                                   "problems": problems},
                                  ensure_ascii=False))
        elif problems:
            for problem in problems:
                click.echo(f"certificate broken  {shown}: {problem}")
        elif held is None:
            click.echo(f"no certificates  {shown}")
        else:
            violated = [str(c.get("theorem")) for c in held if c.get("verdict") != "holds"]
            said = f"; violated: {', '.join(violated)}" if violated else "; every theorem holds"
            bare = (" — unsealed: no seal vouches for the records they were computed from"
                    if run.resolve() in unsealed else "")
            click.echo(f"certified  {shown} ({len(held)} certificates{said}){bare}")
    if not as_json:
        click.echo(f"{counts['certified']} certified, {counts['broken']} broken, "
                   f"{counts['none']} without certificates", err=True)
    return counts["broken"]
