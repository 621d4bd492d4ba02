"""Capability profiles: which scopes a run holds, and what a refusal says.

Five profiles, each a superset of the one before; ``god`` holds every scope,
including ones no profile names. A run holds its profile's scopes plus any
``--grant`` scopes; everything else is denied. A refusal names each missing
scope and the weakest profile that holds it, so the operator knows the
smallest change that would have let the call through.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from evalkit.contract import PROFILES
from evalkit.errors import EvalkitError

DEFAULT_PROFILE = "safe"

# An MCP tool needs mcp.call when its server calls it read-only, mcp.write when it
# changes something, mcp.destructive too when it may destroy (tools/mcp_scopes.py).
_SAFE = ("fs.read", "git.read", "verify.run", "mcp.call", "memory.read")
_DEV = ("fs.write", "git.write", "python.exec", "shell.exec", "memory.write", "mcp.write")
_RESEARCH = ("http.read",)
_OPS = ("git.push", "pip.install", "fs.delete", "mcp.destructive")

#: Scopes each profile adds to the one before it (``god`` adds "everything").
ADDS: dict[str, tuple[str, ...]] = {
    "safe": _SAFE,
    "dev": _DEV,
    "research": _RESEARCH,
    "ops": _OPS,
    "god": (),
}

#: Every scope a profile below ``god`` names; ``--grant`` accepts only these.
KNOWN_SCOPES: tuple[str, ...] = (*_SAFE, *_DEV, *_RESEARCH, *_OPS)

#: Scopes that mean "runs code on this host": a skill closing over one needs bwrap.
CODE_SCOPES: frozenset[str] = frozenset({"shell.exec", "python.exec", "pip.install"})


def _cumulative() -> dict[str, frozenset[str]]:
    held: list[str] = []
    out: dict[str, frozenset[str]] = {}
    for name in PROFILES:
        held += ADDS[name]
        out[name] = frozenset(held)
    return out


#: The scopes each profile below ``god`` holds.
PROFILE_SCOPES: dict[str, frozenset[str]] = _cumulative()


def check_profile(name: str) -> str:
    """``name`` when it is a profile; otherwise one sentence naming the five."""
    if name not in PROFILES:
        raise EvalkitError(f"unknown profile {name!r}: use one of {', '.join(PROFILES)}")
    return name


def check_grants(grants: Iterable[str]) -> tuple[str, ...]:
    """The ``--grant`` scopes, sorted and unique; ``*`` and unknown scopes are refused."""
    out: list[str] = []
    for scope in grants:
        if scope.strip() == "*" or "*" in scope:
            raise EvalkitError("--grant * is refused: that is --profile god by another name; "
                               "grant the one scope the run needs")
        if scope not in KNOWN_SCOPES:
            raise EvalkitError(f"--grant {scope!r}: no such scope; known scopes: "
                               f"{', '.join(sorted(KNOWN_SCOPES))}")
        if scope not in out:
            out.append(scope)
    return tuple(sorted(out))


def lowest_profile(scope: str) -> str:
    """The weakest profile holding ``scope`` (``god`` for a scope no profile names)."""
    for name in PROFILES:
        if name == "god" or scope in PROFILE_SCOPES[name]:
            return name
    return "god"


def holds(profile: str, grants: Iterable[str], scope: str) -> bool:
    """Whether a run under ``profile`` with ``grants`` holds ``scope``."""
    return profile == "god" or scope in PROFILE_SCOPES[profile] or scope in set(grants)


def missing(profile: str, grants: Sequence[str], scopes: Iterable[str]) -> list[str]:
    """The scopes of ``scopes`` the run does not hold, in order."""
    return [s for s in scopes if not holds(profile, grants, s)]


def refusal(profile: str, missing_scopes: Sequence[str]) -> str:
    """The sentence a denied call gets back, e.g.
    ``denied under profile 'safe': python.exec needs --profile dev``."""
    needs = "; ".join(f"{s} needs --profile {lowest_profile(s)}" for s in missing_scopes)
    return f"denied under profile {profile!r}: {needs}"
