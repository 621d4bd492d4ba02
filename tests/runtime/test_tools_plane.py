"""The plane as a bus: catalogue, validation, dispatch, MCP servers over real stdio."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from evalkit.errors import EvalkitError
from evalkit.planes import stub_command
from evalkit.runtime.tools import BUILTIN_NAMES, ResultStore, ToolPlane, parse_mcp_specs
from evalkit.runtime.tools import plane as plane_module

STUB = stub_command()
STUB_TOOLS = ["add", "echo", "fail", "list_assets", "list_runs", "multiply", "read_asset",
              "remote_shell", "sleep", "submit", "unlock", "view_run"]


def children() -> list[int]:
    """Processes (zombies included) whose parent is this test process."""
    mine = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            mine.append(int(entry))
    return mine


def mcp_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "evalkit-mcp"]


# -- built-ins only ------------------------------------------------------------


def test_builtins_come_in_a_fixed_order(tmp_path: Path) -> None:
    plane = ToolPlane(tmp_path, ResultStore())
    assert [d.name for d in plane.catalogue()] == list(BUILTIN_NAMES)
    subset = ToolPlane(tmp_path, ResultStore(), builtins=["mission_result", "fs"])
    assert [d.name for d in subset.catalogue()] == ["fs", "mission_result"]
    assert subset.dispatch("run_shell_command", {"command": "true"}).exit_code is None


def test_user_fixable_configuration_is_an_evalkit_error(tmp_path: Path) -> None:
    with pytest.raises(EvalkitError, match="no such built-in tool: browser"):
        ToolPlane(tmp_path, ResultStore(), builtins=["fs", "browser"])
    with pytest.raises(EvalkitError, match="is not a directory"):
        ToolPlane(tmp_path / "missing", ResultStore())
    with pytest.raises(EvalkitError, match="namespace 'mcp' is taken"):
        ToolPlane(tmp_path, ResultStore(), mcp_stdio=["a", "mcp=b"])


def test_mcp_specs_are_namespaced_in_order() -> None:
    specs = parse_mcp_specs(["srv one", "data=python -m x --opt=1", "srv two", "srv three"])
    assert [(s.namespace, s.argv) for s in specs] == [
        ("mcp", ("srv", "one")),
        ("data", ("python", "-m", "x", "--opt=1")),
        ("mcp2", ("srv", "two")),
        ("mcp3", ("srv", "three")),
    ]
    for bad, says in [([""], "names no command"), (["builtin=x"], "is taken"),
                      (["a=x", "a=y"], "is taken"), (["'unclosed"], "does not parse")]:
        with pytest.raises(EvalkitError, match=says):
            parse_mcp_specs(bad)


def test_unknown_tools_and_non_object_arguments_are_results(tmp_path: Path) -> None:
    plane = ToolPlane(tmp_path, ResultStore())
    unknown = plane.dispatch("run_shel_command", {"command": "true"})
    assert not unknown.ok and unknown.exit_code is None
    assert unknown.error == "unknown tool 'run_shel_command'; did you mean run_shell_command?"
    nowhere = plane.dispatch("teleport", {})
    assert nowhere.error == "unknown tool 'teleport'; it is not in the catalogue"
    listed = plane.dispatch("fs", ["read"])  # type: ignore[arg-type]
    assert not listed.ok and "must be a JSON object" in listed.error


def test_a_crashing_tool_is_a_result_not_an_exception(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(root: Path, arguments: dict) -> None:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(plane_module, "fs_tool", broken)
    result = ToolPlane(tmp_path, ResultStore()).dispatch("fs", {"action": "list"})
    assert not result.ok and "fs failed inside evalkit: RuntimeError('kaboom')" == result.error


@pytest.mark.slow
@pytest.mark.spawns  # the stdio transport to a spawned server
def test_a_plane_without_mcp_never_imports_the_sdk(tmp_path: Path) -> None:
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from evalkit.runtime.tools import ResultStore, ToolPlane
        with ToolPlane(Path({str(tmp_path)!r}), ResultStore()) as plane:
            plane.refresh()
            plane.dispatch("fs", {{"action": "list"}})
        print(sorted(m for m in sys.modules if m == "mcp" or m.startswith("mcp.")))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout == "[]\n", out.stderr


# -- MCP servers ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.spawns  # the stdio transport to a spawned server
def test_catalogue_mid_run_registration_and_clean_close(tmp_path: Path) -> None:
    before = set(children())
    plane = ToolPlane(tmp_path, ResultStore(), mcp_stdio=[STUB])
    with plane:
        names = [d.name for d in plane.catalogue()]
        assert names == list(BUILTIN_NAMES) + [f"mcp.{n}" for n in STUB_TOOLS]
        assert [d.as_dict() for d in plane.catalogue()] == [d.as_dict() for d in plane.catalogue()]
        echo = plane.descriptor("mcp.echo")
        assert echo is not None
        assert (echo.plane, echo.scopes, echo.code) == ("mcp", ("mcp.call",), False)
        assert echo.parameters["required"] == ["text"]
        assert plane.refresh() is False

        assert plane.dispatch("mcp.vault_read", {"key": "alpha"}).exit_code is None
        unlocked = plane.dispatch("mcp.unlock", {"name": "vault_read"})
        assert unlocked.ok and unlocked.structured["structuredContent"]["newly"] is True
        assert plane.refresh() is True
        names = [d.name for d in plane.catalogue()]
        assert names.index("mcp.vault_read") == names.index("mcp.unlock") + 1
        secret = plane.dispatch("mcp.vault_read", {"key": "alpha"})
        assert secret.ok and secret.structured["structuredContent"]["value"] == "7741-ALPHA"
        assert plane.refresh() is False
        assert len(set(children()) - before) == 1
    plane.close()  # idempotent
    assert set(children()) <= before, "the stub server outlived close()"
    assert not mcp_threads()
    assert plane.dispatch("mcp.echo", {"text": "x"}).error.endswith("not running")
    assert plane.dispatch("fs", {"action": "list"}).ok, "built-ins outlive the MCP servers"
    with pytest.raises(EvalkitError, match="closed"):
        plane.start()


@pytest.mark.slow
@pytest.mark.spawns  # the stdio transport to a spawned server
def test_two_servers_get_mcp_and_mcp2_and_keep_separate_state(tmp_path: Path) -> None:
    with ToolPlane(tmp_path, ResultStore(), mcp_stdio=[STUB, STUB]) as plane:
        planes = [d.plane for d in plane.catalogue()]
        assert planes == ["builtin"] * 4 + ["mcp"] * len(STUB_TOOLS) + ["mcp2"] * len(STUB_TOOLS)
        assert plane.dispatch("mcp2.add", {"a": 2, "b": 3}).structured["structuredContent"] == {
            "a": 2, "b": 3, "result": 5}
        plane.dispatch("mcp2.unlock", {"name": "vault_read"})
        assert plane.refresh() is True
        names = {d.name for d in plane.catalogue()}
        assert "mcp2.vault_read" in names and "mcp.vault_read" not in names
        first = plane.dispatch("mcp.submit", {"asset_id": "asset.7f3a", "value": 1})
        second = plane.dispatch("mcp2.submit", {"asset_id": "asset.7f3a", "value": 1})
        assert first.structured["structuredContent"]["receipt"] == "rcpt-0001"
        assert second.structured["structuredContent"]["receipt"] == "rcpt-0001"
    assert not mcp_threads()


@pytest.mark.slow
@pytest.mark.spawns  # the stdio transport to a spawned server
def test_named_namespace_and_schema_validation_before_the_server(tmp_path: Path) -> None:
    with ToolPlane(tmp_path, ResultStore(), mcp_stdio=[f"assets={STUB}"]) as plane:
        assert plane.descriptor("assets.read_asset") is not None
        bad = plane.dispatch("assets.add", {"a": "two", "b": 3})
        assert not bad.ok and bad.exit_code is None and bad.structured is None
        assert bad.error == "invalid arguments for assets.add: a: 'two' is not of type 'number'"
        missing = plane.dispatch("assets.read_asset", {})
        assert "'asset_id' is a required property" in missing.error


@pytest.mark.slow
@pytest.mark.spawns  # the stdio transport to a spawned server
def test_a_slow_call_times_out_and_the_session_survives(tmp_path: Path) -> None:
    with ToolPlane(tmp_path, ResultStore(), mcp_stdio=[STUB], mcp_call_timeout_s=1) as plane:
        began = time.monotonic()
        slow = plane.dispatch("mcp.sleep", {"seconds": 5})
        assert time.monotonic() - began < 4
        assert not slow.ok and slow.exit_code == 1 and slow.error == "mcp.sleep: no answer within 1 s"
        assert plane.dispatch("mcp.echo", {"text": "still here"}).output == "still here"


def test_half_an_emoji_in_arguments_reaches_the_server_and_the_session_survives(
        tmp_path: Path) -> None:
    """A lone surrogate (a model cut an emoji in half) cannot go over UTF-8: it goes as
    U+FFFD, where it used to make the SDK's writer fail and close the connection."""
    with ToolPlane(tmp_path, ResultStore(), mcp_stdio=[STUB]) as plane:
        half = plane.dispatch("mcp.echo", {"text": "cut \ud83d"})
        assert half.ok and half.output == "cut \ufffd"
        assert plane.dispatch("mcp.echo", {"text": "still here"}).output == "still here"


