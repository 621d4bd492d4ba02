"""The action ledger: keys and digests, the state machine, and the hash chain."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from evalkit.errors import EvalkitError
from evalkit.gate import ledger as L
from evalkit.gate.ledger import Ledger, LedgerConflict, LedgerError, action_digest, default_key
from evalkit.gate.policy import Decision
from evalkit.store.signing import digest

from ._ledger_kit import POLICY, Clock, governed, ledger


def test_the_digest_is_of_tool_arguments_and_policy() -> None:
    d = action_digest("t", {"b": 1, "a": [1, 2]}, "sha256:p")
    assert d == digest({"policy_hash": "sha256:p", "tool": "t", "arguments": {"a": [1, 2], "b": 1}})
    assert d != action_digest("t", {"b": 1, "a": [2, 1]}, "sha256:p")
    assert d != action_digest("t", {"b": 1, "a": [1, 2]}, "sha256:q")
    assert default_key("run1", 3, 0) == "run1:3:0" != default_key("run1", 3, 1)


def test_an_allowed_call_runs_once_and_its_result_is_looked_up(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    action = governed(book, "k", "noop", {"x": 1})
    assert (action.state, action.kind, action.policy_hash) == ("allowed", "allowed", POLICY.hash)
    won = book.start("k")
    assert won is not None and won.state == "started" and won.owner["pid"] > 0
    assert book.start("k") is None  # the second caller does not execute
    done = book.complete("k", {"ok": True})
    assert (done.state, done.result) == ("completed", {"ok": True})
    assert book.start("k") is None
    assert Ledger(tmp_path / "gov.sqlite").lookup("k").result == {"ok": True}
    assert [e.event for e in book.events("k")] == ["proposed", "decided", "started", "completed"]
    assert book.verify_chain() == (True, 4, None)


def test_the_same_key_is_the_same_call_and_another_call_conflicts(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    first = book.propose("k", "noop", {"x": 1}, policy_hash=POLICY.hash)
    again = book.propose("k", "noop", {"x": 1}, policy_hash=POLICY.hash)
    assert again == first
    for tool, args, policy_hash in [("noop", {"x": 2}, POLICY.hash), ("pay", {"x": 1}, POLICY.hash),
                                    ("noop", {"x": 1}, "sha256:other")]:
        with pytest.raises(LedgerConflict, match="another call"):
            book.propose("k", tool, args, policy_hash=policy_hash)
    assert issubclass(LedgerConflict, EvalkitError)
    assert len(book.events("k")) == 1


def test_terminal_states_absorb(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    governed(book, "k", "noop", {})
    book.start("k")
    book.fail("k", "boom")
    for attempt in (lambda: book.complete("k", 1), lambda: book.fail("k", "again"),
                    lambda: book.deny("k", by="op", reason="late")):
        with pytest.raises(LedgerError, match="failed"):
            attempt()
    denied = governed(book, "d", "ghost", {})
    assert (denied.state, denied.kind) == ("denied", "unknown_tool")
    assert book.start("d") is None
    with pytest.raises(LedgerError):
        book.complete("d", 1)
    assert book.get("k").state == "failed" and book.verify_chain()[0]


def test_a_hold_keeps_the_deadline_it_was_given(tmp_path: Path) -> None:
    clock = Clock()
    book = ledger(tmp_path, clock)
    held = governed(book, "k", "pay", {"to": "x"})
    assert held.state == "held" and held.deadline == clock.now + 100
    assert held.approval_id.startswith("ap_")
    assert book.start("k") is None  # a held call does not run
    clock.advance(99)
    assert book.expire_due() == [] and book.get("k").deadline == held.deadline
    clock.advance(1)
    expired = book.expire_due()
    assert [a.state for a in expired] == ["expired"]
    assert book.get("k").deadline == held.deadline


def test_a_decision_from_another_policy_does_not_apply(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    book.propose("k", "noop", {}, policy_hash=POLICY.hash)
    with pytest.raises(LedgerError, match="does not apply"):
        book.decide("k", Decision("allowed", "x", "allowed", "sha256:else"))
    assert book.get("k").state == "proposed"


def test_the_operator_denies_a_hold(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    governed(book, "k", "pay", {})
    denied = book.deny("k", by="ops", reason="not today")
    assert (denied.state, denied.kind) == ("denied", "denied_by_operator")
    assert "not today" in denied.reason


def test_a_forged_action_row_is_detected_and_never_started(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    governed(book, "k", "pay", {"amount": 10})
    ok, last, _ = book.verify_chain()
    raw = sqlite3.connect(tmp_path / "gov.sqlite")
    raw.execute("UPDATE actions SET state = 'approved' WHERE key = 'k'")
    raw.commit()
    ok, good, problem = book.verify_chain()
    assert not ok and good == last and "approved" in problem
    with pytest.raises(LedgerError, match="not what its recorded events say"):
        book.start("k")


def test_a_forged_event_row_breaks_the_chain(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    governed(book, "k", "pay", {"amount": 10})
    raw = sqlite3.connect(tmp_path / "gov.sqlite")
    head = raw.execute("SELECT hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()[0]
    raw.execute("INSERT INTO events (seq, key, event, state, at, body, prev, hash) VALUES "
                "(3, 'k', 'decision', 'approved', 1, '{}', ?, 'f00')", (head,))
    raw.execute("UPDATE actions SET state = 'approved', head = 'f00' WHERE key = 'k'")
    raw.commit()
    ok, good, problem = book.verify_chain()
    assert (ok, good) == (False, 2) and "event 3" in problem
    with pytest.raises(LedgerError):
        book.start("k")
    assert book.get("k").attempts == 0


def test_an_edited_old_event_is_found_where_it_was_edited(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    governed(book, "a", "noop", {})
    governed(book, "b", "noop", {})
    raw = sqlite3.connect(tmp_path / "gov.sqlite")
    raw.execute("UPDATE events SET body = '{\"tool\":\"pay\"}' WHERE seq = 3")
    raw.commit()
    assert book.verify_chain()[:2] == (False, 2)
    raw.execute("DELETE FROM events WHERE seq = 3")
    raw.commit()
    assert book.verify_chain()[:2] == (False, 2)


def test_states_are_one_tuple_and_terminal_a_subset() -> None:
    assert set(L.TERMINAL) < set(L.STATES) and len(L.STATES) == 10
    for state in L.TERMINAL:
        assert state not in L.TRANSITIONS


def test_names_that_are_not_utf8_are_stored_escaped(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    action = book.propose("k", "to\udcffol", {"path": "bad\udcffname"}, policy_hash="sha256:p")
    assert action.arguments == {"path": "bad\udcffname"} and action.tool == "to\\udcffol"
    assert action.digest == action_digest("to\udcffol", {"path": "bad\udcffname"}, "sha256:p")
    assert book.verify_chain()[0]
    with pytest.raises(LedgerError, match="UTF-8"):
        book.propose("k\udcff", "t", {}, policy_hash="sha256:p")


def test_a_started_action_whose_executor_went_silent_is_outcome_unknown_for_good(
        tmp_path: Path) -> None:
    book = ledger(tmp_path)
    governed(book, "k", "noop", {})
    with pytest.raises(LedgerError):
        book.unknown("k", "never started")  # only a started action can be unknown
    book.start("k")
    gone = book.unknown("k", "no answer within 1 s")
    assert (gone.state, gone.kind, gone.reason) == ("outcome_unknown", "unanswered",
                                                    "no answer within 1 s")
    assert book.start("k") is None
    with pytest.raises(LedgerError):
        book.complete("k", "late")
    assert book.verify_chain()[0]
