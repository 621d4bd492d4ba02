"""A hypothesis state machine over save / lease / open / consume / fail / reject / expire /
advance-clock, checked against a model: terminal states absorb, a checkpoint is leased at
most once, nothing opens or consumes past its lease deadline, and ciphertext is stored
exactly while a checkpoint is pending or leased."""

from __future__ import annotations

import os
from pathlib import Path
from tempfile import TemporaryDirectory

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from evalkit.gate.checkpoints import (
    FAILURE_CODES,
    CheckpointRefused,
    CheckpointStore,
    Lease,
    Successor,
)
from evalkit.gate.sealing import KeyProvider

RUN, DEF = "run-1", "sha256:d"
IDS = st.sampled_from(["a", "b", "c"])


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


class Checkpoints(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # On tmpfs when there is one: the database's fsyncs are what a step costs.
        self.told: list[dict] = []
        self.tmp = TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        self.clock = Clock()
        self.store = CheckpointStore(Path(self.tmp.name) / "g.sqlite",
                                     keys=KeyProvider(Path(self.tmp.name) / "keys"),
                                     clock=self.clock, observer=self.told.append)
        #: id -> [state, expires_at, payload, failure code]
        self.model: dict[str, list] = {}
        self.leases: dict[str, Lease] = {}
        self.leased_ever: dict[str, int] = {}

    def teardown(self) -> None:
        self.store.close()
        self.tmp.cleanup()

    def _refused(self, call, reason: str | None = None) -> CheckpointRefused:
        try:
            call()
        except CheckpointRefused as exc:
            assert reason is None or exc.reason == reason, (exc.reason, reason)
            return exc
        raise AssertionError(f"expected a refusal ({reason})")

    def _lease_state(self, cid: str) -> str:
        """What a lease finds: 'live', 'late' (and the checkpoint fails), or 'gone'."""
        row = self.model.get(cid)
        if row is None or row[0] != "leased":
            return "gone"
        if self.clock.now >= self.leases[cid].deadline:
            row[0], row[3] = "failed", "lease_expired"
            return "late"
        return "live"

    @initialize(ttl=st.integers(1, 100))
    def start(self, ttl: int) -> None:
        """Two checkpoints waiting from the first step, so most runs reach leases."""
        self.save("a", ttl)
        self.save("b", 100)

    @rule(cid=IDS, ttl=st.integers(1, 100))
    def save(self, cid: str, ttl: int) -> None:
        payload = {"id": cid, "ttl": ttl}
        if cid in self.model:
            self._refused(lambda: self.store.save_pending(cid, RUN, DEF, payload,
                                                          self.clock.now + ttl), "exists")
            return
        self.store.save_pending(cid, RUN, DEF, payload, self.clock.now + ttl)
        self.model[cid] = ["pending", self.clock.now + ttl, payload, None]

    @rule(cid=IDS, seconds=st.integers(1, 20))
    def lease(self, cid: str, seconds: int) -> None:
        def call() -> Lease:
            return self.store.approve_and_lease(cid, run_id=RUN, definition_hash=DEF,
                                                operator="op", audit_ref="a",
                                                lease_seconds=seconds)
        row = self.model.get(cid)
        if row is None:
            self._refused(call, "unknown")
        elif row[0] == "pending" and row[1] <= self.clock.now:
            self._refused(call, "expired")
            row[0] = "expired"
        elif row[0] == "pending":
            self.leases[cid] = call()
            row[0] = "leased"
            self.leased_ever[cid] = self.leased_ever.get(cid, 0) + 1
        else:
            self._refused(call, "not_pending")

    @rule(cid=IDS)
    def open(self, cid: str) -> None:
        if cid not in self.leases:
            return
        lease, payload = self.leases[cid], self.model[cid][2]
        state = self._lease_state(cid)
        if state == "live":
            assert self.store.open(lease) == payload
        else:
            self._refused(lambda: self.store.open(lease),
                          "lease_expired" if state == "late" else "not_leased")

    @rule(cid=IDS, successor=st.none() | IDS)
    def consume(self, cid: str, successor: str | None) -> None:
        if cid not in self.leases:
            return
        lease = self.leases[cid]
        after = None if successor is None else Successor(successor, b"next",
                                                         self.clock.now + 30)
        state = self._lease_state(cid)
        if state != "live":
            self._refused(lambda: self.store.consume(lease, after),
                          "lease_expired" if state == "late" else "not_leased")
        elif successor is not None and successor in self.model:
            self._refused(lambda: self.store.consume(lease, after), "exists")
        else:
            self.store.consume(lease, after)
            self.model[cid][0] = "consumed"
            if successor is not None:
                self.model[successor] = ["pending", self.clock.now + 30, b"next", None]

    @rule(cid=IDS, code=st.sampled_from(FAILURE_CODES))
    def fail(self, cid: str, code: str) -> None:
        if cid not in self.leases:
            return
        row = self.model[cid]
        if row[0] == "leased":  # a failure is recorded even after the deadline
            self.store.fail(self.leases[cid], code)
            row[0], row[3] = "failed", code
        else:
            self._refused(lambda: self.store.fail(self.leases[cid], code), "not_leased")

    @rule(cid=IDS)
    def reject(self, cid: str) -> None:
        def call() -> None:
            self.store.reject(cid, operator="op", reason_code="operator_denied")
        row = self.model.get(cid)
        if row is not None and row[0] == "pending":
            call()
            row[0] = "rejected"
        else:
            self._refused(call, "unknown" if row is None else "not_pending")

    @rule(seconds=st.integers(0, 30))
    def advance(self, seconds: int) -> None:
        self.clock.now += seconds

    @rule()
    def expire_due(self) -> None:
        due = []
        for cid, row in sorted(self.model.items()):
            if row[0] == "pending" and row[1] <= self.clock.now:
                row[0] = "expired"
                due.append(cid)
            elif row[0] == "leased" and self.leases[cid].deadline <= self.clock.now:
                row[0], row[3] = "failed", "lease_expired"
                due.append(cid)
        assert self.store.expire_due() == due

    @invariant()
    def matches_the_model(self) -> None:
        for cid, (state, _, _, code) in self.model.items():
            row = self.store.get(cid)
            assert row is not None and row.state == state, (cid, row, state)
            assert row.sealed == (state in ("pending", "leased"))
            assert row.failure_code == code
        assert all(n == 1 for n in self.leased_ever.values())
        # The observer heard every transition, in order, and nothing else.
        heard: dict[str, str] = {}
        for event in self.told:
            assert heard.get(event["checkpoint_id"]) == event["from"], event
            heard[event["checkpoint_id"]] = event["to"]
        assert heard == {cid: row[0] for cid, row in self.model.items()}


Checkpoints.TestCase.settings = settings(max_examples=200, stateful_step_count=30,
                                         deadline=None)


@pytest.mark.slow  # 200 runs of 30 steps: a few seconds, and minutes when shrinking a failure
class TestCheckpointStateMachine(Checkpoints.TestCase):
    pass
