"""The stub MCP server: deterministic tools over stdio, on the SDK's low-level ``Server``.

Every capability the runtime has gets a tool here to exercise it: plain
calls (``echo``, ``add``, ``multiply``), a tool that always fails
(``fail``), governed reads of named assets (``list_assets``,
``read_asset``), views of fake recorded runs (``list_runs``,
``view_run``), a write with a receipt (``submit``), a slow tool
(``sleep``), a shell served remotely that only knows fixed commands
(``remote_shell``), and a tool that registers another tool mid-run
(``unlock`` → ``vault_read``, announced with
``notifications/tools/list_changed``).

Results carry both a text block and ``structuredContent``; failures are
``isError`` results naming the problem, never protocol errors. Schemas are
written out by hand so the catalogue a suite sees never drifts with a
library version.

Every tool carries honest annotations, because they decide the scopes a
client asks of a run: a tool that only looks is ``readOnlyHint: true``; the
two that change the server's state (``submit`` keeps a receipt, ``unlock``
changes the tool list) are not, and say they only add. Every tool says
``openWorldHint: false``: all the stub serves is its own fixed data (even
``remote_shell``, whose "remote host" is a table of canned answers).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import mcp.types as types
from jsonschema import Draft202012Validator
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.stdio import stdio_server

from evalkit.planes.stub.data import ASSETS, REMOTE_SHELL, RUNS, VAULT

MAX_SLEEP_S = 10.0


def _params(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required if required is not None else list(properties),
        "additionalProperties": False,
    }


_NUMBER = {"type": "number"}

#: Looks and changes nothing: the answer depends only on the arguments and the fixed data
#: (``sleep`` only waits, ``fail`` only refuses, ``remote_shell`` only looks a command up).
_READS = types.ToolAnnotations(read_only_hint=True, open_world_hint=False)
#: ``submit``: every call files one more receipt, never touching an earlier one.
_FILES = types.ToolAnnotations(read_only_hint=False, destructive_hint=False,
                               idempotent_hint=False, open_world_hint=False)
#: ``unlock``: adds a tool to the list; unlocking it again changes nothing more.
_UNLOCKS = types.ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                 idempotent_hint=True, open_world_hint=False)
_ASSET_ID = {"type": "string", "description": "an asset id such as asset.7f3a"}

TOOLS: dict[str, types.Tool] = {t.name: t for t in (
    types.Tool(name="echo", description="Return the text unchanged.",
               input_schema=_params({"text": {"type": "string"}}), annotations=_READS),
    types.Tool(name="add", description="Add two numbers.",
               input_schema=_params({"a": _NUMBER, "b": _NUMBER}), annotations=_READS),
    types.Tool(name="multiply", description="Multiply two numbers.",
               input_schema=_params({"a": _NUMBER, "b": _NUMBER}), annotations=_READS),
    types.Tool(name="fail", description="Always fails, with the reason given.",
               input_schema=_params({"reason": {"type": "string"}}), annotations=_READS),
    types.Tool(name="list_assets", description="List the asset catalogue: id, title and kind.",
               input_schema=_params({}), annotations=_READS),
    types.Tool(name="read_asset", description="Read one asset whole, by id.",
               input_schema=_params({"asset_id": _ASSET_ID}), annotations=_READS),
    types.Tool(name="list_runs", description="List the recorded runs this host keeps.",
               input_schema=_params({}), annotations=_READS),
    types.Tool(name="view_run", description="View one recorded run: objective, outcome, events.",
               input_schema=_params({"run_id": {"type": "string",
                                                "description": "a run id such as run.a1b2c3"}}),
               annotations=_READS),
    types.Tool(name="submit", description="Submit a value for an asset; returns a receipt id.",
               input_schema=_params({"asset_id": _ASSET_ID,
                                     "value": {"type": ["string", "number"]}}),
               annotations=_FILES),
    types.Tool(name="sleep", description=f"Wait some seconds (at most {MAX_SLEEP_S:g}), then answer.",
               input_schema=_params({"seconds": {"type": "number", "minimum": 0,
                                                 "maximum": MAX_SLEEP_S}}),
               annotations=_READS),
    types.Tool(name="remote_shell",
               description="Run a command on the remote stub host. Only a few commands are "
                           "allowed: " + ", ".join(repr(c) for c in REMOTE_SHELL) + ".",
               input_schema=_params({"command": {"type": "string"}}), annotations=_READS),
    types.Tool(name="unlock", description="Unlock a locked tool by name; it appears in the tool "
                                          "list from then on. Lockable: vault_read.",
               input_schema=_params({"name": {"type": "string"}}), annotations=_UNLOCKS),
)}

#: Tools that exist only after ``unlock(name)``.
LOCKED: dict[str, types.Tool] = {
    "vault_read": types.Tool(
        name="vault_read",
        description="Read a sealed vault entry by key (alpha, beta or gamma).",
        input_schema=_params({"key": {"type": "string"}}),
        annotations=_READS,
    ),
}


class Refused(Exception):
    """A call the stub turns down; becomes an ``isError`` result with this message."""


@dataclass
class Reply:
    """A successful answer: the structured payload, and text when it should not be JSON."""

    structured: dict[str, Any]
    text: str | None = None


class StubWorld:
    """One connection's state: what has been unlocked and submitted."""

    def __init__(self) -> None:
        self.unlocked: list[str] = []
        self.submissions: list[dict[str, Any]] = []

    def tools(self) -> dict[str, types.Tool]:
        return {**TOOLS, **{name: LOCKED[name] for name in self.unlocked}}

    async def call(self, name: str, args: dict[str, Any]) -> Reply:
        handler: Callable[[StubWorld, dict[str, Any]], Awaitable[Reply]] = HANDLERS[name]
        return await handler(self, args)


