"""``evalkit contract``: the stream contract as JSON (or as CONTRACT.md's text)."""

from __future__ import annotations

import json

import click


@click.command()
@click.option("--markdown", is_flag=True, help="Print the human rendering (CONTRACT.md) instead.")
def contract(markdown: bool) -> None:
    """Print the mission stream contract, schema version 1."""
    from evalkit import contract as wire
    from evalkit.contract_doc import render

    if markdown:
        click.echo(render(), nl=False)
    else:
        click.echo(json.dumps(wire.as_dict(), indent=2, ensure_ascii=False))
