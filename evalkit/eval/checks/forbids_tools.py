"""``forbids_tools``: the run never reached for a tool the mission rules out.

Naming a tool is reaching for it: a gated call, or a reply refused for
naming it, counts as much as a call that ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from evalkit.eval.checks import Check, Field
from evalkit.eval.checks.expects_tools import unserved

if TYPE_CHECKING:
    from evalkit.eval.mission import Mission
    from evalkit.eval.summary import RunSummary


def judge(m: Mission, s: RunSummary) -> Iterator[str]:
    for tool in m.forbids_tools:
        if tool in s.tools_called:
            yield f"reached for {tool}, which this mission forbids (and called it)"
        elif tool in s.gate_tools or tool in s.rejected_tools:
            yield (f"reached for {tool}, which this mission forbids "
                   "(named, and the call never left the loop)")


CHECK = Check(
    name="forbids_tools",
    fields=(Field("forbids_tools", "strs", "list", "none may appear in `tool_call.tool`, "
                  "`gate_requested.tool` or `reply_rejected.tool`"),),
    judge=judge,
    validate=lambda m, rules: unserved(m.forbids_tools, rules),
    reads=("tools_called", "gate_tools", "rejected_tools"),
    reasons=((r"^reached for ", "forbids_tools"),),
)
