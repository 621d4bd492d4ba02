"""Descriptors, results, the result store, JSON paths and ``mission_result``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.runtime.tools import ResultStore, ToolDescriptor, ToolPlane, ToolResult, jsonpath


@pytest.fixture
def plane(tmp_path: Path) -> ToolPlane:
    return ToolPlane(tmp_path, ResultStore())


# -- descriptors -------------------------------------------------------------


def test_fs_write_needs_fs_write_and_read_does_not(plane: ToolPlane) -> None:
    fs = plane.descriptor("fs")
    assert fs is not None
    assert fs.scopes_for({"action": "read", "path": "x"}) == ("fs.read",)
    assert fs.scopes_for({"action": "list"}) == ("fs.read",)
    assert fs.scopes_for({"action": "write", "path": "x", "content": ""}) == ("fs.read", "fs.write")


def test_builtin_scopes_and_code_flags(plane: ToolPlane) -> None:
    got = {d.name: (d.scopes, d.code, d.plane) for d in plane.catalogue()}
    assert got == {
        "fs": (("fs.read",), False, "builtin"),
        "run_python_code": (("python.exec",), True, "builtin"),
        "run_shell_command": (("shell.exec",), True, "builtin"),
        "mission_result": ((), False, "builtin"),
    }


def test_as_dict_is_json_and_a_copy(plane: ToolPlane) -> None:
    fs = plane.descriptor("fs")
    assert fs is not None
    shown = fs.as_dict()
    assert set(shown) == {"name", "description", "parameters", "scopes", "plane", "code",
                          "action_scopes"}
    assert shown["action_scopes"] == {"write": ["fs.write"]}
    json.dumps(shown)
    shown["parameters"]["properties"].clear()
    assert fs.parameters["properties"], "as_dict must not hand out the descriptor's own schema"
    plain = ToolDescriptor("t", "d", {"type": "object"}, ("mcp.call",), "mcp").as_dict()
    assert "action_scopes" not in plain


# -- results -----------------------------------------------------------------


@pytest.mark.parametrize("result", [
    ToolResult.success("hello"),
    ToolResult.failure("no such file: 'x'"),
    ToolResult.failure("unknown tool 'x'", None),
    ToolResult.of(3, "partial\n", "Traceback\nValueError: bad\n"),
    ToolResult.of(0, "", "", structured={"content": [], "isError": False}),
    ToolResult.of(None, "", "[evalkit: timed out after 1 s; killed]\n"),
])
def test_a_recorded_result_rebuilds_to_the_same_result(result: ToolResult) -> None:
    record = json.loads(json.dumps(result.as_record()))
    assert set(record) == {"exit_code", "stdout", "stderr", "structured"}
    assert ToolResult.from_record(record) == result


def test_output_is_stdout_then_stderr_and_error_is_the_last_line() -> None:
    result = ToolResult.of(1, "out", "Traceback\nZeroDivisionError: division by zero\n")
    assert result.output == "out\nTraceback\nZeroDivisionError: division by zero\n"
    assert result.error == "ZeroDivisionError: division by zero"
    assert not result.ok
    assert ToolResult.of(2).error == "exit code 2"
    assert ToolResult.of(0, "fine").error is None


def test_result_store_hands_out_handles_in_order() -> None:
    store = ResultStore()
    assert store.put("one") == "r1"
    assert store.put("two") == "r2"
    assert store.get("r2") == "two"
    assert len(store) == 2
    for bad in ("r0", "r3", "r01", "x1", "", "r-1"):
        assert store.get(bad) is None


# -- JSON paths --------------------------------------------------------------

DOC = {"rows": [{"name": f"n{i}", "v": i} for i in range(5)], "a.b": {"c": [7, 8]}, "3": "three"}


@pytest.mark.parametrize(("path", "value"), [
    ("rows.3.name", "n3"),
    ("$.rows[3].name", "n3"),
    ("rows[3]['name']", "n3"),
    ('$["a.b"].c[1]', 8),
    ("rows[-1].v", 4),
    ("$.3", "three"),
    ("$", DOC),
])
def test_json_paths_both_ways(path: str, value: object) -> None:
    assert jsonpath.lookup(DOC, path) == value


@pytest.mark.parametrize(("path", "says"), [
    ("rows.9", "has 5 items; there is no index 9"),
    ("rows.name", "is a list; index it with a number"),
    ("nope", "has no key 'nope'"),
    ("rows.0.name.x", "is a str"),
    ("rows[", "cannot read path"),
])
def test_json_path_misses_name_the_miss(path: str, says: str) -> None:
    with pytest.raises(jsonpath.PathError, match=says.replace("[", r"\[")):
        jsonpath.lookup(DOC, path)


# -- mission_result ----------------------------------------------------------


def test_mission_result_reads_a_path_into_a_stored_json_result(plane: ToolPlane) -> None:
    handle = plane.results.put(json.dumps(DOC))
    got = plane.dispatch("mission_result", {"handle": handle, "path": "rows.3.name"})
    assert got.ok and got.output == "n3"
    got = plane.dispatch("mission_result", {"handle": handle, "path": "$.rows[3]"})
    assert json.loads(got.output) == {"name": "n3", "v": 3}
    got = plane.dispatch("mission_result", {"handle": handle, "path": "rows.3.v"})
    assert got.output == "3"


def test_mission_result_whole_and_sliced(plane: ToolPlane) -> None:
    handle = plane.results.put("abcdefghij")
    assert plane.dispatch("mission_result", {"handle": handle}).output == "abcdefghij"
    sliced = plane.dispatch("mission_result", {"handle": handle, "offset": 3, "length": 4})
    assert sliced.output == "defg"
    past = plane.dispatch("mission_result", {"handle": handle, "offset": 99})
    assert not past.ok and "past the end" in past.error


def test_mission_result_failures_are_results(plane: ToolPlane) -> None:
    missing = plane.dispatch("mission_result", {"handle": "r7"})
    assert not missing.ok and missing.exit_code == 1 and "no stored result 'r7'" in missing.error
    text = plane.results.put("not json")
    not_json = plane.dispatch("mission_result", {"handle": text, "path": "a"})
    assert not not_json.ok and "is not JSON" in not_json.error
    doc = plane.results.put(json.dumps(DOC))
    miss = plane.dispatch("mission_result", {"handle": doc, "path": "rows.9"})
    assert not miss.ok and "no index 9" in miss.error
    bad = plane.dispatch("mission_result", {"handle": "7"})
    assert not bad.ok and bad.exit_code is None and "invalid arguments" in bad.error
