"""What the ledger tests share: a fake clock, a policy, a trusted and an untrusted signer."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from evalkit.gate.ledger import Action, Ledger
from evalkit.gate.policy import Policy, decide
from evalkit.store.signing import Signer, Trust

POLICY = Policy.from_mapping({"tools": {
    "noop": {"risk": 0, "reversible": True},
    "lookup": {"risk": 0, "reversible": True, "idempotent": True},
    "pay": {"risk": 4, "reversible": False, "hold_seconds": 100},
}})


@dataclass
class Clock:
    now: float = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Keys:
    """A trusted signer, an untrusted one, and the trust holding only the first."""

    good: Signer = field(default_factory=Signer.generate)
    other: Signer = field(default_factory=Signer.generate)

    @property
    def trust(self) -> Trust:
        trust = Trust()
        trust.add(self.good.public_raw, "test")
        return trust


def ledger(tmp_path: Path, clock: Clock | None = None) -> Ledger:
    return Ledger(tmp_path / "gov.sqlite", clock=clock or Clock())


def governed(book: Ledger, key: str, tool: str, arguments: dict, *,
             policy: Policy = POLICY) -> Action:
    """Propose and decide, as a gate does."""
    book.propose(key, tool, arguments, policy_hash=policy.hash, run_id="run1")
    return book.decide(key, decide(policy, tool, arguments))
