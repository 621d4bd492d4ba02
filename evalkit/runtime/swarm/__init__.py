"""Swarm — staged decomposition (``evalkit mission --swarm``).

- ``runner`` — ``SwarmRun``: triage → direct, or plan → steps as lanes of the
  run → a synthesis answer grounded like any other.
- ``plan`` — reading the triage reply and the plan (pure; ``MAX_STEPS``).
- ``prompts`` — what the model is told at each stage.

See docs/SWARM.md.
"""

from __future__ import annotations

from evalkit.runtime.swarm.plan import MAX_STEPS, Plan, PlanStep, read_plan, read_route
from evalkit.runtime.swarm.runner import SwarmRun

__all__ = ["MAX_STEPS", "Plan", "PlanStep", "SwarmRun", "read_plan", "read_route"]
