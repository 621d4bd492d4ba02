"""Policy as data: the file's strict shape, the hash, and the pure decision rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.errors import EvalkitError
from evalkit.gate.policy import KINDS, Policy, decide

EXAMPLE = Path(__file__).parents[2] / "evalkit" / "data" / "policy.example.yaml"

BASE = {"tools": {"read": {"risk": 0, "reversible": True, "scopes": ["fs.read"]},
                  "write": {"risk": 2, "reversible": True},
                  "wipe": {"risk": 2, "reversible": False},
                  "deploy": {"risk": 3, "reversible": True},
                  "mail": {"risk": 1, "reversible": True, "requires_approval": True,
                           "hold_seconds": 60}}}


def test_the_example_policy_loads_and_decides_each_rule() -> None:
    policy = Policy.load(EXAMPLE)
    assert decide(policy, "read_file", {"path": "a"}).outcome == "allowed"
    assert decide(policy, "delete_file", {"path": "a"}).kind == "irreversible"
    held = decide(policy, "send_email", {"to": "x"})
    assert (held.outcome, held.kind, held.hold_seconds) == ("held", "requires_approval", 600.0)
    assert policy.contract("read_file").idempotent is True


@pytest.mark.parametrize(("tool", "arguments", "scopes", "outcome", "kind"), [
    ("nope", {}, None, "denied", "unknown_tool"),
    ("read", ["not", "a", "mapping"], None, "denied", "bad_arguments"),
    ("read", {}, {"fs.write"}, "denied", "scope_missing"),
    ("read", {}, {"fs.read"}, "allowed", "allowed"),
    ("read", {}, None, "allowed", "allowed"),
    ("mail", {}, None, "held", "requires_approval"),
    ("deploy", {}, None, "held", "risk_requires_approval"),
    ("wipe", {}, None, "held", "irreversible"),
    ("write", {}, None, "allowed", "allowed"),
])
def test_decide_applies_the_rules_in_order(tool, arguments, scopes, outcome, kind) -> None:
    policy = Policy.from_mapping(BASE)
    decision = decide(policy, tool, arguments, granted_scopes=scopes)
    assert (decision.outcome, decision.kind) == (outcome, kind)
    assert KINDS[decision.kind] == decision.outcome
    assert decision.policy_hash == policy.hash
    assert decision.reason
    assert (decision.hold_seconds is not None) == (outcome == "held")


def test_policy_settings_move_the_thresholds() -> None:
    strict = Policy.from_mapping({**BASE, "max_auto_risk": 0, "hold_seconds": 5})
    decision = decide(strict, "write", {})
    assert (decision.outcome, decision.kind, decision.hold_seconds) == (
        "held", "risk_requires_approval", 5.0)
    lax = Policy.from_mapping({**BASE, "irreversible_hold_risk": 5})
    assert decide(lax, "wipe", {}).outcome == "allowed"


def test_the_hash_is_of_the_meaning_not_the_spelling(tmp_path: Path) -> None:
    a = tmp_path / "a.yaml"
    a.write_text("tools:\n  t: {risk: 1, reversible: true, scopes: [b, a]}\n")
    b = tmp_path / "b.yaml"
    b.write_text("max_auto_risk: 2\nversion: 1\ntools:\n  t:\n    scopes: [a, b]\n"
                 "    reversible: true\n    risk: 1\n    requires_approval: false\n")
    assert Policy.load(a).hash == Policy.load(b).hash
    assert Policy.load(a).hash.startswith("sha256:") and len(Policy.load(a).hash) == 71
    changed = Policy.from_mapping({"tools": {"t": {"risk": 2, "reversible": True,
                                                   "scopes": ["a", "b"]}}})
    assert changed.hash != Policy.load(a).hash


@pytest.mark.parametrize(("text", "names"), [
    ("tools: {t: {risk: 6, reversible: true}}", "tools.t.risk"),
    ("tools: {t: {risk: -1, reversible: true}}", "tools.t.risk"),
    ("tools: {t: {risk: true, reversible: true}}", "tools.t.risk"),
    ("tools: {t: {risk: 1, reversible: yes please}}", "tools.t.reversible"),
    ("tools: {t: {risk: 1, reversible: true, colour: red}}", "tools.t.colour"),
    ("tools: {t: {risk: 1}}", "reversible"),
    ("tools: {t: {risk: 1, reversible: true, scopes: a}}", "tools.t.scopes"),
    ("tools: {t: {risk: 1, reversible: true, hold_seconds: .nan}}", "tools.t.hold_seconds"),
    ("tools: {}\nmax_auto_risk: 9", "max_auto_risk"),
    ("tools: {}\nextra: 1", "extra"),
    ("tools: {}\nversion: 2", "version"),
    ("tools: {t: {risk: 1, reversible: true}, t: {risk: 0, reversible: true}}", "twice"),
    ("tools: [", "not YAML"),
    ("- a list", "mapping"),
])
def test_a_bad_policy_is_one_sentence_naming_file_and_key(tmp_path: Path, text: str,
                                                          names: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(EvalkitError) as caught:
        Policy.load(path)
    message = caught.value.message
    assert str(path) in message and names in message
    assert "\n" not in message and "Traceback" not in message


def test_a_missing_file_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(EvalkitError, match="cannot read the policy file"):
        Policy.load(tmp_path / "absent.yaml")
