"""``evalkit keys rotate|list``: the data keys that seal approval checkpoints.

Rotating makes a new active key; the old ones stay in the state folder so the
checkpoints they sealed still open. A key may be removed by hand once no live
(pending or leased) checkpoint uses it — ``list`` counts them. Nothing here
ever prints key material.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter

import click


def _live_by_kid() -> Counter[str]:
    """How many pending or leased checkpoints each key seals (none when there is no database)."""
    from evalkit.gate import db

    path = db.default_path()
    if not path.is_file():
        return Counter()
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            rows = conn.execute("SELECT kid, COUNT(*) FROM checkpoints WHERE state IN "
                                "('pending', 'leased') GROUP BY kid").fetchall()
        finally:
            conn.close()
    except sqlite3.Error:  # no checkpoints table yet
        return Counter()
    return Counter({str(kid): n for kid, n in rows})


@click.group("keys")
def keys() -> None:
    """Rotate and list the keys that seal approval checkpoints (in the state folder)."""


@keys.command("rotate")
def rotate() -> None:
    """Make a new active key and print its id; older keys stay for opening."""
    from evalkit.gate.sealing import KeyProvider

    click.echo(KeyProvider.default().rotate())


@keys.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per key.")
def list_command(as_json: bool) -> None:
    """Every key, oldest first: id, when made, whether active, live checkpoints it seals."""
    from evalkit.gate.sealing import KeyProvider

    provider = KeyProvider.default()
    found = provider.list()
    live = _live_by_kid()
    if not found:
        click.echo(f"no checkpoint keys in {provider.folder} (the first is made on first use, "
                   "or by evalkit keys rotate)")
        return
    for info in found:
        if as_json:
            click.echo(json.dumps({"kid": info.kid, "created": info.created,
                                   "active": info.active, "fingerprint": info.fingerprint,
                                   "live_checkpoints": live[info.kid]}))
        else:
            click.echo(f"{info.kid}  {info.created}  {'active' if info.active else 'retired'}  "
                       f"fp {info.fingerprint}  {live[info.kid]} live checkpoint(s)")
