"""Reading the router's two replies: the triage word and the plan. Pure: text in, facts out.

Both are read the way the json protocol reads a reply — forgiving about
wrapping (a ```json fence, a sentence around the object), strict about
ambiguity — and both fail towards the ordinary loop: a triage reply is a
plan request only when it holds exactly one JSON object whose ``route`` is
``"plan"``; a plan is used only when every step in it checks out. Anything
else is an answer of "direct" with the reason in one sentence.

A plan is ``{"steps": [{"id", "goal", "rung", "needs"?}, …]}``:

- ``id`` — ``s1``, ``s2``, … in the order listed;
- ``goal`` — a non-empty sentence;
- ``rung`` — an integer, 1 or more: rungs run in ascending order, and the
  steps of one rung are independent of each other (they may run at once);
- ``needs`` — optional ids of steps on lower rungs whose results this step
  is shown (without it: every step of every lower rung);
- at most ``MAX_STEPS`` steps, at least one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from evalkit.runtime.json_protocol import embedded_objects

#: The most steps a plan may have; a longer one is refused (the run goes direct).
MAX_STEPS = 8

_ID = re.compile(r"s[1-9][0-9]*")


@dataclass(frozen=True)
class PlanStep:
    """One step of a plan."""

    id: str
    goal: str
    rung: int
    #: Ids this step declared it needs; None = every step of every lower rung.
    needs: tuple[str, ...] | None = None

    def record(self) -> dict[str, Any]:
        """The step as it rides ``step_started.plan``: ``{id, goal, rung}`` (+ ``needs``)."""
        out: dict[str, Any] = {"id": self.id, "goal": self.goal, "rung": self.rung}
        if self.needs:
            out["needs"] = list(self.needs)
        return out


@dataclass(frozen=True)
class Plan:
    """A checked plan: its steps in the order listed."""

    steps: tuple[PlanStep, ...]

    def record(self) -> list[dict[str, Any]]:
        return [step.record() for step in self.steps]

    def rungs(self) -> list[list[PlanStep]]:
        """The steps grouped by rung, lowest rung first, listed order within a rung."""
        return [[s for s in self.steps if s.rung == rung]
                for rung in sorted({s.rung for s in self.steps})]

    def needs_of(self, step: PlanStep) -> list[PlanStep]:
        """The steps whose results ``step`` is shown: its ``needs``, else all lower rungs."""
        if step.needs is not None:
            return [s for s in self.steps if s.id in step.needs]
        return [s for s in self.steps if s.rung < step.rung]


def objects(text: str | None) -> list[Any]:
    """Every top-level JSON object in ``text`` (what a fence or a sentence wraps)."""
    return embedded_objects(text)[0]


def read_route(text: str | None) -> tuple[bool, str]:
    """(staged?, why): True only for exactly one JSON object with ``route`` = ``"plan"``."""
    routed = [o for o in objects(text) if isinstance(o, dict) and "route" in o]
    if len(routed) != 1:
        why = "no" if not routed else f"{len(routed)}"
        return False, f"the triage reply held {why} route object(s); the run went direct"
    route = routed[0]["route"]
    if isinstance(route, str) and route.strip().lower() == "plan":
        return True, "triage asked for a plan"
    if isinstance(route, str) and route.strip().lower() == "direct":
        return False, "triage chose direct"
    return False, f"the triage reply's route {route!r} is not plan; the run went direct"


def read_plan(text: str | None, *, max_steps: int = MAX_STEPS) -> tuple[Plan | None, str]:
    """(the plan, "") or (None, why it cannot be used)."""
    found = [o for o in objects(text) if isinstance(o, dict) and "steps" in o]
    if len(found) != 1:
        return None, (f"the plan reply held {len(found)} steps objects; exactly one is read"
                      if found else "the plan reply held no JSON object with steps")
    raw = found[0]["steps"]
    if not isinstance(raw, list) or not raw:
        return None, "steps must be a non-empty list"
    if len(raw) > max_steps:
        return None, f"the plan has {len(raw)} steps; at most {max_steps} are run"
    steps: list[PlanStep] = []
    for number, item in enumerate(raw, start=1):
        step, problem = _step(item, number, steps)
        if step is None:
            return None, problem
        steps.append(step)
    return Plan(tuple(steps)), ""


def _step(item: Any, number: int, earlier: list[PlanStep]) -> tuple[PlanStep | None, str]:
    where = f"step {number}"
    if not isinstance(item, dict):
        return None, f"{where} is not an object"
    ident = item.get("id")
    if ident != f"s{number}" or not isinstance(ident, str) or not _ID.fullmatch(ident):
        return None, f"{where} must have id 's{number}', not {ident!r}"
    goal = item.get("goal")
    if not isinstance(goal, str) or not goal.strip():
        return None, f"{ident} has no goal"
    rung = item.get("rung")
    if isinstance(rung, bool) or not isinstance(rung, int) or rung < 1:
        return None, f"{ident}'s rung must be an integer of 1 or more, not {rung!r}"
    needs = item.get("needs")
    if needs is None:
        return PlanStep(ident, goal.strip(), rung), ""
    if not isinstance(needs, list) or not all(isinstance(n, str) for n in needs):
        return None, f"{ident}'s needs must be a list of step ids"
    rungs = {s.id: s.rung for s in earlier}
    for need in needs:
        if need not in rungs:
            return None, f"{ident} needs {need!r}, which is not an earlier step"
        if rungs[need] >= rung:
            return None, (f"{ident} needs {need}, which is not on a lower rung "
                          f"({rungs[need]} vs {rung})")
    return PlanStep(ident, goal.strip(), rung, tuple(dict.fromkeys(needs))), ""
