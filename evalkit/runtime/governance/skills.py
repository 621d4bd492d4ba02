"""Skill manifests: ``SKILL.md`` = YAML frontmatter + a Markdown body.

A manifest is content: it closes the tool set (``allowed_tools``), says which
sandbox it requires, carries a grounding grammar for the answer checker, and
its body is written into the system turn. Loading is strict — an unknown key,
a wrong type or a missing name is refused with one message — because a
manifest that half-loads governs a run nobody asked for.

Several manifests compose (``--skill`` is repeatable): the first is the
primary (its name is the run's skill name), the closed tool sets are unioned,
bodies are rendered in order, and the grounding grammar is the first one
declared. Resolution against a live plane (``close_over``) happens once the
plane has started, and refuses rather than narrows: a named tool the plane
does not offer, or a short name two planes offer, stops the mission at the
door.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.runtime.governance.mcpscopes import check_manifest_block, merge_manifests
from evalkit.runtime.governance.profiles import CODE_SCOPES

MANIFEST_FILE = "SKILL.md"

#: Frontmatter keys a manifest may carry. ``license`` and ``metadata`` are
#: accepted (and not interpreted) so manifests written in the common SKILL.md
#: shape load; everything else is refused.
KEYS: tuple[str, ...] = ("name", "description", "allowed_tools", "sandbox", "grounding",
                         "mcp_scopes", "mcp_env", "license", "metadata")

#: The grounding grammar's keys (validated in depth by the grounding checker).
GROUNDING_KEYS: tuple[str, ...] = ("identifier_pattern", "number_pattern", "ignore",
                                   "max_repairs", "must_cite", "figures_from", "claim_table",
                                   "planes")

SANDBOXES: tuple[str, ...] = ("bwrap", "none")

_HINTS = {"allowed-tools": "allowed_tools", "tools": "allowed_tools", "prompt": "the body"}


@dataclass(frozen=True)
class Manifest:
    """One skill manifest, or several composed (``sources`` then holds them)."""

    name: str
    description: str = ""
    #: The closed tool set as written (None: the manifest does not close the set).
    allowed_tools: tuple[str, ...] | None = None
    #: "bwrap", "none", or None (not said).
    sandbox: str | None = None
    #: The ``grounding:`` block as written (keys checked, values raw), or None.
    grounding: Mapping[str, Any] | None = None
    #: The Markdown body: the skill's prompt text.
    body: str = ""
    #: Scopes declared for every tool of an MCP server, by server (see ``mcpscopes``).
    mcp_scopes: Mapping[str, tuple[str, ...]] | None = None
    #: Variables the MCP servers are given, as ``--mcp-env`` takes them (NAME or NAME=VALUE).
    mcp_env: tuple[str, ...] = ()
    path: Path | None = None
    license: str | None = None
    metadata: Mapping[str, Any] | None = None
    sources: tuple[Manifest, ...] = field(default=(), repr=False)

    @property
    def parts(self) -> tuple[Manifest, ...]:
        """The single manifests this one is made of (itself when it is one)."""
        return self.sources or (self,)

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.parts]

    def prompt(self) -> str:
        """The text written into the system turn: each skill's body under its name."""
        blocks = [f"Skill: {m.name}\n\n{m.body.strip()}" for m in self.parts if m.body.strip()]
        return "\n\n".join(blocks)


def _where(path: Path | None) -> str:
    return f"skill manifest {path}" if path is not None else "skill manifest"


