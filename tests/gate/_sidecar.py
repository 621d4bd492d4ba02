"""A real gate server on real pipes, in this process, with a fake clock.

Everything is the real thing — ``GateServer``, the SQLite ledger, the run store,
Ed25519 signatures, ``evalkit.gate.Client`` over two OS pipes — except the clock
the deadlines are read from, which a test moves by hand.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from evalkit.gate.client import Client
from evalkit.gate.ledger import Ledger
from evalkit.gate.policy import Policy
from evalkit.gate.recording import Recording
from evalkit.gate.server import Approvals, GateServer
from evalkit.store.seal import signer_or_none
from evalkit.store.signing import Trust

POLICY = {
    "version": 1,
    "tools": {
        "add": {"risk": 0, "reversible": True},
        "echo": {"risk": 0, "reversible": True},
        "slow": {"risk": 0, "reversible": True},
        "boom": {"risk": 0, "reversible": True},
        "send": {"risk": 4, "reversible": False, "requires_approval": True,
                 "hold_seconds": 600},
    },
}
#: 2027-01-15T08:00:00Z, a moment no real clock in a test will read.
T0 = 1_800_000_000.0


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Sidecar:
    """``with Sidecar(tmp_path) as gate: gate.client.govern(...)``."""

    def __init__(self, tmp: Path, *, tool_timeout: float = 5.0, suite_key: str | None = None,
                 policy: dict[str, Any] | None = None) -> None:
        self.tmp = tmp
        self.clock = FakeClock()
        self.policy = Policy.from_mapping(policy or POLICY)
        self.ledger = Ledger(tmp / "governance.sqlite", clock=self.clock)
        self.runs = tmp / "runs"
        signer, _ = signer_or_none()
        gated = ["send"]
        self.recording = Recording(self.runs / suite_key if suite_key else self.runs,
                                   objective="add 1 and 2", gated=gated,
                                   policy_hash=self.policy.hash, signer=signer)
        self.approvals = Approvals(tmp / "approvals")
        self.server = GateServer(self.policy, self.ledger, recording=self.recording,
                                 approvals=self.approvals, trust=Trust.local(),
                                 clock=self.clock, tool_timeout=tool_timeout, poll=0.01)
        to_server_r, to_server_w = os.pipe()
        to_client_r, to_client_w = os.pipe()
        self._server_in = os.fdopen(to_server_r, "rb")
        self._server_out = os.fdopen(to_client_w, "wb")
        self.outcome: str | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        self.client = Client(streams=(os.fdopen(to_server_w, "wb"),
                                      os.fdopen(to_client_r, "rb")))

    def _serve(self) -> None:
        try:
            self.outcome = self.server.serve(self._server_in, self._server_out)
        finally:
            self._server_out.close()
            self._server_in.close()

    def raw(self, line: bytes, timeout: float = 10.0) -> dict[str, Any]:
        """Send one line as it is; the reply that answered no waiting request."""
        seen = len(self.client.unmatched)
        self.client.send_raw(line)
        end = time.monotonic() + timeout
        while len(self.client.unmatched) == seen:
            assert time.monotonic() < end, "no reply to a raw line"
            time.sleep(0.005)
        return self.client.unmatched[seen]

    def close(self, answer: str | None = None) -> dict[str, Any] | None:
        closed = self.client.close(answer=answer)
        self._thread.join(30)
        self.ledger.close()
        return closed

    def __enter__(self) -> Sidecar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.client.closed is None:
            self.close()

    def records(self) -> list[dict[str, Any]]:
        import json

        (events,) = self.runs.rglob("events.jsonl")
        return [json.loads(line)["record"] for line in events.read_text("utf-8").splitlines()]
