"""MCP tool servers over stdio, through the official ``mcp`` SDK, behind a sync API.

The SDK is async and its sessions are bound to the task that opened them,
so each server is held open by one task on a private event loop in a
background thread; the plane's synchronous ``list_tools``/``call`` hop onto
that loop and wait. ``close()`` (also run at interpreter exit if nobody
called it) asks each holder to leave its ``async with`` blocks, which is
what closes the server's stdin, waits for it and reaps it — no stray
processes, no warnings.

The SDK is imported only when a hub starts: a plane without MCP servers
never pays for it.

A server's environment is *not* the mission's: a tool server is somebody
else's program, and the mission's environment holds the endpoint key and
whatever else the operator exported. A server gets the SDK's short list of
ordinary variables (``HOME``, ``LOGNAME``, ``PATH``, ``SHELL``, ``TERM``,
``USER``), ``PYTHONPATH`` when it is set, and exactly the variables named
with ``--mcp-env NAME[=VALUE]`` (``env`` here) — nothing else: no ``TZ``,
``LANG`` or credentials unless named. docs/GOVERNANCE.md says the same to
operators.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import re
import shlex
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from evalkit.errors import EvalkitError
from evalkit.forkserver.client import relayed
from evalkit.runtime.tools.descriptor import BUILTIN_PLANE, ToolResult
from evalkit.runtime.tools.mcp_scopes import hints_of
from evalkit.store.reader import whole_characters

DEFAULT_START_TIMEOUT_S = 30.0
DEFAULT_CALL_TIMEOUT_S = 60.0
_CLOSE_TIMEOUT_S = 15.0
_NAMED = re.compile(r"([A-Za-z][A-Za-z0-9_-]{0,31})=(.*)", re.DOTALL)


@dataclass(frozen=True)
class McpServerSpec:
    """One ``--mcp-stdio`` value: the namespace its tools get and the argv that starts it."""

    namespace: str
    command: str
    argv: tuple[str, ...]


@dataclass(frozen=True)
class McpTool:
    """One tool as a server lists it (names without the namespace).

    ``hints`` are the behaviour hints of its annotations (``readOnlyHint``…),
    None when the server set none: they decide the tool's scopes.
    """

    name: str
    description: str
    input_schema: dict[str, Any] = field(default_factory=dict)
    hints: dict[str, bool] | None = None


def parse_mcp_specs(values: Sequence[str]) -> list[McpServerSpec]:
    """Namespaces for ``--mcp-stdio`` values: ``mcp``, ``mcp2``, … in order, or ``name=CMD``."""
    specs: list[McpServerSpec] = []
    unnamed = 0
    for value in values:
        match = _NAMED.fullmatch(value.strip())
        if match:
            namespace, command = match.group(1), match.group(2).strip()
        else:
            unnamed += 1
            namespace, command = ("mcp" if unnamed == 1 else f"mcp{unnamed}"), value.strip()
        try:
            argv = tuple(shlex.split(command))
        except ValueError as exc:
            raise EvalkitError(f"--mcp-stdio {value!r} does not parse as a command: {exc}") from None
        if not argv:
            raise EvalkitError(f"--mcp-stdio {value!r} names no command")
        if namespace == BUILTIN_PLANE or any(s.namespace == namespace for s in specs):
            raise EvalkitError(
                f"--mcp-stdio namespace {namespace!r} is taken; name the server another way (NAME=CMD)"
            )
        specs.append(McpServerSpec(namespace, command, argv))
    return specs


def result_of(payload: dict[str, Any]) -> ToolResult:
    """A ``CallToolResult`` (as a JSON dict) as a tool result: text for the model, the dict kept."""
    texts: list[str] = []
    for item in payload.get("content") or []:
        kind = item.get("type")
        if kind == "text":
            texts.append(item.get("text", ""))
        elif kind == "resource":
            resource = item.get("resource") or {}
            texts.append(resource.get("text") or f"[resource {resource.get('uri')}]")
        elif kind in ("image", "audio"):
            texts.append(f"[{kind} {item.get('mimeType')}, {len(item.get('data') or '')} base64 chars]")
        elif kind == "resource_link":
            texts.append(f"[resource link {item.get('uri')}]")
        else:
            texts.append(json.dumps(item, ensure_ascii=False, sort_keys=True))
    text = "\n".join(texts)
    if not texts and payload.get("structuredContent") is not None:
        text = json.dumps(payload["structuredContent"], ensure_ascii=False)
    return ToolResult.of(1 if payload.get("isError") else 0, stdout=text, structured=payload)


# JSON-RPC error codes the SDK uses for its own failures (mcp_types.REQUEST_TIMEOUT, …).
_REQUEST_TIMEOUT = -32001
_CONNECTION_CLOSED = -32000


def _leaf(exc: BaseException) -> BaseException:
    while getattr(exc, "exceptions", None):  # an exception group: its first leaf says it
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return exc


def _code(exc: BaseException) -> int | None:
    code = getattr(_leaf(exc), "code", None)
    return code if isinstance(code, int) else None


def _reason(exc: BaseException) -> str:
    """One sentence for an exception, digging through exception groups."""
    exc = _leaf(exc)
    message = getattr(exc, "message", None)
    if isinstance(message, str) and message:
        return message
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return str(exc) or type(exc).__name__


class _Connection:
    """One server, held open by one task on the hub's loop until ``stop`` is set."""

    def __init__(self, spec: McpServerSpec) -> None:
        self.spec = spec
        self.session: Any = None
        self.stop = asyncio.Event()
        self.ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.done: concurrent.futures.Future[None] | None = None

    async def hold(self, cwd: Path, errlog: TextIO, start_timeout_s: float,
                   env: dict[str, str] | None = None) -> None:
        import anyio
        from mcp import ClientSession, Implementation, StdioServerParameters, stdio_client

        from evalkit import __version__

        extra_env = {k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}
        extra_env.update(env or {})
        argv = relayed(self.spec.argv)  # the stub, forked, where this mission was forked
        params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(cwd),
                                       env=extra_env)
        try:
            async with stdio_client(params, errlog=errlog) as (read, write):
                info = Implementation(name="evalkit", version=__version__)
                async with ClientSession(read, write, client_info=info) as session:
                    with anyio.fail_after(start_timeout_s):
                        await session.initialize()
                    self.session = session
                    self.ready.set_result(None)
                    await self.stop.wait()
        except Exception as exc:
            if not self.ready.done():
                self.ready.set_exception(exc)
        finally:
            self.session = None
            if not self.ready.done():
                self.ready.set_exception(RuntimeError("stopped before it started"))


