"""The approval matrix: only a trusted signature over this action's id and digest, in time,
promotes a hold; every refusal is one sentence, recorded, and changes nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from evalkit.gate.approval import sign_decision
from evalkit.gate.ledger import ApprovalRefused, LedgerError

from ._ledger_kit import Clock, Keys, governed, ledger


def _sign(signer, action, verdict="approve", **change):
    fields = {"approval_id": action.approval_id, "digest": action.digest, "verdict": verdict,
              "decided_by": "alice", **change}
    return sign_decision(signer, **fields)


def _refused(book, key, record, trust, match):
    before = book.get(key)
    with pytest.raises(ApprovalRefused, match=match) as caught:
        book.approve(key, record, trust=trust)
    assert "\n" not in caught.value.message
    after = book.get(key)
    assert after.state == before.state == "held" and book.start(key) is None
    assert book.events(key)[-1].event == "approval_refused"
    assert book.verify_chain()[0]


def test_a_valid_signed_approval_promotes_once(tmp_path: Path) -> None:
    keys, book = Keys(), ledger(tmp_path)
    held = governed(book, "k", "pay", {"amount": 5})
    approved = book.approve("k", _sign(keys.good, held), trust=keys.trust)
    assert (approved.state, approved.kind) == ("approved", "approved")
    assert "alice" in approved.reason
    assert book.start("k").state == "started" and book.start("k") is None
    assert book.verify_chain()[0]


def test_a_record_carrying_the_decision_is_read_too(tmp_path: Path) -> None:
    keys, book = Keys(), ledger(tmp_path)
    held = governed(book, "k", "pay", {"amount": 5})
    record = {"id": held.approval_id, "decision": _sign(keys.good, held)}
    assert book.approve("k", record, trust=keys.trust).state == "approved"


def test_wrong_key_signature_is_refused(tmp_path: Path) -> None:
    keys, book = Keys(), ledger(tmp_path)
    held = governed(book, "k", "pay", {"amount": 5})
    forged = _sign(keys.other, held)
    forged["key_id"] = keys.good.key_id  # claims the trusted key, signed by another
    forged["signature"] = keys.other.sign(b"x")
    _refused(book, "k", forged, keys.trust, "not validly signed")


def test_a_key_not_trusted_is_refused(tmp_path: Path) -> None:
    keys, book = Keys(), ledger(tmp_path)
    held = governed(book, "k", "pay", {"amount": 5})
    _refused(book, "k", _sign(keys.other, held), keys.trust, "not trusted")


def test_a_decision_for_other_content_is_refused(tmp_path: Path) -> None:
    keys, book = Keys(), ledger(tmp_path)
    held = governed(book, "k", "pay", {"amount": 5})
    _refused(book, "k", _sign(keys.good, held, digest="sha256:" + "0" * 64), keys.trust,
             "other content")


def test_a_signature_lifted_from_another_action_is_refused(tmp_path: Path) -> None:
    keys, book = Keys(), ledger(tmp_path)
    small = governed(book, "small", "pay", {"amount": 5})
    governed(book, "big", "pay", {"amount": 5000})
    yes_for_small = _sign(keys.good, small)
    _refused(book, "big", yes_for_small, keys.trust, "cannot be moved")
    moved = dict(yes_for_small, approval_id=book.get("big").approval_id,
                 digest=book.get("big").digest)  # re-labelled: the signature no longer fits
    _refused(book, "big", moved, keys.trust, "signature does not match")
    assert book.approve("small", yes_for_small, trust=keys.trust).state == "approved"


def test_the_same_arguments_under_another_key_need_their_own_approval(tmp_path: Path) -> None:
    keys, book = Keys(), ledger(tmp_path)
    first = governed(book, "run1:1:0", "pay", {"amount": 5})
    governed(book, "run1:2:0", "pay", {"amount": 5})
    _refused(book, "run1:2:0", _sign(keys.good, first), keys.trust, "cannot be moved")


@pytest.mark.parametrize("record", [
    {"approval_id": "x", "verdict": "approve"},  # no signature
    {"decision": None},
    "yes",
])
def test_an_unsigned_decision_is_refused(tmp_path: Path, record) -> None:
    keys, book = Keys(), ledger(tmp_path)
    held = governed(book, "k", "pay", {"amount": 5})
    if isinstance(record, dict) and "approval_id" in record:
        record = {**record, "approval_id": held.approval_id, "digest": held.digest}
    with pytest.raises(ApprovalRefused, match="not signed"):
        book.approve("k", record if isinstance(record, dict) else {"decision": record},
                     trust=keys.trust)
    assert book.get("k").state == "held"


def test_an_approval_after_the_deadline_expires_the_hold_and_never_promotes(tmp_path) -> None:
    keys, clock = Keys(), Clock()
    book = ledger(tmp_path, clock)
    held = governed(book, "k", "pay", {"amount": 5})
    yes = _sign(keys.good, held)
    clock.advance(100)
    with pytest.raises(ApprovalRefused, match="after its deadline"):
        book.approve("k", yes, trust=keys.trust)
    late = book.get("k")
    assert (late.state, late.kind) == ("expired", "late_approval")
    assert book.events("k")[-1].event == "late_approval"
    assert book.events("k")[-1].body["decision"]["signature"] == yes["signature"]
    with pytest.raises(ApprovalRefused, match="expired"):
        book.approve("k", yes, trust=keys.trust)
    assert book.start("k") is None and book.get("k").state == "expired"
    assert book.verify_chain()[0]


def test_an_approval_just_before_the_deadline_counts(tmp_path: Path) -> None:
    keys, clock = Keys(), Clock()
    book = ledger(tmp_path, clock)
    held = governed(book, "k", "pay", {"amount": 5})
    clock.advance(99.5)
    assert book.approve("k", _sign(keys.good, held), trust=keys.trust).state == "approved"


def test_deny_then_grant_stays_denied(tmp_path: Path) -> None:
    keys, book = Keys(), ledger(tmp_path)
    held = governed(book, "k", "pay", {"amount": 5})
    no = book.approve("k", _sign(keys.good, held, verdict="deny"), trust=keys.trust)
    assert (no.state, no.kind) == ("denied", "denied_by_approver")
    with pytest.raises(ApprovalRefused, match="denied, not held"):
        book.approve("k", _sign(keys.good, held), trust=keys.trust)
    assert book.get("k").state == "denied" and book.start("k") is None
    assert book.events("k")[-1].event == "approval_refused"


def test_an_unknown_action_is_one_sentence(tmp_path: Path) -> None:
    keys, book = Keys(), ledger(tmp_path)
    held = governed(book, "k", "pay", {})
    with pytest.raises(LedgerError, match="no action with key 'nope'"):
        book.approve("nope", _sign(keys.good, held), trust=keys.trust)


def test_an_approved_row_forged_in_the_database_is_refused(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    governed(book, "k", "pay", {"amount": 5000})
    raw = sqlite3.connect(tmp_path / "gov.sqlite")
    raw.execute("UPDATE actions SET state = 'approved', kind = 'approved' WHERE key = 'k'")
    raw.commit()
    assert not book.verify_chain()[0]
    with pytest.raises(LedgerError, match="will not be executed"):
        book.start("k")
    assert book.get("k").attempts == 0


def test_a_refused_approval_after_a_valid_one_leaves_the_action_executable(tmp_path) -> None:
    keys, book = Keys(), ledger(tmp_path)
    held = governed(book, "k", "pay", {"amount": 5})
    book.approve("k", _sign(keys.good, held), trust=keys.trust)
    with pytest.raises(ApprovalRefused, match="approved, not held"):
        book.approve("k", _sign(keys.other, held), trust=keys.trust)
    assert book.start("k").state == "started" and book.verify_chain()[0]


def test_the_runtime_checks_decisions_with_the_gates_functions() -> None:
    """One owner: the runtime's approval files and the ledger share the decision checks."""
    from evalkit.gate import approval
    from evalkit.runtime.governance import approvals as runtime_approvals

    for name in ("decision_body", "decision_problem", "request_digest"):
        assert getattr(runtime_approvals, name) is getattr(approval, name)
