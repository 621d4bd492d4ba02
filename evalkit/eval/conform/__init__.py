"""``evalkit conform``: does an agent speak the mission stream? Checked, not assumed.

A second platform proves it integrates by passing this kit: a battery of short
missions (``battery``) is spawned exactly as ``run`` spawns an agent, and every rule
(``rules`` — generated from ``evalkit.contract`` — and ``behaviour``) is judged over
what the agent wrote. The answers are never graded; the contract is.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.eval.conform import behaviour, rules
from evalkit.eval.conform.battery import (
    BUILTIN_SUITE,
    DEFAULT_TIMEOUT_S,
    NO_GATES,
    SIGTERM_BOUND_S,
    check_program,
    load,
    run_battery,
)
from evalkit.eval.conform.rules import FAIL, SKIP, Finding, Rule
from evalkit.eval.runner import fresh_folder

#: What ``--json`` writes; bumped when its shape changes.
FORMAT, VERSION = "evalkit-conform", 1


def all_rules() -> list[Rule]:
    """Every conformance rule, in the order they are printed."""
    return [*behaviour.prose_rules()[:3], *rules.field_rules(), *rules.type_rules(),
            *rules.outcome_rules(), *rules.value_rules(), *rules.reason_rules(), *rules.order_rules(),
            *rules.usage_rules(), *behaviour.prose_rules()[3:], *behaviour.exit_rules()]


@dataclass
class Result:
    agent: list[str]
    suite: str
    out: Path
    findings: list[tuple[Rule, Finding]]
    #: False under ``--no-gates``: the gate missions were left out.
    gates: bool = True

    @property
    def passed(self) -> bool:
        return not any(f.status == FAIL for _, f in self.findings)

    def failed(self) -> list[str]:
        """The ids of the rules that failed."""
        return [rule.id for rule, f in self.findings if f.status == FAIL]

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "agent": self.agent, "suite": self.suite,
                "out": str(self.out), "passed": self.passed, "gates": self.gates,
                "sigterm_bound_s": SIGTERM_BOUND_S,
                "rules": [{"id": rule.id, "says": rule.says, "status": f.status,
                           "where": f.where, "detail": f.detail}
                          for rule, f in self.findings]}


def gate_rule(rule_id: str) -> bool:
    """Whether a rule is about gates: what an agent without them cannot be checked on."""
    return rule_id == "control.gate_decision" or ".gate_requested." in f"{rule_id}."


def conform(spawn: tuple[str, ...] = (), *, suite_path: str | Path | None = None,
            out: Path | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
            gates: bool = True) -> Result:
    """Run the battery against the agent ``spawn`` starts (the built-in runtime when empty)
    and judge every rule. ``out`` (a new folder; a fresh temporary one when None) keeps
    each mission's stream, which the findings point into. ``gates=False`` (``--no-gates``):
    the agent honours no ``--gate-tool``; the missions that need a gate are left out and
    the gate rules are skipped with ``NO_GATES`` as the reason — never passed."""
    check_program(spawn)
    suite = load(suite_path)
    if out is None:
        out = Path(tempfile.mkdtemp(prefix="evalkit-conform-"))
    else:
        out = fresh_folder(out)
    battery = run_battery(suite, spawn, out, timeout_s=timeout_s, gates=gates)
    findings = []
    for rule in all_rules():
        found = rule.check(battery)
        if not gates and gate_rule(rule.id) and found.status == SKIP:
            found = Finding(SKIP, None, NO_GATES)
        findings.append((rule, found))
    return Result(agent=list(spawn), suite=str(suite.path), out=out, findings=findings,
                  gates=gates)


__all__ = ["BUILTIN_SUITE", "NO_GATES", "SIGTERM_BOUND_S", "gate_rule", "Result", "all_rules", "conform"]