@pytest.mark.slow
@pytest.mark.spawns  # the stdio transport to a spawned server
@pytest.mark.parametrize(("command", "says"), [
    ("/nonexistent/evalkit-server", "did not start: No such file or directory"),
    (f"{sys.executable} -c pass", "did not start"),
])
def test_a_server_that_does_not_start_is_an_evalkit_error(tmp_path: Path, command: str,
                                                          says: str) -> None:
    plane = ToolPlane(tmp_path, ResultStore(), mcp_stdio=[STUB, command])
    with pytest.raises(EvalkitError, match=says) as caught:
        plane.start()
    assert "'mcp2'" in str(caught.value)
    assert not mcp_threads()
    plane.close()


@pytest.mark.slow
@pytest.mark.spawns  # the stdio transport to a spawned server
def test_an_unclosed_plane_exits_the_interpreter_cleanly(tmp_path: Path) -> None:
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from evalkit.runtime.tools import ResultStore, ToolPlane
        plane = ToolPlane(Path({str(tmp_path)!r}), ResultStore(), mcp_stdio=[{STUB!r}]).start()
        print(plane.dispatch("mcp.echo", {{"text": "bye"}}).output)
    """)
    began = time.monotonic()
    out = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True,
                         text=True, timeout=60)
    assert (out.returncode, out.stdout, out.stderr) == (0, "bye\n", "")
    assert time.monotonic() - began < 20


#: An MCP server (the official SDK's low-level ``Server``) whose ``take`` changes its schema
#: once ``swap`` is called, and whose ``loose`` has a schema no meta-schema accepts.
SHIFTING = textwrap.dedent('''
    import anyio
    import mcp.types as types
    from mcp.server import Server
    from mcp.server.stdio import stdio_server

    swapped = False

    def tools():
        kind = "string" if swapped else "integer"
        return [types.Tool(name="take", input_schema={"type": "object", "required": ["n"],
                                                      "properties": {"n": {"type": kind}}}),
                types.Tool(name="swap", input_schema={"type": "object"}),
                types.Tool(name="loose", input_schema={"type": "object",
                                                       "properties": {"n": {"type": 12}}})]

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=tools())

    async def call_tool(ctx, params):
        global swapped
        swapped = swapped or params.name == "swap"
        text = f"{params.name} ran with {params.arguments}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    async def serve():
        server = Server("shifting", on_list_tools=list_tools, on_call_tool=call_tool)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(serve)
''')


@pytest.mark.slow
@pytest.mark.spawns  # a server of the test's own, spawned
def test_arguments_are_checked_against_the_schema_the_server_lists_now(tmp_path: Path) -> None:
    """A tool's validator is made at its first call (``ToolPlane._check_of``): it must be
    the schema listed at that moment, made again when a refresh brings a new one, and
    absent for a schema its meta-schema refuses (the server judges those calls itself)."""
    server = tmp_path / "shifting.py"
    server.write_text(SHIFTING, encoding="utf-8")
    with ToolPlane(tmp_path, ResultStore(), mcp_stdio=[f"{sys.executable} {server}"]) as plane:
        refused = plane.dispatch("mcp.take", {"n": "seven"})
        assert refused.error == "invalid arguments for mcp.take: n: 'seven' is not of type 'integer'"
        assert plane.dispatch("mcp.take", {"n": 7}).output == "take ran with {'n': 7}"
        assert plane.dispatch("mcp.swap", {}).ok
        assert plane.refresh() is True
        assert plane.dispatch("mcp.take", {"n": "seven"}).output == "take ran with {'n': 'seven'}"
        refused = plane.dispatch("mcp.take", {"n": 7})
        assert refused.error == "invalid arguments for mcp.take: n: 7 is not of type 'string'"
        assert plane.dispatch("mcp.loose", {"n": 7}).output == "loose ran with {'n': 7}"
