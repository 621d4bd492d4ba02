"""``expects_tools``: the run looked where the mission says it must."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from evalkit.eval.checks import Check, Field
from evalkit.eval.verdict import distinct

if TYPE_CHECKING:
    from evalkit.eval.check import Rules
    from evalkit.eval.mission import Mission
    from evalkit.eval.summary import RunSummary


def judge(m: Mission, s: RunSummary) -> Iterator[str]:
    for tool in m.expects_tools:
        if tool not in s.tools_called:
            yield f"never called {tool}; it called {distinct(s.tools_called)!r}"


def unserved(tools: tuple[str, ...], rules: Rules) -> Iterator[str]:
    """A tool the suite does not serve cannot be called (or forbidden) meaningfully."""
    if rules.tools is None:
        return
    for tool in tools:
        if tool not in rules.tools:
            yield f"{tool!r} is not a served tool ({', '.join(rules.suite.tools or ()) or 'none'})"


CHECK = Check(
    name="expects_tools",
    fields=(Field("expects_tools", "strs", "list", "each must appear as some `tool_call.tool`"),),
    judge=judge,
    validate=lambda m, rules: unserved(m.expects_tools, rules),
    reads=("tools_called",),
    reasons=((r"^never called ", "expects_tools"),),
)
