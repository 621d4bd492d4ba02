"""``evalkit gate serve|approve``: the governance sidecar for any framework, and a person's
signed decision on a call it holds.

``serve`` speaks the NDJSON-RPC protocol of ``evalkit.gate.protocol`` on stdin and
stdout (``evalkit.gate.server``); a client such as ``evalkit.gate.Client`` spawns it.
``approve`` is the only writer of a decision: it signs, with the state folder's
Ed25519 key, the approval id and the digest of exactly what was held, so the gate
can tell it from a file edited by hand.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from evalkit.errors import EvalkitError


@click.group()
def gate() -> None:
    """Govern another framework's tool calls (a sidecar over stdio)."""


@gate.command("serve")
@click.option("--policy", "policy", required=True, type=click.Path(path_type=Path),
              help="The policy file (YAML): tool contracts; unknown tools are denied.")
@click.option("--ledger", type=click.Path(path_type=Path), default=None,
              help="The governance database (default: the state folder's).")
@click.option("--runs", type=click.Path(path_type=Path), default=None,
              help="Run store root for the recording (default EVALKIT_RUNS; none: off).")
@click.option("--run-id", default=None,
              help="The run id actions are filed under when a govern names none "
                   "(default: the recording's).")
@click.option("--suite-key", default=None,
              help="File the recording under RUNS/KEY/ so `evalkit score --runs RUNS` "
                   "grades it as that suite mission.")
@click.option("--objective", default="governed tool calls",
              help="The recording's objective.")
@click.option("--approvals", "approvals_dir", type=click.Path(path_type=Path), default=None,
              help="Where holds wait for signed decisions (default: the state folder's "
                   "gate-approvals).")
@click.option("--tool-timeout", default=30.0, type=click.FloatRange(min=0.001),
              show_default=True, help="Seconds the client may take to run one body.")
def serve(policy: Path, ledger: Path | None, runs: Path | None, run_id: str | None,
          suite_key: str | None, objective: str, approvals_dir: Path | None,
          tool_timeout: float) -> None:
    """Serve the gate protocol on stdin/stdout until shutdown."""
    from evalkit.gate.server import run
    from evalkit.store.layout import runs_root

    if runs is None:
        runs = runs_root(os.environ)
    elif str(runs).strip().lower() in ("none", "off"):
        runs = None
    if suite_key is not None and (not suite_key or "/" in suite_key
                                  or suite_key.startswith(".")):
        raise EvalkitError(f"--suite-key {suite_key!r} is not a mission key (no '/', no "
                           "leading '.')")
    run(policy, ledger_path=ledger, runs=runs, approvals_dir=approvals_dir,
        objective=objective, suite_key=suite_key, tool_timeout=tool_timeout, run_id=run_id)


@gate.command("approve")
@click.argument("approval_id")
@click.option("--decided-by", required=True, help="Who decides (free text, never empty).")
@click.option("--deny", is_flag=True, help="Say no instead of yes.")
@click.option("--note", default=None, help="Why, kept with the decision.")
@click.option("--approvals", "approvals_dir", type=click.Path(path_type=Path), default=None,
              help="The gate's approvals folder (default: the state folder's).")
@click.option("--ledger", type=click.Path(path_type=Path), default=None,
              help="The governance database the gate holds the call in (default: the "
                   "state folder's).")
def approve(approval_id: str, decided_by: str, deny: bool, note: str | None,
            approvals_dir: Path | None, ledger: Path | None) -> None:
    """Sign a decision on a call the gate holds."""
    record = decide_file(approval_id, decided_by=decided_by, approve=not deny, note=note,
                         approvals_dir=approvals_dir, ledger_path=ledger)
    click.echo(f"{approval_id}: {record['state']} by {record['decision']['decided_by']} "
               f"({record['tool']}, key {record['key']})")


def decide_file(approval_id: str, *, decided_by: str, approve: bool, note: str | None = None,
                approvals_dir: Path | None = None, signer: object = None,
                ledger_path: Path | None = None) -> dict:
    """Sign a decision into the hold's approval file; the file must still be pending.

    What is signed is the digest the *ledger* holds for the action (the system of
    record), never the file's word alone: a request file whose key, tool, arguments or
    digest were rewritten to show a person something else is refused.
    """
    import re

    from evalkit.gate.approval import APPROVE, DENY, sign_decision
    from evalkit.store.replace import replace_file
    from evalkit.store.signing import local_signer
    from evalkit.store.state import state_home

    if not re.fullmatch(r"ap_[0-9a-f]{16}", approval_id):
        raise EvalkitError(f"{approval_id!r} is not an approval id (ap_ and 16 hex digits)")
    if not decided_by.strip():
        raise EvalkitError("a decision signed by nobody is refused: say who decides "
                           "(--decided-by NAME)")
    folder = approvals_dir if approvals_dir is not None else state_home() / "gate-approvals"
    path = folder / f"{approval_id}.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EvalkitError(f"no held call has approval id {approval_id} (in {folder})"
                           ) from None
    except (OSError, ValueError) as exc:
        raise EvalkitError(f"cannot read {path}: {exc}") from None
    if not isinstance(record, dict) or record.get("id") != approval_id:
        raise EvalkitError(f"{path} is not a gate approval request")
    if record.get("decision") is not None or record.get("state") != "pending":
        raise EvalkitError(f"approval {approval_id} is already {record.get('state')}; a hold "
                           "is decided once")
    digest = _ledger_digest(record, approval_id, ledger_path)
    key = signer if signer is not None else local_signer()
    decision = sign_decision(key, approval_id=approval_id, digest=digest,
                             verdict=APPROVE if approve else DENY,
                             decided_by=decided_by.strip(), note=note)
    record.update(state="approved" if approve else "denied", decision=decision)
    replace_file(path, json.dumps(record, indent=2, ensure_ascii=False) + "\n", fsync=True)
    return record


def _ledger_digest(record: dict, approval_id: str, ledger_path: Path | None) -> str:
    """The held action's digest from the ledger, once the request file agrees with it."""
    from evalkit.gate import db
    from evalkit.gate.ledger import HELD, Ledger

    path = ledger_path if ledger_path is not None else db.default_path()
    if not Path(path).exists():
        raise EvalkitError(f"no governance database at {path}; say where the gate keeps it "
                           "(--ledger PATH)")
    with Ledger(path) as ledger:
        action = ledger.get(str(record.get("key")))
    if action is None or action.approval_id != approval_id:
        raise EvalkitError(f"the ledger {path} holds no action with approval id {approval_id}; "
                           "nothing was decided")
    if action.state != HELD:
        raise EvalkitError(f"approval {approval_id}'s action is {action.state}, not held; "
                           "nothing was decided")
    shown = (record.get("tool"), record.get("arguments"), record.get("digest"))
    if shown != (action.tool, action.arguments, action.digest):
        raise EvalkitError(f"approval {approval_id}'s request file does not match the ledger "
                           "(it was altered); nothing was decided")
    return action.digest
