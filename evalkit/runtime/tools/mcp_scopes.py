"""Which scopes an MCP tool needs: its annotations, read as the MCP spec defines them,
unless an operator declared its server's scopes on purpose.

A server's annotations are its author's word about the tool. What lowers a
tool's scope must be said: only ``readOnlyHint: true`` makes it a reader, so
a tool that says nothing — no annotations, or no ``readOnlyHint`` — is
treated as writing (``mcp.write``, held from ``dev``). What raises it counts
only when said too: ``destructiveHint: true`` adds ``mcp.destructive``
(``ops``) and ``openWorldHint: true`` adds ``http.read``. The spec's own
defaults (destructive and open-world unless told otherwise) would put every
unannotated tool of the many servers that annotate nothing, and every
read-only tool that did not also deny an open world, out of reach of all but
``ops``; an operator who wants that strictness declares it per server.
``idempotentHint`` never changes a scope: repeating a write is still a write.

Annotations are hints a client may not trust, so an operator can overrule
them for every tool of one server (``--mcp-scopes SERVER=SCOPE[,SCOPE]``, or
a skill's ``mcp_scopes``), in either direction. Which of the three decided
(``annotations``, ``default``, ``operator``) travels with the descriptor into
the catalogue and the audit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: A read-only tool's scope: held from ``safe`` up.
READ_SCOPE = "mcp.call"
#: A tool that changes its server's world: held from ``dev`` up.
WRITE_SCOPE = "mcp.write"
#: A writing tool that may also destroy (not only add): held from ``ops`` up.
DESTRUCTIVE_SCOPE = "mcp.destructive"
#: A tool that reaches entities outside its server (the web, other hosts).
OPEN_WORLD_SCOPE = "http.read"

#: The four behaviour hints of ``ToolAnnotations`` (with the spec's defaults, which
#: ``scopes_of`` deliberately does not assume: only what a server says counts).
HINT_DEFAULTS: dict[str, bool] = {
    "readOnlyHint": False,
    "destructiveHint": True,
    "idempotentHint": False,
    "openWorldHint": True,
}

#: Where a tool's scopes came from.
FROM_ANNOTATIONS = "annotations"
FROM_DEFAULT = "default"
FROM_OPERATOR = "operator"


@dataclass(frozen=True)
class Declared:
    """An operator's declaration for every tool of one server, and who made it."""

    scopes: tuple[str, ...]
    #: "--mcp-scopes" or "skill 'NAME'": named in the catalogue, the audit and refusals.
    by: str


@dataclass(frozen=True)
class ScopeDecision:
    """The scopes one MCP tool needs and why."""

    scopes: tuple[str, ...]
    source: str
    declared_by: str | None = None


def hints_of(annotations: Any) -> dict[str, bool] | None:
    """The behaviour hints a server set on a tool (spec spelling), None when it set none.

    Takes the SDK's ``ToolAnnotations`` (or its JSON form). A hint that is not
    a boolean is dropped: it says nothing anybody can read.
    """
    if annotations is None:
        return None
    if not isinstance(annotations, Mapping):
        dump = getattr(annotations, "model_dump", None)
        if dump is None:
            return None
        annotations = dump(by_alias=True, exclude_none=True)
    hints = {k: v for k, v in annotations.items() if k in HINT_DEFAULTS and isinstance(v, bool)}
    return hints or None


def scopes_of(hints: Mapping[str, bool] | None) -> tuple[str, ...]:
    """The scopes a tool with these hints needs: a reader only when it says so, more only
    for what it says it does."""
    said = hints or {}
    if said.get("readOnlyHint") is True:
        needed = [READ_SCOPE]
    else:
        needed = [WRITE_SCOPE]
        if said.get("destructiveHint") is True:  # meaningful only for a tool that writes
            needed.append(DESTRUCTIVE_SCOPE)
    if said.get("openWorldHint") is True:
        needed.append(OPEN_WORLD_SCOPE)
    return tuple(needed)


def decide(hints: Mapping[str, bool] | None, declared: Declared | None) -> ScopeDecision:
    """An operator's declaration if there is one, else the annotations (or their defaults)."""
    if declared is not None:
        return ScopeDecision(declared.scopes, FROM_OPERATOR, declared.by)
    return ScopeDecision(scopes_of(hints), FROM_ANNOTATIONS if hints else FROM_DEFAULT)
