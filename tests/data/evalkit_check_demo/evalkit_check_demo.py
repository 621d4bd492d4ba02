"""An evalkit check from outside evalkit: no more than ``max_multiplies`` multiplications.

Everything evalkit needs is the ``Check``: the mission field that sets it, how a run is
judged, and which run facts that reads. Offered under the evalkit.checks entry point
(entry_points.txt beside it; a pyproject says it as [project.entry-points."evalkit.checks"]).
"""

from evalkit import Check, Field


def judge(mission, summary):
    made = sum(1 for tool in summary.tools_called if tool.endswith("multiply"))
    if made > mission.max_multiplies:
        yield f"it multiplied {made} times; this mission allows {mission.max_multiplies}"


def validate(mission, rules):
    if mission.max_multiplies < 0:
        yield f"{mission.max_multiplies} is negative; use 0 or more"


CHECK = Check(
    name="max_multiplies",
    fields=(Field("max_multiplies", "int", "int ≥ 0", "most multiplications allowed"),),
    judge=judge,
    validate=validate,
    reads=("tools_called",),
    reasons=((r"^it multiplied \d+ times", "max_multiplies"),),
)
