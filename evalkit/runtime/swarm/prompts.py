"""What the model is told in a swarm run: triage, plan, a step's brief, the synthesis.

Kept beside ``evalkit.runtime.prompts`` (which holds every sentence of the
ordinary loop) so that a swarm prompt change is one diff in one file; like
those, these are not part of the contract, and replay drift points here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from evalkit.runtime import prompts
from evalkit.runtime.swarm.plan import MAX_STEPS, Plan, PlanStep

TRIAGE_SYSTEM = (
    "You decide how an agent should take on a mission before it starts. Almost every "
    "mission is best done directly: one agent, one conversation, calling tools until it can "
    "answer. Ask for a plan only when the objective plainly falls into separate pieces of "
    "work that each need their own tool calls and can each be finished and summed up on their "
    "own. If you are unsure, choose direct."
)

PLAN_SYSTEM = (
    "You break a mission into a few steps, each done by its own agent with the tools listed. "
    "A step is one piece of work an agent can finish and report in a short summary. Steps on "
    "the same rung must not depend on each other: they may run at the same time. A step that "
    "needs another step's result goes on a higher rung and names that step in needs. The "
    "final answer is written from the step summaries once every step is done, so no step "
    "writes it."
)

PLAN_FORMAT = (
    'Reply with exactly one JSON object and nothing else:\n'
    '{"steps": [{"id": "s1", "goal": "...", "rung": 1},\n'
    '           {"id": "s2", "goal": "...", "rung": 1},\n'
    '           {"id": "s3", "goal": "...", "rung": 2, "needs": ["s1", "s2"]}]}\n'
    f"Ids are s1, s2, ... in the order you list them; rungs are whole numbers from 1; "
    f"at most {MAX_STEPS} steps; needs names earlier steps on lower rungs."
)

STEP_CLOSE = (
    "Do this step only, with the tools. When it is done, give as your final answer a short "
    "summary of what you found, quoting identifiers and figures exactly as the tools printed "
    "them. Another agent writes the mission's answer from your summary."
)

SYNTHESIS_CLOSE = (
    "Write the final answer to the objective from these results. Quote identifiers and "
    "figures exactly as the tool results print them. The tools are still offered if something "
    "must be read again or checked."
)


@dataclass
class Settled:
    """A finished step as the synthesis (and later steps) are told about it."""

    step: PlanStep
    summary: str
    #: The step's ``tool_result`` records, in the order they were emitted.
    results: list[dict[str, Any]] = field(default_factory=list)


def triage_messages(objective: str, catalogue: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The one cheap routing call."""
    names = ", ".join(str(t.get("name")) for t in catalogue) or "none"
    user = (f"Objective: {objective}\n\nTools the agent will have: {names}\n\n"
            'Reply with exactly one JSON object: {"route": "direct"} or {"route": "plan"}.')
    return [{"role": "system", "content": TRIAGE_SYSTEM}, {"role": "user", "content": user}]


def plan_messages(objective: str, catalogue: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The call that writes the plan."""
    tools = "\n".join(f"- {t.get('name')}: {t.get('description') or ''}" for t in catalogue)
    user = (f"Objective: {objective}\n\nTools each step's agent will have:\n"
            f"{tools or '(none)'}\n\n{PLAN_FORMAT}")
    return [{"role": "system", "content": PLAN_SYSTEM}, {"role": "user", "content": user}]


def step_brief(objective: str, plan: Plan, step: PlanStep, shown: Sequence[Settled]) -> str:
    """The user turn a step's lane starts from (after the ordinary system turn)."""
    lines = [f"You are doing one step of a larger mission.\n\nThe mission: {objective}",
             "The plan:"]
    lines += [f"- {s.id} (rung {s.rung}): {s.goal}" for s in plan.steps]
    lines.append(f"\nYour step: {step.id}: {step.goal}")
    if shown:
        lines.append("\nWhat the steps before yours found:")
        lines += [f"- {done.step.id} ({done.step.goal}): {done.summary}" for done in shown]
    lines.append(f"\n{STEP_CLOSE}")
    return "\n".join(lines)


def synthesis_prompt(objective: str, settled: Sequence[Settled], *, limit: int) -> str:
    """The main line's last turn: every step's goal, summary and tool results."""
    parts = [f"Objective: {objective}",
             "The work was split into steps, each done by its own agent. Every step has "
             "finished; here is each one's goal, its summary, and the results of its tool calls."]
    for done in settled:
        block = [f"## {done.step.id}: {done.step.goal}", f"Summary: {done.summary}"]
        for record in done.results:
            arguments = json.dumps(record.get("arguments") or {}, ensure_ascii=False,
                                   sort_keys=True)
            block.append(f"Called {record.get('tool')} with {arguments}")
            view, _ = prompts.result_view(str(record.get("output") or ""), record.get("error"),
                                          bool(record.get("ok")), str(record.get("handle")),
                                          limit=limit)
            block.append(prompts.result_note(str(record.get("tool")), str(record.get("handle")),
                                             bool(record.get("ok")), record.get("exit_code"),
                                             view))
        if not done.results:
            block.append("(this step called no tool)")
        parts.append("\n".join(block))
    parts.append(SYNTHESIS_CLOSE)
    return "\n\n".join(parts)
