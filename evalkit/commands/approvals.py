"""``evalkit approvals list|show|approve|deny``: a person decides what a mission asked for.

This module is the only writer of the *approved* state. It lives outside
``evalkit.runtime`` on purpose: a mission process has no code path that can
approve its own request (a test reads the runtime's source to prove it). A
decision names who decides (``--decided-by``; free text, never empty) and is
signed with the state folder's Ed25519 key over the request's digest, so the
runtime can tell it from a file rewritten on disk (``decision_problem``).
Each request is decided once — the write re-reads the record under the
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
#: What ``list`` shows for a request whose record fails its digest or decision.
INVALID = "invalid"


def _store() -> Any:
    from evalkit.runtime.governance.approvals import ApprovalStore, approvals_root

    root = approvals_root(os.environ)
    if root is None:
        raise EvalkitError("approvals are switched off (EVALKIT_APPROVALS=off); there is "
                           "nothing to list or decide")
    return ApprovalStore(root)


def approve(store: Any, approval_id: str, *, decided_by: str,
            note: str | None = None, key: Any = None) -> dict[str, Any]:
    """A person says yes: pending -> approved, with a signed decision, once."""
    return _decide(store, approval_id, "approve", decided_by=decided_by, note=note, key=key)


def deny(store: Any, approval_id: str, *, decided_by: str,
         note: str | None = None, key: Any = None) -> dict[str, Any]:
    """A person says no: pending -> refused, with a signed decision, once."""
    return _decide(store, approval_id, "deny", decided_by=decided_by, note=note, key=key)


def _decide(store: Any, approval_id: str, verdict: str, *, decided_by: str,
            note: str | None, key: Any) -> dict[str, Any]:
    from evalkit.gate.approval import sign_decision
    from evalkit.runtime.governance.approvals import must_be_pending, request_digest, signer
    from evalkit.store.signing import local_signer

    who = signer(decided_by)
    key = key if key is not None else local_signer()

    def change(record: dict[str, Any]) -> dict[str, Any]:
        must_be_pending(record)
        digest = request_digest(record.get("tool"), record.get("arguments"))
        if record.get("digest") != digest:
            raise EvalkitError(f"approval {approval_id}'s record was altered: its tool and "
                               "arguments no longer match the digest the mission asked with; "
                               "nothing was decided")
        decision = sign_decision(key, approval_id=approval_id, digest=digest, verdict=verdict,
                                 decided_by=who, note=note)
        if verdict == "approve":
            record.update(state="approved", decided_by=who, decided_at=decision["decided_at"],
                          note=note, decision=decision)
        else:
            record.update(state="refused", decided_by=who, decided_at=decision["decided_at"],
                          note=note, decision=decision)
        return record

    return store.update(approval_id, change)


def problem_of(record: dict[str, Any]) -> str | None:
    """Why a request's record cannot be trusted as it stands, or None."""
    from evalkit.runtime.governance.approvals import decision_problem, request_digest

    if record.get("digest") != request_digest(record.get("tool"), record.get("arguments")):
        return "its tool and arguments no longer match the digest the mission asked with"
    state = record.get("state")
    # A yes said over --control is spent at once and signs nothing: the channel is the
    # operator's own. Any other approved or spent request must carry a signed decision.
    if state == "approved" or (state == "spent" and record.get("decided_via") != "control"):
        return decision_problem(record)
    return None


def _line(record: dict[str, Any]) -> str:
    objective = " ".join(str(record.get("objective") or "").split())
    if len(objective) > 50:
        objective = objective[:49] + "…"
    who = f" by {record['decided_by']}" if record.get("decided_by") else ""
    problem = problem_of(record)
    state = INVALID if problem else record.get("state", "?")
    why = f"  [{problem}]" if problem else ""
    return (f"{record['id']}  {state:<9}  {record.get('tool')}  "
            f"{record.get('created_at')}  {record.get('run_id') or '-'}{who}  {objective}{why}")


@click.group("approvals")
def approvals() -> None:
    """List and decide gated tool requests (EVALKIT_APPROVALS says where they live)."""


@approvals.command("list")
@click.option("--state", type=click.Choice((*STATES, INVALID)),
              help="Only requests in this state.")
@click.option("--json", "as_json", is_flag=True, help="Print the records as a JSON list.")
def list_command(state: str | None, as_json: bool) -> None:
    """Every request, oldest first; one whose record was altered shows as invalid."""
    store = _store()
    records = []
    for record in store.list():
        problem = problem_of(record)
        shown = INVALID if problem else record.get("state")
        if state is None or shown == state:
            records.append({**record, "invalid": problem} if problem else record)
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


@approvals.command("deny")
@click.argument("approval_id", metavar="ID")
@click.option("--decided-by", required=True, metavar="NAME", help="Who decides (required).")
@click.option("--note", metavar="TEXT", help="Why, for the record.")
def deny_command(approval_id: str, decided_by: str, note: str | None) -> None:
    """Deny a pending request (also spelled `refuse`)."""
    from evalkit.runtime.pause import reject

    record = deny(_store(), approval_id, decided_by=decided_by, note=note)
    # The paused run's checkpoint goes with it: rejected, its sealed state dropped unopened.
    paused = reject(os.environ, approval_id, operator=record["decided_by"])
    click.echo(f"{record['id']} refused by {record['decided_by']}: {record['tool']} will not run"
               + ("; the paused run's checkpoint is rejected" if paused else ""))


approvals.add_command(deny_command, "refuse")
