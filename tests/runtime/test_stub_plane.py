"""The stub MCP server, tool by tool, over real stdio through the SDK client."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from evalkit.planes import stub_command
from evalkit.planes.stub.data import ASSETS, REMOTE_SHELL, RUNS
from evalkit.runtime.tools import ResultStore, ToolPlane, ToolResult

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolPlane]:
    with ToolPlane(tmp_path_factory.mktemp("stub"), ResultStore(),
                   mcp_stdio=[stub_command()]) as plane:
        yield plane


def call(plane: ToolPlane, tool: str, **arguments: Any) -> ToolResult:
    result = plane.dispatch(f"mcp.{tool}", arguments)
    assert ToolResult.from_record(json.loads(json.dumps(result.as_record()))) == result
    return result


def payload(result: ToolResult) -> Any:
    assert result.ok, result.output
    structured = result.structured["structuredContent"]
    assert result.structured["isError"] is False
    return structured


def failed(result: ToolResult) -> str:
    assert not result.ok and result.exit_code == 1
    assert result.structured["isError"] is True
    assert result.structured["content"][0]["type"] == "text"
    return result.output


def test_echo_add_multiply(plane: ToolPlane) -> None:
    echoed = call(plane, "echo", text="ünïcode ✓")
    assert echoed.output == "ünïcode ✓" and payload(echoed) == {"text": "ünïcode ✓"}
    assert payload(call(plane, "add", a=12000, b=481)) == {"a": 12000, "b": 481, "result": 12481}
    assert payload(call(plane, "add", a=0.5, b=0.25))["result"] == 0.75
    product = call(plane, "multiply", a=12481, b=338.0)
    assert payload(product)["result"] == 4218578.0
    assert json.loads(product.output) == payload(product)


def test_fail_always_fails(plane: ToolPlane) -> None:
    assert failed(call(plane, "fail", reason="on purpose")) == "fail: on purpose"


def test_asset_catalogue(plane: ToolPlane) -> None:
    listed = payload(call(plane, "list_assets"))["assets"]
    assert [a["id"] for a in listed] == sorted(ASSETS)
    assert {"id": "asset.7f3a", "title": "Regional shipments, Q3 2024 (final)",
            "kind": "table"} in listed


def test_read_asset_carries_the_figures(plane: ToolPlane) -> None:
    shipments = call(plane, "read_asset", asset_id="asset.7f3a")
    assert payload(shipments)["totals"] == {"units": 12481}
    assert "12,481" in shipments.output
    assert sum(row["units"] for row in payload(shipments)["rows"]) == 12481
    pricing = call(plane, "read_asset", asset_id="asset.19c2")
    assert '"average_unit_price": 338.0' in pricing.output
    assert payload(pricing)["units_source"] == "asset.7f3a"
    draft = payload(call(plane, "read_asset", asset_id="asset.7f3b"))
    assert (draft["status"], draft["superseded_by"], draft["totals"]["units"]) == (
        "superseded", "asset.7f3a", 12148)


def test_chains_and_absence(plane: ToolPlane) -> None:
    index = payload(call(plane, "read_asset", asset_id="asset.e9d2"))
    assert {"topic": "summary memo", "asset": "asset.5d0e"} in index["entries"]
    memo = payload(call(plane, "read_asset", asset_id="asset.5d0e"))
    assert memo["references"] == ["asset.7f3a", "asset.19c2", "asset.0bad"]
    missing = failed(call(plane, "read_asset", asset_id="asset.0bad"))
    assert "unknown asset 'asset.0bad'" in missing


def test_a_long_asset_read_back_by_path(plane: ToolPlane) -> None:
    sensors = call(plane, "read_asset", asset_id="asset.c4e1")
    assert len(payload(sensors)["rows"]) == 120 and len(sensors.output) > 4000
    handle = plane.results.put(sensors.output)
    got = plane.dispatch("mission_result", {"handle": handle, "path": "rows.3.name"})
    assert got.output == "dogwood-1"
    got = plane.dispatch("mission_result", {"handle": handle, "path": "$.rows[119]"})
    assert json.loads(got.output) == payload(sensors)["rows"][119]


def test_recorded_runs(plane: ToolPlane) -> None:
    runs = payload(call(plane, "list_runs"))["runs"]
    assert [r["run_id"] for r in runs] == sorted(RUNS) == ["run.0a9b8c", "run.a1b2c3", "run.d4e5f6"]
    viewed = payload(call(plane, "view_run", run_id="run.a1b2c3"))
    assert (viewed["outcome"], viewed["steps"]) == ("answered", 3)
    assert viewed["events"][-1] == {"seq": 5, "event": "mission_finished", "outcome": "answered"}
    assert "unknown run 'run.ffffff'" in failed(call(plane, "view_run", run_id="run.ffffff"))


def test_submit_returns_sequential_receipts(plane: ToolPlane) -> None:
    first = payload(call(plane, "submit", asset_id="asset.7f3a", value=12481))
    second = payload(call(plane, "submit", asset_id="asset.19c2", value="338.0"))
    assert first["receipt"] != second["receipt"]
    assert int(second["receipt"][5:]) == int(first["receipt"][5:]) + 1
    assert second == {"receipt": second["receipt"], "asset_id": "asset.19c2", "value": "338.0",
                      "accepted": True}
    assert "unknown asset" in failed(call(plane, "submit", asset_id="asset.nope", value=1))


def test_remote_shell_is_an_allow_list(plane: ToolPlane) -> None:
    year = call(plane, "remote_shell", command="date -u +%Y")
    assert year.output == "2024\n"
    assert payload(year) == {"command": "date -u +%Y", "stdout": "2024\n", "exit_code": 0}
    for command, stdout in REMOTE_SHELL.items():
        assert call(plane, "remote_shell", command=command).output == stdout
    assert call(plane, "remote_shell", command="  uname   -a ").output == REMOTE_SHELL["uname -a"]
    refused = failed(call(plane, "remote_shell", command="rm -rf /"))
    assert refused.startswith("remote_shell refused 'rm -rf /'")
    shell = plane.descriptor("mcp.remote_shell")
    assert shell is not None and shell.code is False, "a remote shell is not code on this host"


def test_unlock_refuses_unknown_names(plane: ToolPlane) -> None:
    assert "nothing to unlock named 'door'" in failed(call(plane, "unlock", name="door"))


def test_the_server_validates_arguments_itself() -> None:
    """A client that skips validation still gets an isError result, not a crash."""

    async def main() -> dict[str, Any]:
        from mcp import ClientSession, StdioServerParameters, stdio_client

        params = StdioServerParameters(command=sys.executable, args=["-m", "evalkit.planes.stub"])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("add", {"a": "x"})
            return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    result = anyio.run(main)
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith("invalid arguments for add:")


def test_unlock_sends_tools_list_changed_and_lists_the_new_tool(tmp_path: Path) -> None:
    async def main() -> tuple[list[str], list[str], list[str]]:
        import mcp.types as types
        from mcp import ClientSession, StdioServerParameters, stdio_client

        seen: list[str] = []

        async def on_message(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                seen.append(message.method)

        params = StdioServerParameters(command=sys.executable, args=["-m", "evalkit.planes.stub"])
        async with stdio_client(params) as (read, write), \
                ClientSession(read, write, message_handler=on_message) as session:
            init = await session.initialize()
            assert init.capabilities.tools is not None and init.capabilities.tools.list_changed
            before = [t.name for t in (await session.list_tools()).tools]
            await session.call_tool("unlock", {"name": "vault_read"})
            with anyio.fail_after(5):
                while not seen:
                    await anyio.sleep(0.01)
            after = [t.name for t in (await session.list_tools()).tools]
            return before, after, seen

    before, after, seen = anyio.run(main)
    assert "vault_read" not in before and "vault_read" in after
    assert seen == ["notifications/tools/list_changed"]
