"""``evalkit approvals list|show|approve|refuse``: a person decides what a mission asked for.

This module is the only writer of the *approved* state. It lives outside
``evalkit.runtime`` on purpose: a mission process has no code path that can
approve its own request (a test reads the runtime's source to prove it). A
decision must be signed (``--decided-by``; free text, but never empty), and
each request is decided once — the write re-reads the record under the
folder's lock, so two people deciding at once cannot both win.
"""

from __future__ import annotations

import json
import os
from typing import Any

import click

from evalkit.errors import EvalkitError

#: The states a request moves through; "approved" is written only here.
STATES = ("pending", "approved", "refused", "spent", "abandoned")


def _store() -> Any:
    from evalkit.runtime.governance.approvals import ApprovalStore, approvals_root

    root = approvals_root(os.environ)
    if root is None:
        raise EvalkitError("approvals are switched off (EVALKIT_APPROVALS=off); there is "
                           "nothing to list or decide")
    return ApprovalStore(root)


def approve(store: Any, approval_id: str, *, decided_by: str,
            note: str | None = None) -> dict[str, Any]:
    """A person says yes: pending -> approved, signed, once."""
    from evalkit.runtime.governance.approvals import must_be_pending, signer
    from evalkit.store.runstore import now_iso

    who = signer(decided_by)

    def change(record: dict[str, Any]) -> dict[str, Any]:
        must_be_pending(record)
        record.update(state="approved", decided_by=who, decided_at=now_iso(), note=note)
        return record

    return store.update(approval_id, change)


def _line(record: dict[str, Any]) -> str:
    objective = " ".join(str(record.get("objective") or "").split())
    if len(objective) > 50:
        objective = objective[:49] + "…"
    who = f" by {record['decided_by']}" if record.get("decided_by") else ""
    return (f"{record['id']}  {record.get('state', '?'):<9}  {record.get('tool')}  "
            f"{record.get('created_at')}  {record.get('run_id') or '-'}{who}  {objective}")


@click.group("approvals")
def approvals() -> None:
    """List and decide gated tool requests (EVALKIT_APPROVALS says where they live)."""


@approvals.command("list")
@click.option("--state", type=click.Choice(STATES), help="Only requests in this state.")
@click.option("--json", "as_json", is_flag=True, help="Print the records as a JSON list.")
def list_command(state: str | None, as_json: bool) -> None:
    """Every request, oldest first."""
    store = _store()
    records = [r for r in store.list() if state is None or r.get("state") == state]
    if as_json:
        click.echo(json.dumps(records, indent=2, ensure_ascii=False))
        return
    if not records:
        click.echo(f"no approval requests{f' in state {state}' if state else ''} in {store.root}")
        return
    for record in records:
        click.echo(_line(record))


@approvals.command("show")
@click.argument("approval_id", metavar="ID")
def show(approval_id: str) -> None:
    """One request, whole, as JSON."""
    click.echo(json.dumps(_store().get(approval_id), indent=2, ensure_ascii=False))


@approvals.command("approve")
@click.argument("approval_id", metavar="ID")
@click.option("--decided-by", required=True, metavar="NAME", help="Who decides (required).")
@click.option("--note", metavar="TEXT", help="Why, for the record.")
def approve_command(approval_id: str, decided_by: str, note: str | None) -> None:
    """Approve a pending request: one later run may make exactly that call, once."""
    record = approve(_store(), approval_id, decided_by=decided_by, note=note)
    click.echo(f"{record['id']} approved by {record['decided_by']}: {record['tool']} may run "
               f"once; start the mission with --approval {record['id']}")


@approvals.command("refuse")
@click.argument("approval_id", metavar="ID")
@click.option("--decided-by", required=True, metavar="NAME", help="Who decides (required).")
@click.option("--note", metavar="TEXT", help="Why, for the record.")
def refuse_command(approval_id: str, decided_by: str, note: str | None) -> None:
    """Refuse a pending request."""
    record = _store().refuse(approval_id, decided_by=decided_by, note=note)
    click.echo(f"{record['id']} refused by {record['decided_by']}: {record['tool']} will not run")