def load_manifest(path: str | Path) -> Manifest:
    """Read one ``SKILL.md`` (or a directory holding one); refuses with one message."""
    target = Path(path)
    if target.is_dir():
        target = target / MANIFEST_FILE
    try:
        text = target.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise EvalkitError(f"--skill {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalkitError(f"--skill {path}: cannot read it: {exc}") from None
    return parse_manifest(text, path=target)


def parse_manifest(text: str, *, path: Path | None = None) -> Manifest:
    """A manifest from its text: ``---`` YAML frontmatter ``---`` then the body."""
    where = _where(path)
    lines = text.lstrip("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise EvalkitError(f"{where} must start with a '---' line opening its YAML frontmatter")
    end = next((i for i in range(1, len(lines)) if lines[i].strip() in ("---", "...")), None)
    if end is None:
        raise EvalkitError(f"{where}: the YAML frontmatter is never closed by a '---' line")
    import yaml  # lazily: only a run with --skill pays for it

    try:
        data = yaml.safe_load("".join(lines[1:end]))
    except yaml.YAMLError as exc:
        raise EvalkitError(f"{where}: the frontmatter is not valid YAML: "
                           f"{' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise EvalkitError(f"{where}: the frontmatter must be a mapping of keys to values")
    return _build(data, "".join(lines[end + 1:]), path)


def _build(data: dict[Any, Any], body: str, path: Path | None) -> Manifest:
    where = _where(path)
    unknown = [str(k) for k in data if k not in KEYS]
    if unknown:
        hints = [f"{k} (did you mean {_HINTS[k]}?)" if k in _HINTS else k for k in unknown]
        raise EvalkitError(f"{where}: unknown key(s) {', '.join(hints)}; "
                           f"a manifest may hold {', '.join(KEYS)}")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise EvalkitError(f"{where}: 'name' is required (a non-empty string)")
    description = data.get("description", "")
    if description is None:
        description = ""
    if not isinstance(description, str):
        raise EvalkitError(f"{where}: 'description' must be a string")
    tools = data.get("allowed_tools")
    if tools is not None:
        if isinstance(tools, str) or not isinstance(tools, list) or not all(
                isinstance(t, str) and t.strip() for t in tools):
            raise EvalkitError(f"{where}: 'allowed_tools' must be a list of tool names")
        tools = tuple(dict.fromkeys(t.strip() for t in tools))
    sandbox = data.get("sandbox")
    if sandbox is not None and sandbox not in SANDBOXES:
        raise EvalkitError(f"{where}: 'sandbox' must be bwrap or none, not {sandbox!r}")
    license_ = data.get("license")
    if license_ is not None and not isinstance(license_, str):
        raise EvalkitError(f"{where}: 'license' must be a string")
    metadata = data.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise EvalkitError(f"{where}: 'metadata' must be a mapping")
    grounding = data.get("grounding")
    if grounding is not None:
        grounding = check_grounding(grounding, where)
    mcp_scopes = data.get("mcp_scopes")
    if mcp_scopes is not None:
        mcp_scopes = check_manifest_block(mcp_scopes, where)
    mcp_env = data.get("mcp_env") or []
    if not isinstance(mcp_env, list) or not all(
            isinstance(v, str) and v.partition("=")[0].strip() for v in mcp_env):
        raise EvalkitError(f"{where}: 'mcp_env' must be a list of NAME or NAME=VALUE, "
                           "e.g. mcp_env: [TZ, LANG=C.UTF-8]")
    return Manifest(name=name.strip(), description=description, allowed_tools=tools,
                    sandbox=sandbox, grounding=grounding, body=body, path=path,
                    license=license_, metadata=metadata, mcp_scopes=mcp_scopes,
                    mcp_env=tuple(mcp_env))


def check_grounding(block: Any, where: str = "skill manifest") -> dict[str, Any]:
    """The ``grounding:`` block, validated by the grammar's one owner; returned as written.

    ``evalkit.grounding.parse_grammar`` is the reference for the grammar (every
    problem in one message); the manifest keeps the raw mapping so the
    runtime's grounding checker builds its ``Grammar`` from exactly what the
    author wrote.
    """
    if not isinstance(block, dict):
        raise EvalkitError(f"{where}: 'grounding' must be a mapping")
    try:
        from evalkit.grounding import parse_grammar
    except ImportError:  # pragma: no cover - the grounding package ships with evalkit
        unknown = [str(k) for k in block if k not in GROUNDING_KEYS]
        if unknown:
            raise EvalkitError(f"{where}: unknown grounding key(s) {', '.join(unknown)}; "
                               f"grounding may hold {', '.join(GROUNDING_KEYS)}") from None
        return dict(block)
    try:
        parse_grammar(block)
    except EvalkitError as exc:
        raise EvalkitError(f"{where}: {exc.message}") from None
    return dict(block)


def compose(manifests: Sequence[Manifest]) -> Manifest | None:
    """Several manifests as one: the first is primary, closed sets unioned.

    Only manifests that close the set contribute to the union; a manifest
    without ``allowed_tools`` never reopens a set another one closed. The
    sandbox is ``bwrap`` when any part asks for it; the grounding grammar is
    the first one declared, primary first. MCP scope declarations are unioned
    by server; two skills declaring one server differently are refused.
    """
    parts = [p for m in manifests for p in m.parts]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    seen: dict[str, Path | None] = {}
    for part in parts:
        if part.name in seen:
            raise EvalkitError(f"--skill: two manifests are named {part.name!r} "
                               f"({seen[part.name]} and {part.path})")
        seen[part.name] = part.path
    closing = [p.allowed_tools for p in parts if p.allowed_tools is not None]
    tools = tuple(dict.fromkeys(t for ts in closing for t in ts)) if closing else None
    sandboxes = {p.sandbox for p in parts}
    sandbox = "bwrap" if "bwrap" in sandboxes else ("none" if "none" in sandboxes else None)
    grounding = next((p.grounding for p in parts if p.grounding is not None), None)
    primary = parts[0]
    return Manifest(name=primary.name, description=primary.description, allowed_tools=tools,
                    sandbox=sandbox, grounding=grounding, body=primary.body, path=primary.path,
                    license=primary.license, metadata=primary.metadata,
                    mcp_scopes=merge_manifests(parts),
                    mcp_env=tuple(v for p in parts for v in p.mcp_env), sources=tuple(parts))


def load_all(paths: Iterable[str | Path]) -> Manifest | None:
    """``--skill`` values loaded and composed (None when there are none)."""
    return compose([load_manifest(p) for p in paths])


# -- against a live plane ------------------------------------------------------------------


def resolve_name(name: str, offered: Sequence[str]) -> list[str]:
    """The offered tools ``name`` can mean: itself, or a namespaced tool whose short name it is."""
    if name in offered and "." in name:
        return [name]
    return [n for n in offered if n == name or ("." in n and n.split(".", 1)[1] == name)]


def live_namespaces(catalogue: Sequence[Any]) -> set[str]:
    """The namespaces of the MCP servers behind a catalogue."""
    from evalkit.runtime.tools.descriptor import BUILTIN_PLANE

    return {d.plane for d in catalogue if getattr(d, "plane", BUILTIN_PLANE) != BUILTIN_PLANE}


def resolve_names(names: Iterable[str], offered: Sequence[str], *, what: str,
                  live: Collection[str] = (), deferred: list[str] | None = None) -> list[str]:
    """Every name resolved to one offered tool; refuses listing all missing/ambiguous names.

    A namespaced name (``mcp.vault_read``) of a server that is running but
    does not list that tool yet is not refused when ``deferred`` is given: an
    MCP server may register tools mid-run, so the name is kept (and appended
    to ``deferred`` for the caller to announce) and the tool joins the set
    the moment the server lists it. A name no running server could ever
    offer — a missing built-in, an unknown namespace — is refused.
    """
    resolved: list[str] = []
    missing: list[str] = []
    ambiguous: list[str] = []
    for name in names:
        found = resolve_name(name, offered)
        if not found and deferred is not None and "." in name \
                and name.split(".", 1)[0] in live and name.split(".", 1)[1]:
            if name not in resolved:
                resolved.append(name)
                deferred.append(name)
        elif not found:
            missing.append(name)
        elif len(found) > 1:
            ambiguous.append(f"{name} (write one of {', '.join(found)})")
        elif found[0] not in resolved:
            resolved.append(found[0])
    problems = []
    if missing:
        problems.append(f"the tool plane does not offer {', '.join(missing)} "
                        "(start the server that has it with --mcp-stdio)")
    if ambiguous:
        problems.append(f"ambiguous short name(s) {'; '.join(ambiguous)}: more than one plane "
                        "offers it, so write the namespace")
    if problems:
        raise EvalkitError(f"{what}: {'; and '.join(problems)}")
    return resolved


def is_code_tool(descriptor: Any) -> bool:
    """A shell, an interpreter or a package installer on this host (by its scopes)."""
    scopes = set(getattr(descriptor, "scopes", ())) | {
        s for extra in getattr(descriptor, "action_scopes", {}).values() for s in extra}
    return bool(scopes & CODE_SCOPES) or bool(getattr(descriptor, "code", False))


def close_over(manifest: Manifest, catalogue: Sequence[Any], sandbox: str,
               deferred: list[str] | None = None) -> frozenset[str] | None:
    """The closed tool set on this plane (None: not closed); refuses at the door.

    Refuses when a named tool is missing or ambiguous, when a manifest closing
    over a code tool does not declare ``sandbox: bwrap``, and when a manifest
    requires bwrap on a run that does not have it. Names a running server may
    still register are kept and listed in ``deferred`` (see ``resolve_names``).
    """
    by_name = {d.name: d for d in catalogue}
    offered = list(by_name)
    live = live_namespaces(catalogue)
    closed: list[str] = []
    for part in manifest.parts:
        where = f"skill {part.name!r}" + (f" ({part.path})" if part.path else "")
        if part.allowed_tools is not None:
            names = resolve_names(part.allowed_tools, offered, what=f"{where} allowed_tools",
                                  live=live, deferred=deferred)
            code = [n for n in names if n in by_name and is_code_tool(by_name[n])]
            if code and part.sandbox != "bwrap":
                raise EvalkitError(f"{where} closes over code tool(s) {', '.join(code)}, which run "
                                   "on this host: the manifest must declare 'sandbox: bwrap'")
            closed += [n for n in names if n not in closed]
        if part.sandbox == "bwrap" and sandbox != "bwrap":
            raise EvalkitError(f"{where} requires the bwrap sandbox, but this run has none "
                               "(bubblewrap is not installed or cannot build its sandbox on this "
                               "host, or --unsandboxed / "
                               "EVALKIT_SANDBOX=none was given)")
    if manifest.allowed_tools is None:
        return None
    return frozenset(closed)
