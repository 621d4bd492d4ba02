"""A state machine over propose / approve / deny / advance-clock / resume / crash / execute,
checking the ledger's invariants after every step: at most one execution per key,
terminal states absorb, a deadline never moves, the same key with another digest
conflicts, a late approval never promotes, and the chain always verifies."""

from __future__ import annotations

import shutil
import socket
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from evalkit.gate.approval import sign_decision
from evalkit.gate.ledger import (
    STATES,
    TERMINAL,
    ApprovalRefused,
    Ledger,
    LedgerConflict,
    LedgerError,
)
from evalkit.gate.policy import decide

from ._ledger_kit import POLICY, Clock, Keys

KEYS = st.sampled_from(["a", "b", "c"])
DEAD = {"host": socket.gethostname(), "pid": 2**22 + 7, "start": 1}


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="ledger-sm-"))
        self.clock = Clock()
        self.keys = Keys()
        self.book = Ledger(self.folder / "gov.sqlite", clock=self.clock)
        self.calls: dict[str, tuple[str, int]] = {}
        self.runs: dict[str, int] = {}
        self.terminal: dict[str, str] = {}
        self.deadlines: dict[str, float] = {}

    def teardown(self) -> None:
        self.book.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    @rule(key=KEYS, tool=st.sampled_from(["noop", "pay"]), amount=st.integers(0, 1))
    def propose(self, key: str, tool: str, amount: int) -> None:
        arguments = {"amount": amount}
        try:
            action = self.book.propose(key, tool, arguments, policy_hash=POLICY.hash)
        except LedgerConflict:
            assert self.calls[key] != (tool, amount)
            return
        assert self.calls.setdefault(key, (tool, amount)) == (tool, amount)
        if action.state == "proposed":
            self.book.decide(key, decide(POLICY, tool, arguments))

    @rule(key=KEYS, source=KEYS, trusted=st.booleans())
    def approve(self, key: str, source: str, trusted: bool) -> None:
        target, origin = self.book.get(key), self.book.get(source)
        if target is None or origin is None or origin.approval_id is None:
            return
        signer = self.keys.good if trusted else self.keys.other
        record = sign_decision(signer, approval_id=origin.approval_id, digest=origin.digest,
                               verdict="approve", decided_by="alice")
        late = target.deadline is not None and self.clock.now >= target.deadline
        try:
            after = self.book.approve(key, record, trust=self.keys.trust)
        except ApprovalRefused:
            after = self.book.get(key)
            assert after.state != "approved" or target.state == "approved"
            return
        assert trusted and key == source and target.state == "held" and not late
        assert after.state == "approved"

    @rule(key=KEYS)
    def deny(self, key: str) -> None:
        try:
            self.book.deny(key, by="ops", reason="no")
        except LedgerError:
            action = self.book.get(key)
            assert action is None or action.state not in ("proposed", "held")

    @rule(seconds=st.sampled_from([1.0, 50.0, 100.0]))
    def advance_clock(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule()
    def expire(self) -> None:
        for action in self.book.expire_due():
            assert action.state == "expired" and action.deadline <= self.clock.now

    @rule(key=KEYS)
    def execute(self, key: str) -> None:
        if self.book.get(key) is None:
            return
        won = self.book.start(key)
        if won is not None:
            self.runs[key] = self.runs.get(key, 0) + 1
            self.book.complete(key, {"ok": 1})

    @rule(key=KEYS)
    def crash(self, key: str) -> None:
        """Win the start as a process that then dies, its effect done, its end unrecorded."""
        if self.book.get(key) is None:
            return
        if self.book.start(key, owner=DEAD) is not None:
            self.runs[key] = self.runs.get(key, 0) + 1

    @rule()
    def resume(self) -> None:
        """A fresh ledger over the same file recovers what the dead left started."""
        self.book.close()
        self.book = Ledger(self.folder / "gov.sqlite", clock=self.clock)
        for action in self.book.recover(policy=POLICY):
            assert action.state == "outcome_unknown"

    @invariant()
    def holds(self) -> None:
        for key, count in self.runs.items():
            assert count <= 1, f"{key} ran {count} times"
        for action in self.book.actions():
            assert action.state in STATES
            if action.key in self.terminal:
                assert action.state == self.terminal[action.key]
            elif action.state in TERMINAL:
                self.terminal[action.key] = action.state
            if action.deadline is not None:
                assert self.deadlines.setdefault(action.key, action.deadline) == action.deadline
            if action.state in ("approved", "started", "completed") and action.tool == "pay":
                assert any(e.event == "decision" for e in self.book.events(action.key))
        ok, _, problem = self.book.verify_chain()
        assert ok, problem


LedgerMachine.TestCase.settings = settings(
    max_examples=50, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_ledger_state_machine = pytest.mark.slow(LedgerMachine.TestCase)
