"""MCP tools carry scopes: annotations (with the spec's defaults) decide them, an operator may
declare a server's scopes instead (``--mcp-scopes``, a skill's ``mcp_scopes``), and every
decision is named in the catalogue and the audit.

Against two real stdio servers: the shipped stub plane, and ``annotated_server.py`` (FastMCP)
with one tool for each way a server can annotate.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from evalkit.contract import PROFILES
from evalkit.runtime.governance import KNOWN_SCOPES, lowest_profile
from evalkit.runtime.replay.plane import descriptor_of
from evalkit.runtime.tools import Declared, ResultStore, ToolPlane
from evalkit.runtime.tools.mcp_scopes import hints_of, scopes_of
from tests.governance.conftest import (
    STUB,
    RunGoverned,
    answer,
    call,
)

ANNOTATED = shlex.join([sys.executable, str(Path(__file__).with_name("annotated_server.py"))])

# What each tool of annotated_server.py needs, written out from the spec, and whose word it is.
NEEDS: dict[str, tuple[tuple[str, ...], str]] = {
    "peek": (("mcp.call",), "annotations"),
    "note": (("mcp.write",), "annotations"),
    "wipe": (("mcp.write", "mcp.destructive"), "annotations"),
    "lookup": (("mcp.call", "http.read"), "annotations"),
    "stamp": (("mcp.write", "mcp.destructive", "http.read"), "annotations"),
    "bare": (("mcp.write", "mcp.destructive", "http.read"), "default"),
}
#: The weakest profile that may call each.
WEAKEST = {"peek": "safe", "note": "dev", "lookup": "research", "wipe": "ops", "stamp": "ops",
           "bare": "ops"}
SCRIPT = [call("mcp.peek"), call("mcp.note", text="a"), call("mcp.lookup", query="q"),
          call("mcp.stamp"), call("mcp.bare", text="b"), call("mcp.wipe"), call("mcp.peek"),
          answer("done")]
CALLED = ["peek", "note", "lookup", "stamp", "bare", "wipe", "peek"]


# -- the rule, on its own ------------------------------------------------------------------------


@pytest.mark.parametrize(("hints", "scopes"), [
    (None, ("mcp.write", "mcp.destructive", "http.read")),
    ({}, ("mcp.write", "mcp.destructive", "http.read")),
    ({"readOnlyHint": True}, ("mcp.call", "http.read")),
    ({"readOnlyHint": True, "openWorldHint": False}, ("mcp.call",)),
    ({"readOnlyHint": True, "destructiveHint": True, "openWorldHint": False}, ("mcp.call",)),
    ({"readOnlyHint": False, "openWorldHint": False}, ("mcp.write", "mcp.destructive")),
    ({"destructiveHint": False, "openWorldHint": False}, ("mcp.write",)),
    ({"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True,
      "openWorldHint": True}, ("mcp.write", "http.read")),
])
def test_annotations_and_the_spec_defaults_decide_the_scopes(hints: Any, scopes: tuple) -> None:
    assert scopes_of(hints) == scopes


def test_hints_keep_only_the_four_behaviour_hints_as_booleans() -> None:
    assert hints_of(None) is None and hints_of({"title": "x"}) is None
    assert hints_of({"readOnlyHint": "yes", "openWorldHint": False, "title": "t"}) == {
        "openWorldHint": False}
    assert scopes_of(hints_of({"readOnlyHint": "true"})) == (
        "mcp.write", "mcp.destructive", "http.read"), "only a real true makes a tool read-only"


def test_the_new_scopes_belong_to_the_profiles_the_spec_names() -> None:
    assert {"mcp.call", "mcp.write", "mcp.destructive", "http.read"} <= set(KNOWN_SCOPES)
    assert [lowest_profile(s) for s in ("mcp.call", "mcp.write", "http.read",
                                        "mcp.destructive")] == ["safe", "dev", "research", "ops"]


# -- the stub plane -------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_stub_plane_reads_unless_it_changes_its_own_state(tmp_path: Path) -> None:
    from evalkit.planes.stub.server import LOCKED

    with ToolPlane(tmp_path, ResultStore(), mcp_stdio=[STUB]) as plane:
        listed = {d.name[4:]: d for d in plane.catalogue() if d.plane == "mcp"}
    writers = {"submit", "unlock"}
    for name, tool in listed.items():
        assert tool.scopes_from == "annotations", name
        assert tool.annotations is not None and tool.annotations["openWorldHint"] is False, name
        assert tool.scopes == (("mcp.write",) if name in writers else ("mcp.call",)), name
    assert listed["submit"].annotations == {"readOnlyHint": False, "destructiveHint": False,
                                            "idempotentHint": False, "openWorldHint": False}
    assert listed["unlock"].annotations["idempotentHint"] is True
    assert scopes_of(hints_of(LOCKED["vault_read"].annotations)) == ("mcp.call",)


def test_the_stub_suite_grants_a_write_only_to_the_missions_that_write() -> None:
    from evalkit.eval.suite import load_suite
    from evalkit.planes.stub.server import TOOLS

    suite = load_suite(Path(__file__).parents[2] / "suites" / "stub")
    assert suite.extras["profile"] == "safe"
    writing = {f"mcp.{n}" for n, t in TOOLS.items() if not t.annotations.read_only_hint}
    for mission in suite.missions:
        flags = list(mission.flags)
        grants = [flags[i + 1] for i, f in enumerate(flags) if f == "--grant"]
        gated = [flags[i + 1] for i, f in enumerate(flags) if f == "--gate-tool"]
        writes = bool(writing & {*(mission.expects_tools or ()), *gated})
        assert grants == (["mcp.write"] if writes else []), mission.key


@pytest.mark.slow
def test_under_safe_the_stub_reads_and_a_submission_is_denied_naming_dev(
        governed: RunGoverned) -> None:
    script = [call("mcp.read_asset", asset_id="asset.7f3a"),
              call("mcp.submit", asset_id="asset.7f3a", value=12481), answer("x")]
    done = governed(script)
    read, submit = done.results()
    assert read["ok"] and not submit["ok"] and submit["exit_code"] is None
    assert submit["error"] == ("denied under profile 'safe': mcp.write needs --profile dev "
                               "(scopes from mcp.submit's annotations)")
    assert [(a["tool"], a["verdict"], a["scopes"], a["scopes_from"]) for a in done.audit] == [
        ("mcp.read_asset", "allowed", ["mcp.call"], "annotations"),
        ("mcp.submit", "denied", ["mcp.write"], "annotations")]
    granted = governed(script, grants=["mcp.write"])
    assert [r["ok"] for r in granted.results()] == [True, True]
    assert granted.audit[1]["reason"] == "--grant gives mcp.write"
    assert granted.audit[0]["reason"] == "profile 'safe' holds mcp.call"


# -- the annotated FastMCP server, under each profile ----------------------------------------------


def _denial(profile: str, tool: str) -> str | None:
    scopes, source = NEEDS[tool]
    held = PROFILES.index(profile)
    lacking = [s for s in scopes if PROFILES.index(lowest_profile(s)) > held]
    if not lacking:
        return None
    why = (f"scopes from mcp.{tool}'s annotations" if source == "annotations"
           else f"mcp.{tool} carries no annotations: the MCP spec's defaults apply")
    needs = "; ".join(f"{s} needs --profile {lowest_profile(s)}" for s in lacking)
    return f"denied under profile {profile!r}: {needs} ({why})"


@pytest.mark.slow
@pytest.mark.parametrize("profile", PROFILES)
def test_each_annotated_tool_under_each_profile(governed: RunGoverned, profile: str) -> None:
    done = governed(SCRIPT, profile=profile, mcp=[ANNOTATED])
    allowed = [PROFILES.index(WEAKEST[t]) <= PROFILES.index(profile) for t in CALLED]
    results = done.results()
    assert [r["ok"] for r in results] == allowed, [r["error"] for r in results]
    for tool, result in zip(CALLED, results, strict=True):
        assert result["error"] == _denial(profile, tool) or result["ok"], tool
    # a denied write never ran: the server's notes say what really happened
    kept = json.loads(results[-1]["output"])
    wrote = allowed[CALLED.index("note")]
    wiped = allowed[CALLED.index("wipe")]
    assert kept == ([] if wiped or not wrote else ["a"])
    # every decision is audited with the scopes it needed and whose word they were
    assert [(a["tool"], a["verdict"]) for a in done.audit] == [
        (f"mcp.{t}", "allowed" if ok else "denied") for t, ok in zip(CALLED, allowed, strict=True)]
    for line, tool in zip(done.audit, CALLED, strict=True):
        assert (tuple(line["scopes"]), line["scopes_from"]) == NEEDS[tool]
        assert "declared_by" not in line and line["profile"] == profile


@pytest.mark.slow
def test_the_recorded_catalogue_shows_each_tools_scopes_and_replays_whole(
        governed: RunGoverned) -> None:
    done = governed([answer("nothing to do")], mcp=[ANNOTATED])
    catalogue = next(line for line in done.tool_lines if line["call"] == 0)["catalogue"]
    shown = {t["name"][4:]: t for t in catalogue if t["plane"] == "mcp"}
    assert set(shown) == set(NEEDS)
    for name, tool in shown.items():
        assert (tuple(tool["scopes"]), tool["scopes_from"]) == NEEDS[name]
        assert descriptor_of(tool).as_dict() == tool
    assert "annotations" not in shown["bare"]
    assert shown["stamp"]["annotations"] == {"readOnlyHint": False}
    assert shown["lookup"]["annotations"] == {"readOnlyHint": True, "openWorldHint": True}
    builtin = next(t for t in catalogue if t["name"] == "fs")
    assert "scopes_from" not in builtin and "annotations" not in builtin


@pytest.mark.slow
def test_a_declaration_replaces_a_servers_annotations_in_either_direction(
        governed: RunGoverned) -> None:
    declared = {"mcp": Declared(("mcp.call",), "--mcp-scopes"),
                "mcp2": Declared(("mcp.write",), "skill 'notes'")}
    done = governed([call("mcp.wipe"), call("mcp.bare", text="b"), call("mcp2.peek"),
                     answer("x")], mcp=[ANNOTATED, ANNOTATED], mcp_scopes=declared)
    wipe, bare, peek = done.results()
    assert wipe["ok"] and bare["ok"] and not peek["ok"]
    assert peek["error"] == ("denied under profile 'safe': mcp.write needs --profile dev "
                             "(scopes declared by skill 'notes')")
    assert [(a["scopes"], a["scopes_from"], a["declared_by"]) for a in done.audit] == [
        (["mcp.call"], "operator", "--mcp-scopes"), (["mcp.call"], "operator", "--mcp-scopes"),
        (["mcp.write"], "operator", "skill 'notes'")]
