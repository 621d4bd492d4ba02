"""An operator's word on an MCP server's scopes: ``--mcp-scopes`` and a skill's ``mcp_scopes``.

A server's annotations are its author's claims, which the spec tells a
client not to trust from a server it does not know; an operator who knows
the server better says what its tools need, for every tool of that server,
on purpose. ``mcp=mcp.call`` declares a server read-only; ``mcp=mcp.write``
declares a server with lax annotations a writer. A declaration replaces the
annotations of that server's tools — it never adds to them — and is named
wherever it decides a call, so nobody mistakes it for the server's own word.

Refused, with one sentence, rather than guessed: ``*``, a scope no profile
names, a declaration that names no scope or no server, and two skills that
disagree about one server. Whether a server of that name runs is the tool
plane's to say: it alone knows the namespaces.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.runtime.governance.profiles import KNOWN_SCOPES
from evalkit.runtime.tools.mcp_scopes import Declared

FLAG = "--mcp-scopes"
MANIFEST_KEY = "mcp_scopes"
_EXAMPLE = "mcp=mcp.call declares the server namespaced mcp read-only"


def check_scopes(scopes: Iterable[str], where: str) -> tuple[str, ...]:
    """The declared scopes, unique, in the order written; refuses ``*``, unknown and none."""
    out: list[str] = []
    for scope in scopes:
        if "*" in scope:
            raise EvalkitError(f"{where}: * is refused; name the scopes the server's tools "
                               f"need ({_EXAMPLE})")
        if scope not in KNOWN_SCOPES:
            raise EvalkitError(f"{where}: no such scope {scope!r}; known scopes: "
                               f"{', '.join(sorted(KNOWN_SCOPES))}")
        if scope not in out:
            out.append(scope)
    if not out:
        raise EvalkitError(f"{where}: names no scope ({_EXAMPLE})")
    return tuple(out)


def parse_flag(values: Sequence[str]) -> dict[str, Declared]:
    """``--mcp-scopes SERVER=SCOPE[,SCOPE]`` values by server; a server given twice gets both lists."""
    held: dict[str, list[str]] = {}
    for value in values:
        where = f"{FLAG} {value!r}"
        server, sep, listed = value.partition("=")
        server = server.strip()
        if "*" in server:
            raise EvalkitError(f"{where}: * is refused; name each server ({_EXAMPLE})")
        if not sep or not server:
            raise EvalkitError(f"{where} is not SERVER=SCOPE[,SCOPE] ({_EXAMPLE})")
        scopes = check_scopes([s.strip() for s in listed.split(",") if s.strip()], where)
        before = held.setdefault(server, [])
        before += [s for s in scopes if s not in before]
    return {server: Declared(tuple(scopes), FLAG) for server, scopes in held.items()}


def check_manifest_block(block: Any, where: str) -> dict[str, tuple[str, ...]]:
    """A manifest's ``mcp_scopes`` (server -> list of scopes), checked; returned by server."""
    if not isinstance(block, dict) or not block:
        raise EvalkitError(f"{where}: '{MANIFEST_KEY}' must map each MCP server to a list of "
                           f"scopes, e.g. mcp_scopes: {{mcp: [mcp.call]}}")
    out: dict[str, tuple[str, ...]] = {}
    for server, scopes in block.items():
        if not isinstance(server, str) or not server.strip():
            raise EvalkitError(f"{where}: '{MANIFEST_KEY}' keys must be server namespaces")
        name = server.strip()
        at = f"{where}: {MANIFEST_KEY} {name!r}"
        if "*" in name:
            raise EvalkitError(f"{at}: * is refused; name each server ({_EXAMPLE})")
        if isinstance(scopes, str) or not isinstance(scopes, list) or not all(
                isinstance(s, str) for s in scopes):
            raise EvalkitError(f"{at} must be a list of scopes, e.g. [mcp.call]")
        out[name] = check_scopes([s.strip() for s in scopes], at)
    return out


def merge_manifests(parts: Sequence[Any]) -> dict[str, tuple[str, ...]] | None:
    """Several skills' declarations as one; two skills that disagree about a server are refused."""
    merged: dict[str, tuple[str, ...]] = {}
    said_by: dict[str, str] = {}
    for part in parts:
        for server, scopes in (part.mcp_scopes or {}).items():
            if server in merged and set(merged[server]) != set(scopes):
                raise EvalkitError(f"--skill: skills {said_by[server]!r} and {part.name!r} declare "
                                   f"different scopes for MCP server {server!r}; declare it once")
            merged.setdefault(server, scopes)
            said_by.setdefault(server, part.name)
    return merged or None


def declarations(flag: Mapping[str, Declared], manifest: Any = None) -> dict[str, Declared]:
    """What the plane applies: each skill's declarations, then ``--mcp-scopes`` over them.

    The command line wins for a server both declare: it is the operator at
    hand, where the skill was written for every run.
    """
    out: dict[str, Declared] = {}
    for part in getattr(manifest, "parts", ()):
        for server, scopes in (part.mcp_scopes or {}).items():
            out.setdefault(server, Declared(scopes, f"skill {part.name!r}"))
    out.update(flag)
    return out
