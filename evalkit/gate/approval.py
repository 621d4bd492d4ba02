"""Signed approval decisions: what a person's yes or no is bound to, and the check of one.

A decision is a small mapping — the approval it answers (``approval_id``), the
``verdict`` (``approve`` or ``deny``), the ``digest`` of exactly what was asked,
who decided and when, and the id of the Ed25519 key that signed it — plus the
``signature`` over every other field's RFC 8785 canonical JSON. Whoever holds
the decision cannot move it to another request (the id and digest are signed)
nor change what it covers.

One owner: the runtime's approval files (``evalkit.runtime.governance.approvals``)
and the action ledger (``evalkit.gate.ledger``) both check decisions here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalkit.redact import redact_obj
from evalkit.store import signing
from evalkit.store.runstore import now_iso
from evalkit.store.signing import call_digest

APPROVE, DENY = "approve", "deny"
VERDICTS = (APPROVE, DENY)


def request_digest(tool: Any, arguments: Any) -> str:
    """What a request and its decision are bound to: the tool and its arguments as a
    person is shown them (redacted), digested over RFC 8785 canonical JSON."""
    return call_digest(tool, redact_obj(arguments))


def decision_body(decision: Mapping[str, Any]) -> bytes:
    """The bytes a decision's signature covers: every field but the signature."""
    return signing.canonical({k: v for k, v in decision.items() if k != "signature"})


def sign_decision(signer: signing.Signer, *, approval_id: str, digest: str, verdict: str,
                  decided_by: str, note: str | None = None,
                  decided_at: str | None = None) -> dict[str, Any]:
    """A decision on ``approval_id`` (asked with ``digest``), signed by ``signer``."""
    if verdict not in VERDICTS:
        raise ValueError(f"a verdict is one of {VERDICTS}, not {verdict!r}")
    decision: dict[str, Any] = {
        "approval_id": approval_id, "verdict": verdict, "digest": digest,
        "decided_by": decided_by, "decided_at": decided_at or now_iso(), "note": note,
        "key_id": signer.key_id}
    decision["signature"] = signer.sign(decision_body(decision))
    return decision


def signed_problem(decision: Any, *, approval_id: Any, digest: str,
                   trust: signing.Trust) -> str | None:
    """Why ``decision`` is not a trusted, signed answer to ``approval_id`` asked with
    ``digest`` (None: it is). Either verdict passes; the caller reads which."""
    if not isinstance(decision, Mapping) or "signature" not in decision:
        return f"the decision on {approval_id} is not signed"
    if decision.get("approval_id") != approval_id:
        return (f"the decision answers {decision.get('approval_id')!r}, not {approval_id}: "
                "a signature cannot be moved to another request")
    if decision.get("verdict") not in VERDICTS:
        return f"the decision on {approval_id} has no verdict (approve or deny)"
    if decision.get("digest") != digest:
        return (f"the decision on {approval_id} was signed for other content "
                f"({decision.get('digest')}) than was asked ({digest})")
    problem = trust.check(decision.get("key_id"), decision_body(decision),
                          decision.get("signature"))
    if problem is not None:
        return f"the decision on {approval_id} is not validly signed: {problem}"
    return None


def decision_problem(record: Mapping[str, Any], *, tool: Any = None, arguments: Any = None,
                     trust: signing.Trust | None = None) -> str | None:
    """Why an approval file ``record``'s yes does not cover a call (None: it does).

    The call is ``tool`` with ``arguments`` — by default the record's own, which
    must then still match the digest it was decided on. The yes must be a decision
    naming this request and that digest, signed by a trusted key.
    """
    approval_id = record.get("id")
    decision = record.get("decision")
    if not isinstance(decision, dict):
        return f"approval {approval_id} carries no signed decision (its file says " \
               f"{record.get('state')!r}, which no decision signed)"
    if decision.get("verdict") != APPROVE or decision.get("approval_id") != approval_id:
        return f"approval {approval_id}'s decision is not a yes for this request"
    wanted = request_digest(record.get("tool") if tool is None else tool,
                            record.get("arguments") if arguments is None else arguments)
    if decision.get("digest") != wanted:
        return (f"approval {approval_id} was decided for other arguments than "
                f"{'its record now holds' if tool is None else 'this call'}")
    trust = trust if trust is not None else signing.Trust.local()
    problem = trust.check(decision.get("key_id"), decision_body(decision),
                          decision.get("signature"))
    if problem is not None:
        return f"approval {approval_id}'s decision is not validly signed: {problem}"
    if decision.get("decided_by") != record.get("decided_by"):
        return f"approval {approval_id} names another decider than its signed decision"
    return None
