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
def verify(paths: tuple[Path, ...], trust_files: tuple[Path, ...], require_signed: bool,
           as_json: bool) -> None:
    """Check runs, a run/measure output folder or recordings/ against their seals.

    Each sealed folder is verified (every file as recorded, signed by a trusted
    key) or tampered (which file, which line); a stream no seal lists is
    unsigned — a foreign stream, or a run whose writer died before closing it.
    Exit 1 when anything is tampered (or, with --require-signed, unsigned).
    """
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
    if counts[TAMPERED] or (require_signed and counts[UNSIGNED]):
        sys.exit(1)