class _Loop:
    """A private asyncio loop on a daemon thread, and the connections living on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.connections: list[_Connection] = []
        self.closed = False
        self.thread = threading.Thread(target=self.loop.run_forever, name="evalkit-mcp", daemon=True)
        self.thread.start()

    def submit(self, coro: Any) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        """Stop every server, then the loop; idempotent, bounded in time."""
        if self.closed:
            return
        self.closed = True
        deadline = time.monotonic() + _CLOSE_TIMEOUT_S
        for conn in self.connections:
            self.loop.call_soon_threadsafe(conn.stop.set)
        for conn in self.connections:
            if conn.done is not None:
                try:
                    conn.done.result(timeout=max(0.1, deadline - time.monotonic()))
                except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
                    conn.done.cancel()
        try:
            self.submit(self._drain()).result(timeout=5)
        except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError, RuntimeError):
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()

    async def _drain(self) -> None:
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.loop.shutdown_asyncgens()


class McpHub:
    """Every configured MCP server, started together and spoken to synchronously."""

    def __init__(self, specs: Sequence[McpServerSpec], cwd: Path, *,
                 start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
                 call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
                 errlog: TextIO | None = None, env: dict[str, str] | None = None) -> None:
        self.specs = list(specs)
        #: Variables passed to every server beyond the few ordinary ones (``--mcp-env``).
        self.env = dict(env or {})
        self.cwd = Path(cwd)
        self.start_timeout_s = start_timeout_s
        self.call_timeout_s = call_timeout_s
        self.errlog = errlog if errlog is not None else _default_errlog()
        self._loop: _Loop | None = None
        self._conns: dict[str, _Connection] = {}
        self._listed: dict[str, list[McpTool]] = {}

    def start(self) -> dict[str, list[McpTool]]:
        """Start every server and list its tools; raises ``EvalkitError`` naming one that failed."""
        self._loop = loop = _Loop()
        weakref.finalize(self, loop.close)
        for spec in self.specs:
            conn = _Connection(spec)
            loop.connections.append(conn)
            conn.done = loop.submit(conn.hold(self.cwd, self.errlog, self.start_timeout_s,
                                              self.env))
            self._conns[spec.namespace] = conn
        for conn in loop.connections:
            try:
                conn.ready.result(timeout=self.start_timeout_s + 10)
            except Exception as exc:
                self.close()
                if isinstance(_leaf(exc), TimeoutError):
                    reason = f"no answer to 'initialize' within {self.start_timeout_s:g} s"
                elif _code(exc) == _CONNECTION_CLOSED:
                    reason = "it closed the connection before answering 'initialize' (did it exit?)"
                else:
                    reason = _reason(exc)
                raise EvalkitError(
                    f"MCP server {conn.spec.namespace!r} ({conn.spec.command}) did not start: {reason}"
                ) from None
        for spec in self.specs:
            self._listed[spec.namespace] = self._list_one(spec.namespace) or []
        return dict(self._listed)

    def list_tools(self) -> dict[str, list[McpTool]]:
        """Re-list every server's tools; a server that cannot answer keeps its last listing."""
        for namespace in self._conns:
            listed = self._list_one(namespace)
            if listed is not None:
                self._listed[namespace] = listed
        return dict(self._listed)

    def _list_one(self, namespace: str) -> list[McpTool] | None:
        try:
            return self._run(self._list_async(self._conns[namespace]), self.call_timeout_s)
        except Exception:
            return None

    async def _list_async(self, conn: _Connection) -> list[McpTool]:
        import mcp_types

        session = conn.session
        if session is None:
            raise RuntimeError("the server is not running")
        tools: list[McpTool] = []
        cursor: str | None = None
        for _ in range(100):  # a server that paginates forever cannot hang a step boundary
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools += [McpTool(t.name, t.description or "", dict(t.input_schema or {}),
                              hints_of(t.annotations))
                      for t in page.tools]
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    def call(self, namespace: str, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Call one tool; every failure (server gone, timeout, protocol error) is a failing result."""
        conn = self._conns.get(namespace)
        if conn is None:
            return ToolResult.failure(f"no MCP server is namespaced {namespace!r}", None)
        try:
            result = self._run(self._call_async(conn, name, arguments), self.call_timeout_s + 10)
        except concurrent.futures.TimeoutError:
            return ToolResult.failure(
                f"{namespace}.{name}: no answer within {self.call_timeout_s:g} s")
        except Exception as exc:
            if _code(exc) == _REQUEST_TIMEOUT:
                return ToolResult.failure(
                    f"{namespace}.{name}: no answer within {self.call_timeout_s:g} s")
            if _code(exc) == _CONNECTION_CLOSED:
                return ToolResult.failure(
                    f"{namespace}.{name}: the MCP server closed the connection (did it exit?)")
            return ToolResult.failure(f"{namespace}.{name}: MCP call failed: {_reason(exc)}")
        return result_of(result.model_dump(mode="json", by_alias=True, exclude_none=True))

    async def _call_async(self, conn: _Connection, name: str, arguments: dict[str, Any]) -> Any:
        session = conn.session
        if session is None:
            raise RuntimeError("the server is not running")
        # A lone surrogate (half an emoji from the model) is U+FFFD on the wire: UTF-8
        # cannot carry it, and the SDK's writer would fail on it and close the connection.
        return await session.call_tool(name, whole_characters(arguments),
                                       read_timeout_seconds=self.call_timeout_s)

    def _run(self, coro: Any, timeout: float) -> Any:
        if self._loop is None or self._loop.closed:
            coro.close()
            raise RuntimeError("the MCP hub is not running")
        future = self._loop.submit(coro)
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def close(self) -> None:
        """Stop every server and the loop; idempotent."""
        if self._loop is not None:
            self._loop.close()


def _default_errlog() -> TextIO:
    """Where server stderr goes: ours when it is a real file, else nowhere."""
    try:
        sys.stderr.fileno()
        return sys.stderr
    except (AttributeError, OSError, ValueError):
        return open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
