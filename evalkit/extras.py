"""Which optional extra each part of evalkit needs, and the one sentence that says so.

``pip install evalkit`` is what scoring needs (check, score, ingest, sql, report,
diff, verify, and ``run`` of your own agent), so a CI job that only grades
recordings installs no model SDK, no MCP and no Ray. The built-in runtime and
the Ray executor come as extras. A command that needs a missing extra is refused
before it imports or writes anything, in one sentence naming the extra — not
with an ImportError half way through a run.

pyproject.toml lists each extra's distributions; this module, the import names
evalkit checks for (tests/test_layering.py holds the two to each other).
"""

from __future__ import annotations

import importlib.util

from evalkit.errors import EvalkitError

#: extra -> the modules of it that evalkit imports (import names, not distribution names).
EXTRAS: dict[str, tuple[str, ...]] = {
    "agent": ("openai", "mcp", "mcp_types", "vcr", "jsonschema"),
    "ray": ("ray",),
    "inspect": ("inspect_ai",),
    "langgraph": ("langchain_core",),
    # Not imported by evalkit itself (import/export otel read and write JSON): what traces
    # an agent, and what the tests make and read back spans with.
    "otel": ("opentelemetry",),
}

#: The built-in runtime: ``run`` and ``measure`` given no agent after ``--``.
BUILTIN_RUNTIME = "the built-in runtime (no agent after --)"
#: ``run``/``measure --executor ray``.
RAY_EXECUTOR = "--executor ray"
#: ``evalkit export inspect``: the logs are built from inspect_ai's own types.
INSPECT_EXPORT = "export inspect"
#: ``evalkit.gate.langgraph``: governed stand-ins for a LangGraph agent's LangChain tools.
GATE_LANGGRAPH = "evalkit.gate.langgraph"

#: What needs an extra -> which. ``evalkit NAME`` entries are whole commands, refused
#: before their module is imported; the others are choices within ``run`` and ``measure``.
NEEDS: dict[str, str] = {
    "evalkit mission": "agent",
    "evalkit replay": "agent",
    "evalkit regrade": "agent",
    "evalkit record-corpus": "agent",
    BUILTIN_RUNTIME: "agent",
    RAY_EXECUTOR: "ray",
    INSPECT_EXPORT: "inspect",
    GATE_LANGGRAPH: "langgraph",
}


#: Commands listed in NEEDS that need their extra in one mode only, and check it themselves
#: in that mode before they import it: ``regrade`` replays with the runtime, but
#: ``regrade --policy`` decides recorded calls again and replays nothing.
CHECKED_BY_THE_COMMAND = frozenset({"evalkit regrade"})


def missing(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here (found, not imported: cheap)."""
    return [name for name in EXTRAS[extra] if not _importable(name)]


def require(who: str) -> None:
    """Refuse ``who`` (a key of NEEDS) with one sentence when its extra is not installed."""
    extra = NEEDS[who]
    if missing(extra):
        raise EvalkitError(f"{who} needs the {extra} extra: pip install 'evalkit[{extra}]'")


def require_command(name: str) -> None:
    """Refuse ``evalkit NAME`` when the whole command needs an extra that is not installed."""
    who = f"evalkit {name}"
    if who in NEEDS and who not in CHECKED_BY_THE_COMMAND:
        require(who)


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a finder that refuses the name, a broken package
        return False
