"""evalkit.record: any Python agent, recorded as evalkit's own runtime records itself.

    import evalkit.record as record
    from openai import OpenAI

    client = record.wrap_openai(OpenAI())

    @record.tool
    def multiply(a: int, b: int) -> int:
        return a * b

    with record.mission("What is 17 times 23?", suite_key="times") as m:
        ...  # the agent's own loop: client.chat.completions.create(...), multiply(...)
        m.answer("391")

The run lands in the run store (``EVALKIT_RUNS``) as a run directory the
built-in runtime would have written — ``events.jsonl``, ``model.jsonl``,
``tools.jsonl``, ``meta.json``, sealed — and the stream goes to the event sink
(``EVALKIT_EVENTS``, which ``evalkit run`` sets). So ``score``, ``report``,
``diff`` and ``verify`` read it unchanged, and ``evalkit run -- python agent.py``
spawns such an agent like any other.

Needs only the base install, plus ``openai`` for ``wrap_openai`` (the agent has
it already); ``evalkit.record.langchain`` needs the ``langgraph`` extra. Nothing
on the scoring path imports this package.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from evalkit.record._calls import ModelCall, ToolCall
from evalkit.record._current import current
from evalkit.record._mission import Mission
from evalkit.record._openai import wrap_openai
from evalkit.record._tools import declared, tool


def mission(objective: str, suite_key: str | None = None, *, runs: str | Path | None = None,
            events: str | None = None, catalogue: Iterable[str | Mapping[str, Any]] = (),
            meta: Mapping[str, Any] | None = None, replay: str | Path | None = None
            ) -> Mission:
    """A mission to record, opened by ``with``: see ``Mission`` for the arguments.

    Its catalogue is every ``@tool`` declared so far, then ``catalogue``; tools a
    model call offers later are added as they appear (``step_started.catalogue``).
    """
    given = list(catalogue)
    named = {c if isinstance(c, str) else c.get("name") for c in given}
    tools = [d for d in declared() if d["name"] not in named]
    return Mission(objective, suite_key=suite_key, runs=runs, events=events,
                   catalogue=[*tools, *given], meta=meta, replay=replay)


__all__ = ["Mission", "ModelCall", "ToolCall", "current", "mission", "tool", "wrap_openai"]
