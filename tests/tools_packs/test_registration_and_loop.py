"""The pack tools are opt-in built-ins, and they work through the real mission loop."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalkit.errors import EvalkitError
from evalkit.planes.pages import PagesServer
from evalkit.runtime import Run, ScriptedBackend
from evalkit.runtime.tools import BUILTIN_NAMES, NoSandbox, ResultStore, ToolPlane
from evalkit.runtime.tools.builtins import DESCRIPTORS, OPT_IN_NAMES
from evalkit.store.runstore import RunStore
from evalkit.store.sink import EventSink
from tests.runtime.conftest import Mission, check_recording, read_jsonl


def test_default_catalogue_is_unchanged(tmp_path: Path) -> None:
    plane = ToolPlane(tmp_path, ResultStore())
    assert [d.name for d in plane.catalogue()] == list(BUILTIN_NAMES) == [
        "fs", "run_python_code", "run_shell_command", "mission_result"]
    assert all("network" not in d.as_dict() for d in plane.catalogue())


def test_pack_tools_are_offered_only_by_name(tmp_path: Path) -> None:
    assert OPT_IN_NAMES == ("repo_map", "patch", "verify", "git", "fetch_page")
    everything = ToolPlane(tmp_path, ResultStore(), builtins=list(DESCRIPTORS))
    assert [d.name for d in everything.catalogue()] == [
        "fs", "run_python_code", "run_shell_command", "repo_map", "patch", "verify", "git",
        "fetch_page", "mission_result"]
    coding = ToolPlane(tmp_path, ResultStore(), builtins=["git", "verify", "patch", "repo_map"])
    assert [d.name for d in coding.catalogue()] == ["repo_map", "patch", "verify", "git"]
    assert coding.dispatch("fetch_page", {"url": "http://127.0.0.1/"}).exit_code is None
    with pytest.raises(EvalkitError, match="no such built-in tool: browse .*fetch_page"):
        ToolPlane(tmp_path, ResultStore(), builtins=["browse"])


def test_scopes_and_flags(tmp_path: Path) -> None:
    plane = ToolPlane(tmp_path, ResultStore(), builtins=list(OPT_IN_NAMES))
    found = {d.name: (d.scopes_for({}), d.code, d.network) for d in plane.catalogue()}
    assert found == {
        "repo_map": (("fs.read",), False, False),
        "patch": (("fs.write",), False, False),
        "verify": (("verify.run",), True, False),
        "git": (("git.read",), False, False),
        "fetch_page": (("http.read",), False, True),
    }
    for desc in plane.catalogue():
        schema = desc.as_dict()["parameters"]
        assert schema["type"] == "object" and schema["additionalProperties"] is False


def test_arguments_are_validated_first(tmp_path: Path) -> None:
    plane = ToolPlane(tmp_path, ResultStore(), builtins=list(OPT_IN_NAMES))
    for name, arguments in [("repo_map", {"max_files": 0}), ("patch", {"path": 3}),
                            ("verify", {"paths": "tests"}), ("git", {}),
                            ("git", {"action": "log", "extra": 1}), ("fetch_page", {})]:
        result = plane.dispatch(name, arguments)
        assert result.exit_code is None and result.error.startswith(
            f"invalid arguments for {name}: "), (name, arguments)


# -- the real loop -------------------------------------------------------------------------


def call(tool: str, **arguments: Any) -> dict[str, str]:
    return {"content": json.dumps({"tool": tool, "arguments": arguments})}


def answer(text: str) -> dict[str, str]:
    return {"content": json.dumps({"answer": text})}


@pytest.fixture(autouse=True)
def audit_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALKIT_AUDIT", str(tmp_path / "audit"))  # not the checkout's .evalkit/


def run_mission(tmp_path: Path, root: Path, builtins: list[str], script: list[Any],
                objective: str, profile: str) -> Mission:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script), encoding="utf-8")
    store = RunStore(tmp_path / "runs")
    events = tmp_path / "events.jsonl"
    results = ResultStore()
    with ToolPlane(root=root, results=results, builtins=builtins,
                   sandbox=NoSandbox()) as plane, EventSink.open(str(events)) as sink:
        outcome = Run(ScriptedBackend.from_file(path), plane, store=store, sink=sink,
                      results=results, profile=profile).run(objective)
    done = Mission(outcome, read_jsonl(events), store.path_of(outcome.run_id))
    check_recording(done)
    return done


@pytest.mark.slow
def test_a_coding_mission_through_the_loop(tmp_path: Path,
                                           staged: Callable[[str], Path]) -> None:
    root = staged("textkit")
    done = run_mission(tmp_path, root, ["repo_map", "patch", "verify", "git", "mission_result"], [
        call("verify"),
        call("patch", path="textkit/slug.py", old='r"[^a-z0-9]"', new='r"[^a-z0-9]+"'),
        call("verify"),
        call("git", action="diff", args=["--stat"]),
        answer("Fixed slugify; the suite went from 1 failed, 2 passed to 3 passed."),
    ], "make the red suite green and report both counts", profile="dev")
    assert done.outcome.outcome == "answered"
    results = done.events("tool_result")
    assert [(r["tool"], r["ok"], r["exit_code"]) for r in results] == [
        ("verify", False, 1), ("patch", True, 0), ("verify", True, 0), ("git", True, 0)]
    assert results[0]["output"].rstrip().splitlines()[-1].startswith("1 failed, 2 passed in ")
    assert results[2]["output"].rstrip().splitlines()[-1].startswith("3 passed in ")
    lines = [line for line in done.tool_lines if line["call"] > 0]
    assert lines[2]["result"]["structured"]["passed"] == 3
    catalogue = [d["name"] for d in done.tool_lines[0]["catalogue"]]
    assert catalogue == ["repo_map", "patch", "verify", "git", "mission_result"]


@pytest.mark.slow
def test_a_research_mission_reads_past_the_cut(tmp_path: Path, pages: PagesServer) -> None:
    root = tmp_path / "root"
    root.mkdir()
    url = pages.url + "inspection-log-2023.html"
    done = run_mission(tmp_path, root, ["fetch_page", "mission_result"], [
        call("fetch_page", url=url),
        call("mission_result", handle="r1", offset=11600, length=400),
        answer("Total licensed abstraction in 2023 was 27,365 megalitres."),
    ], "how much water was abstracted under licence in 2023?", profile="research")
    fetched, more = done.events("tool_result")
    assert fetched["tool"] == "fetch_page" and fetched["truncated"] is True
    assert "27,365" not in done.model_calls[1]["request"]["messages"][-1]["content"]
    assert more["tool"] == "mission_result" and "27,365 megalitres" in more["output"]
    assert done.outcome.answer == "Total licensed abstraction in 2023 was 27,365 megalitres."
