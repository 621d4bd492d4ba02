"""The mission runtime: the agent evalkit ships, as a small library.

    from evalkit.runtime import Bounds, Run, ScriptedBackend
    from evalkit.runtime.tools import ResultStore, ToolPlane
    from evalkit.store.runstore import RunStore

    with ToolPlane(root=Path("."), results=ResultStore()) as plane:
        run = Run(ScriptedBackend(['{"answer": "42"}']), plane,
                  bounds=Bounds(steps=8), store=RunStore(Path(".evalkit/runs")))
        outcome = run.run("what is the answer?")
        print(outcome.outcome, outcome.answer, outcome.run_id)

``evalkit mission`` builds exactly these objects (``launch``). Importing this
package stays cheap: the ``openai`` SDK, ``mcp`` and ``jsonschema`` load only
when a backend or plane that needs them is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from evalkit.runtime.backends import EndpointWait, ModelBackend, Reply, ScriptExhausted
from evalkit.runtime.backends.scripted import ScriptedBackend
from evalkit.runtime.cancel import Cancelled, CancelToken, sigterm_cancels
from evalkit.runtime.protocol import Answer, Call, Protocol, Rejection, make_protocol
from evalkit.runtime.run import Bounds, Run, RunOutcome
from evalkit.runtime.waits import WaitPolicy

if TYPE_CHECKING:
    from evalkit.runtime.backends.openai_compat import OpenAIBackend
    from evalkit.runtime.mission import MissionSettings, launch

__all__ = [
    "Answer",
    "Bounds",
    "Call",
    "CancelToken",
    "Cancelled",
    "EndpointWait",
    "MissionSettings",
    "ModelBackend",
    "OpenAIBackend",
    "Protocol",
    "Rejection",
    "Reply",
    "Run",
    "RunOutcome",
    "ScriptExhausted",
    "ScriptedBackend",
    "WaitPolicy",
    "launch",
    "make_protocol",
    "sigterm_cancels",
]

_LAZY = {
    "OpenAIBackend": "evalkit.runtime.backends.openai_compat",
    "MissionSettings": "evalkit.runtime.mission",
    "launch": "evalkit.runtime.mission",
}


def __getattr__(name: str) -> Any:
    """Load the heavier names on first use (``OpenAIBackend`` only imports ``openai`` when built)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
