"""The tool plane: one bus that owns every dispatch.

It holds the catalogue (built-ins first, in their fixed order, then each
MCP server's tools in ``--mcp-stdio`` order, sorted by name within a
server), validates every call's arguments against the tool's JSON schema
before anything runs, and turns every problem — unknown tool, bad
arguments, a tool that crashed — into an ordinary failing ``ToolResult``.
The loop can therefore hand it whatever the model said without a ``try``.

Governance (which scopes a run holds, gates, audit) sits in front of this
bus and reads ``ToolDescriptor.scopes_for``; the plane itself never refuses
on policy. It does say what each MCP tool needs, since only it sees the
server's annotations (``mcp_scopes``): an operator's declaration for a
server (``mcp_scopes=``) stands in for them.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from evalkit.errors import EvalkitError
from evalkit.runtime.tools import builtins as _builtins
from evalkit.runtime.tools import research as _research
from evalkit.runtime.tools.codetools import DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_TIMEOUT_S, CodeRunner
from evalkit.runtime.tools.coding import CODING_NAMES, CodingTools
from evalkit.runtime.tools.descriptor import BUILTIN_PLANE, ResultStore, ToolDescriptor, ToolResult
from evalkit.runtime.tools.fsroot import fs_tool
from evalkit.runtime.tools.mcp_client import (
    DEFAULT_CALL_TIMEOUT_S,
    DEFAULT_START_TIMEOUT_S,
    McpTool,
    parse_mcp_specs,
)
from evalkit.runtime.tools.mcp_scopes import Declared, decide
from evalkit.runtime.tools.sandbox import NoSandbox, Sandbox


class ToolPlane:
    """Built-ins plus MCP servers over stdio, behind ``catalogue``/``refresh``/``dispatch``."""

    def __init__(self, root: Path, results: ResultStore, builtins: list[str] | None = None,
                 mcp_stdio: Sequence[str] = (), sandbox: Sandbox | None = None, *,
                 timeout_s: float = DEFAULT_TIMEOUT_S,
                 max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
                 network: bool = False,
                 mcp_start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
                 mcp_call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
                 mcp_errlog: TextIO | None = None,
                 mcp_env: Mapping[str, str] | None = None,
                 mcp_scopes: Mapping[str, Declared] | None = None) -> None:
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise EvalkitError(f"the mission root {str(root)!r} is not a directory")
        self.results = results
        self.sandbox: Sandbox = sandbox or NoSandbox()
        names = list(_builtins.BUILTIN_NAMES if builtins is None else builtins)
        unknown = [n for n in names if n not in _builtins.DESCRIPTORS]
        if unknown:
            raise EvalkitError(
                f"no such built-in tool: {', '.join(unknown)} "
                f"(built-ins: {', '.join(_builtins.DESCRIPTORS)})"
            )
        self._builtins = [d for n, d in _builtins.DESCRIPTORS.items() if n in names]
        self._specs = parse_mcp_specs(mcp_stdio)
        self._declared = _declarations_for(self._specs, mcp_scopes or {})
        self._code = CodeRunner(self.root, self.sandbox, timeout_s=timeout_s,
                                max_output_bytes=max_output_bytes, network=network)
        self._coding = CodingTools(self.root, self.sandbox, timeout_s=timeout_s,
                                   max_output_bytes=max_output_bytes)
        self._hub_options: dict[str, Any] = {
            "start_timeout_s": mcp_start_timeout_s,
            "call_timeout_s": mcp_call_timeout_s,
            "errlog": mcp_errlog,
            "env": dict(mcp_env or {}),
        }
        self._hub: Any = None
        self._lock = threading.Lock()
        self._started = False
        self._closed = False
        self._listed: dict[str, list[McpTool]] = {}
        self._tools: dict[str, ToolDescriptor] = {}
        self._validators: dict[str, Any] = {}
        self._rebuild()

    # -- life cycle ---------------------------------------------------------

    def start(self) -> ToolPlane:
        """Start the MCP servers (if any) and list their tools; idempotent."""
        if self._closed:
            raise EvalkitError("this tool plane is closed; make a new one")
        if self._started:
            return self
        if self._specs:
            from evalkit.runtime.tools.mcp_client import McpHub  # the SDK loads only here

            hub = McpHub(self._specs, self.root, **self._hub_options)
            self._listed = hub.start()  # closes itself and raises EvalkitError on failure
            self._hub = hub
            self._rebuild()
        self._started = True
        return self

    def close(self) -> None:
        """Stop the MCP servers; idempotent. Built-ins keep working."""
        self._closed = True
        hub, self._hub = self._hub, None
        if hub is not None:
            hub.close()

    def __enter__(self) -> ToolPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- catalogue ----------------------------------------------------------

    def catalogue(self) -> list[ToolDescriptor]:
        """Every offered tool, in a stable order."""
        with self._lock:
            return list(self._tools.values())

    def descriptor(self, name: str) -> ToolDescriptor | None:
        """The descriptor offered under ``name``, if any."""
        with self._lock:
            return self._tools.get(name)

    def refresh(self) -> bool:
        """Re-list the MCP servers' tools (at a step boundary); True when the catalogue changed."""
        hub = self._hub
        if hub is None:
            return False
        before = [d.as_dict() for d in self.catalogue()]
        self._listed = hub.list_tools()
        self._rebuild()
        return [d.as_dict() for d in self.catalogue()] != before

    def _rebuild(self) -> None:
        tools = {d.name: d for d in self._builtins}
        for spec in self._specs:
            for tool in sorted(self._listed.get(spec.namespace, []), key=lambda t: t.name):
                name = f"{spec.namespace}.{tool.name}"
                decided = decide(tool.hints, self._declared.get(spec.namespace))
                tools[name] = ToolDescriptor(name=name, description=tool.description,
                                             parameters=tool.input_schema, scopes=decided.scopes,
                                             plane=spec.namespace, code=False,
                                             scopes_from=decided.source,
                                             declared_by=decided.declared_by,
                                             annotations=tool.hints)
        with self._lock:
            kept = {name: check for name, check in self._validators.items()
                    if name in tools and tools[name].parameters == self._tools[name].parameters}
            self._tools, self._validators = tools, kept

    def _check_of(self, desc: ToolDescriptor) -> Any:
        """The validator of a tool's arguments (None for a schema that cannot be read: the
        server validates its own), made at the tool's first call and kept while its
        schema stays the same. Most of a catalogue is never called, and checking each
        schema against its meta-schema up front was a fifth of a mission's start."""
        with self._lock:
            if desc.name in self._validators and self._tools.get(desc.name) is desc:
                return self._validators[desc.name]
        check = _validator(desc.parameters)
        with self._lock:
            if self._tools.get(desc.name) is desc:
                self._validators[desc.name] = check
        return check

    # -- dispatch -----------------------------------------------------------

    def dispatch(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Validate, then run one call; never raises for the call's sake."""
        with self._lock:
            desc = self._tools.get(name)
        if desc is None:
            return ToolResult.failure(_unknown(name, [d.name for d in self.catalogue()]), None)
        if not isinstance(arguments, dict):
            return ToolResult.failure(
                f"arguments for {name} must be a JSON object, not {type(arguments).__name__}", None)
        check = self._check_of(desc)
        if check is not None:
            problems = _problems(check, arguments)
            if problems:
                return ToolResult.failure(
                    f"invalid arguments for {name}: {'; '.join(problems)}", None)
        try:
            return self._run(desc, arguments)
        except Exception as exc:  # a bug in a tool must not end the mission
            return ToolResult.failure(f"{name} failed inside evalkit: {exc!r}", None)

    def _run(self, desc: ToolDescriptor, arguments: dict[str, Any]) -> ToolResult:
        if desc.plane != BUILTIN_PLANE:
            hub = self._hub
            if hub is None:
                return ToolResult.failure(f"{desc.name}: the MCP servers are not running", None)
            return hub.call(desc.plane, desc.name[len(desc.plane) + 1:], arguments)
        if desc.name == "fs":
            return fs_tool(self.root, arguments)
        if desc.name == "run_python_code":
            return self._code.python(arguments)
        if desc.name == "run_shell_command":
            return self._code.shell(arguments)
        if desc.name in CODING_NAMES:
            return self._coding.dispatch(desc.name, arguments)
        if desc.name == "fetch_page":
            return _research.fetch_page(arguments)
        return _builtins.mission_result(self.results, arguments)


def _declarations_for(specs: Sequence[Any], declared: Mapping[str, Declared]
                      ) -> dict[str, Declared]:
    """The declarations, each for a server of this plane; one naming none is refused."""
    namespaces = [spec.namespace for spec in specs]
    for server, declaration in declared.items():
        if server not in namespaces:
            here = (f"this run's servers are {', '.join(namespaces)}" if namespaces
                    else "this run starts no MCP server")
            raise EvalkitError(f"{declaration.by} names MCP server {server!r}, which is not "
                               f"the namespace of any --mcp-stdio server ({here})")
    return dict(declared)


def _unknown(name: Any, offered: list[str]) -> str:
    close = difflib.get_close_matches(str(name), offered, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}?" if close else "it is not in the catalogue"
    return f"unknown tool {name!r}; {hint}"


def _validator(schema: Any) -> Any:
    """A validator for ``schema`` (draft 2020-12 unless it names another), or None when it
    is not a schema its draft's meta-schema accepts."""
    from jsonschema import exceptions as schema_errors
    from jsonschema import validators

    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except schema_errors.SchemaError:
        return None
    return cls(schema)


def _problems(check: Any, arguments: dict[str, Any]) -> list[str]:
    errors = sorted(check.iter_errors(arguments), key=lambda e: [str(p) for p in e.absolute_path])
    out = []
    for error in errors[:5]:
        where = ".".join(str(p) for p in error.absolute_path)
        out.append(f"{where}: {error.message}" if where else error.message)
    return out