def _asset(asset_id: str) -> dict[str, Any]:
    if asset_id not in ASSETS:
        raise Refused(f"unknown asset {asset_id!r}: no asset has that id (list_assets shows them)")
    return ASSETS[asset_id]


async def _echo(world: StubWorld, args: dict[str, Any]) -> Reply:
    return Reply({"text": args["text"]}, text=args["text"])


async def _add(world: StubWorld, args: dict[str, Any]) -> Reply:
    return Reply({"a": args["a"], "b": args["b"], "result": args["a"] + args["b"]})


async def _multiply(world: StubWorld, args: dict[str, Any]) -> Reply:
    return Reply({"a": args["a"], "b": args["b"], "result": args["a"] * args["b"]})


async def _fail(world: StubWorld, args: dict[str, Any]) -> Reply:
    raise Refused(f"fail: {args['reason']}")


async def _list_assets(world: StubWorld, args: dict[str, Any]) -> Reply:
    assets = [{"id": a["id"], "title": a["title"], "kind": a["kind"]}
              for _, a in sorted(ASSETS.items())]
    return Reply({"assets": assets})


async def _read_asset(world: StubWorld, args: dict[str, Any]) -> Reply:
    return Reply(_asset(args["asset_id"]))


async def _list_runs(world: StubWorld, args: dict[str, Any]) -> Reply:
    runs = [{k: r[k] for k in ("run_id", "objective", "outcome", "steps")}
            for _, r in sorted(RUNS.items())]
    return Reply({"runs": runs})


async def _view_run(world: StubWorld, args: dict[str, Any]) -> Reply:
    run_id = args["run_id"]
    if run_id not in RUNS:
        raise Refused(f"unknown run {run_id!r} (list_runs shows the runs kept here)")
    return Reply(RUNS[run_id])


async def _submit(world: StubWorld, args: dict[str, Any]) -> Reply:
    _asset(args["asset_id"])
    receipt = f"rcpt-{len(world.submissions) + 1:04d}"
    entry = {"receipt": receipt, "asset_id": args["asset_id"], "value": args["value"],
             "accepted": True}
    world.submissions.append(entry)
    return Reply(entry)


async def _sleep(world: StubWorld, args: dict[str, Any]) -> Reply:
    await anyio.sleep(args["seconds"])
    return Reply({"slept": args["seconds"]})


async def _remote_shell(world: StubWorld, args: dict[str, Any]) -> Reply:
    command = " ".join(args["command"].split())
    if command not in REMOTE_SHELL:
        allowed = ", ".join(repr(c) for c in REMOTE_SHELL)
        raise Refused(f"remote_shell refused {args['command']!r}: allowed commands are {allowed}")
    stdout = REMOTE_SHELL[command]
    return Reply({"command": command, "stdout": stdout, "exit_code": 0}, text=stdout)


async def _unlock(world: StubWorld, args: dict[str, Any]) -> Reply:
    name = args["name"]
    if name not in LOCKED:
        raise Refused(f"nothing to unlock named {name!r} (lockable: {', '.join(LOCKED)})")
    newly = name not in world.unlocked
    if newly:
        world.unlocked.append(name)
    return Reply({"unlocked": name, "newly": newly})


async def _vault_read(world: StubWorld, args: dict[str, Any]) -> Reply:
    key = args["key"]
    if key not in VAULT:
        raise Refused(f"no vault entry {key!r} (keys: {', '.join(VAULT)})")
    return Reply({"key": key, "value": VAULT[key]})


HANDLERS: dict[str, Callable[[StubWorld, dict[str, Any]], Awaitable[Reply]]] = {
    "echo": _echo, "add": _add, "multiply": _multiply, "fail": _fail,
    "list_assets": _list_assets, "read_asset": _read_asset, "list_runs": _list_runs,
    "view_run": _view_run, "submit": _submit, "sleep": _sleep, "remote_shell": _remote_shell,
    "unlock": _unlock, "vault_read": _vault_read,
}


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)],
                                is_error=True)


def build_server(world: StubWorld | None = None) -> Server:
    """The stub as an SDK ``Server`` (one world per server: one connection's state)."""
    world = world or StubWorld()

    async def list_tools(ctx: ServerRequestContext, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(world.tools().values()))

    async def call_tool(ctx: ServerRequestContext,
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        name, args = params.name, dict(params.arguments or {})
        tool = world.tools().get(name)
        if tool is None:
            hint = "; call unlock first" if name in LOCKED else ""
            return _error(f"unknown tool {name!r}{hint}")
        problems = [e.message for e in Draft202012Validator(tool.input_schema).iter_errors(args)]
        if problems:
            return _error(f"invalid arguments for {name}: {'; '.join(problems)}")
        try:
            reply = await world.call(name, args)
        except Refused as refused:
            return _error(str(refused))
        if name == "unlock" and reply.structured["newly"]:
            await ctx.session.send_tool_list_changed()
        text = reply.text if reply.text is not None else json.dumps(reply.structured,
                                                                     ensure_ascii=False)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    structured_content=reply.structured)

    return Server("evalkit-stub", version="1", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve() -> None:
    """Serve one client over stdin/stdout until stdin closes."""
    server = build_server()
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    async with stdio_server() as (read, write):
        await server.run(read, write, options)


def main() -> None:
    anyio.run(serve)
