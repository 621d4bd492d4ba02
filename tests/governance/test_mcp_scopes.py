"""MCP tools carry scopes: annotations decide them (a tool that says nothing writes), an operator may
declare a server's scopes instead (``--mcp-scopes``, a skill's ``mcp_scopes``), and every
decision is named in the catalogue and the audit.

Against two real stdio servers: the shipped stub plane, and ``annotated_server.py`` (FastMCP)
with one tool for each way a server can annotate. The ``evalkit mission`` command lines run
in this process (click's runner, in the test's folder with its governed folders, as
``cli`` runs them); their servers are real processes still.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalkit.contract import PROFILES
from evalkit.errors import EvalkitError
from evalkit.runtime.command import mission_command
from evalkit.runtime.governance import KNOWN_SCOPES, compose, lowest_profile
from evalkit.runtime.governance.mcpscopes import declarations, parse_flag
from evalkit.runtime.governance.skills import parse_manifest
from evalkit.runtime.replay.plane import descriptor_of
from evalkit.runtime.tools import Declared, ResultStore, ToolPlane
from evalkit.runtime.tools.mcp_scopes import hints_of, scopes_of
from tests._cli import in_process
from tests.governance.conftest import (
    STUB,
    RunGoverned,
    answer,
    call,
    clean_env,
    read_jsonl,
    write_script,
)

ANNOTATED = shlex.join([sys.executable, str(Path(__file__).with_name("annotated_server.py"))])

# What each tool of annotated_server.py needs, written out from the spec, and whose word it is.
NEEDS: dict[str, tuple[tuple[str, ...], str]] = {
    "peek": (("mcp.call",), "annotations"),
    "note": (("mcp.write",), "annotations"),
    "wipe": (("mcp.write", "mcp.destructive"), "annotations"),
    "lookup": (("mcp.call", "http.read"), "annotations"),
    "stamp": (("mcp.write",), "annotations"),
    "bare": (("mcp.write",), "default"),
}
#: The weakest profile that may call each.
WEAKEST = {"peek": "safe", "note": "dev", "lookup": "research", "wipe": "ops", "stamp": "dev",
           "bare": "dev"}
SCRIPT = [call("mcp.peek"), call("mcp.note", text="a"), call("mcp.lookup", query="q"),
          call("mcp.stamp"), call("mcp.bare", text="b"), call("mcp.wipe"), call("mcp.peek"),
          answer("done")]
CALLED = ["peek", "note", "lookup", "stamp", "bare", "wipe", "peek"]


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``evalkit ARGS`` as ``conftest.cli`` runs it (in ``tmp_path``, the mission root, with
    the governed folders there and no other EVALKIT_ setting), in this process."""
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("EVALKIT_")}
    env.update(clean_env(tmp_path))
    return in_process(args, cwd=tmp_path, env=env)


# -- the rule, on its own ------------------------------------------------------------------------


@pytest.mark.parametrize(("hints", "scopes"), [
    (None, ("mcp.write",)),
    ({}, ("mcp.write",)),
    ({"readOnlyHint": True}, ("mcp.call",)),
    ({"readOnlyHint": True, "openWorldHint": True}, ("mcp.call", "http.read")),
    ({"readOnlyHint": True, "destructiveHint": True, "openWorldHint": False}, ("mcp.call",)),
    ({"readOnlyHint": False, "openWorldHint": False}, ("mcp.write",)),
    ({"destructiveHint": True}, ("mcp.write", "mcp.destructive")),
    ({"readOnlyHint": False, "destructiveHint": True, "openWorldHint": True},
     ("mcp.write", "mcp.destructive", "http.read")),
    ({"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True,
      "openWorldHint": True}, ("mcp.write", "http.read")),
])
def test_annotations_decide_the_scopes_and_silence_means_writing(hints: Any,
                                                                  scopes: tuple) -> None:
    assert scopes_of(hints) == scopes


def test_hints_keep_only_the_four_behaviour_hints_as_booleans() -> None:
    assert hints_of(None) is None and hints_of({"title": "x"}) is None
    assert hints_of({"readOnlyHint": "yes", "openWorldHint": False, "title": "t"}) == {
        "openWorldHint": False}
    assert scopes_of(hints_of({"readOnlyHint": "true"})) == ("mcp.write",), \
        "only a real true makes a tool read-only"


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


@pytest.mark.slow
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
           else f"mcp.{tool} carries no annotations, so it is treated as writing")
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
    wrote, stamped = allowed[CALLED.index("note")], allowed[CALLED.index("stamp")]
    wiped = allowed[CALLED.index("wipe")]
    assert kept == ([] if wiped else ["a"] * wrote + ["stamp"] * stamped)
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


# -- --mcp-scopes on the command line ------------------------------------------------------------


@pytest.mark.slow
def test_mcp_scopes_on_the_command_line_declares_each_server_by_its_namespace(
        tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.json", [call("mcp.peek"), call("notes.wipe"),
                                                call("notes.peek"), answer("x")])
    done = cli(tmp_path, "mission", "tidy up", "--script", str(script), "--events", "e.jsonl",
               "--mcp-stdio", ANNOTATED, "--mcp-stdio", f"notes={ANNOTATED}",
               "--mcp-scopes", "notes=mcp.call", "--mcp-scopes", "mcp=mcp.write",
               "--mcp-scopes", "mcp=mcp.destructive")
    assert done.returncode == 0, done.stderr
    records = read_jsonl(tmp_path / "e.jsonl")
    results = [r for r in records if r["event"] == "tool_result"]
    assert [r["ok"] for r in results] == [False, True, True]
    assert results[0]["error"] == (
        "denied under profile 'safe': mcp.write needs --profile dev; mcp.destructive needs "
        "--profile ops (scopes declared by --mcp-scopes)")
    audit = read_jsonl(Path(records[0]["audit_ref"]))
    assert [(a["tool"], a["verdict"], a["scopes"], a["scopes_from"], a["declared_by"])
            for a in audit] == [
        ("mcp.peek", "denied", ["mcp.write", "mcp.destructive"], "operator", "--mcp-scopes"),
        ("notes.wipe", "allowed", ["mcp.call"], "operator", "--mcp-scopes"),
        ("notes.peek", "allowed", ["mcp.call"], "operator", "--mcp-scopes")]
    run_dir = Path(records[0]["audit_ref"]).parents[1] / "runs" / records[0]["run_id"]
    meta = json.loads((run_dir / "meta.json").read_text())["meta"]
    assert meta["flags"]["mcp_scopes"] == ["notes=mcp.call", "mcp=mcp.write",
                                           "mcp=mcp.destructive"]
    catalogue = read_jsonl(run_dir / "tools.jsonl")[0]["catalogue"]
    assert {t["name"]: t.get("declared_by") for t in catalogue if t["plane"] != "builtin"} == {
        **{f"mcp.{n}": "--mcp-scopes" for n in NEEDS},
        **{f"notes.{n}": "--mcp-scopes" for n in NEEDS}}


BAD_FLAGS = [
    (["--mcp-scopes", "mcp=*"], "--mcp-scopes 'mcp=*': * is refused"),
    (["--mcp-scopes", "*=mcp.call"], "--mcp-scopes '*=mcp.call': * is refused"),
    (["--mcp-scopes", "mcp=mcp.*"], "--mcp-scopes 'mcp=mcp.*': * is refused"),
    (["--mcp-scopes", "mcp=root.all"], "--mcp-scopes 'mcp=root.all': no such scope 'root.all'"),
    (["--mcp-scopes", "mcp"], "--mcp-scopes 'mcp' is not SERVER=SCOPE[,SCOPE]"),
    (["--mcp-scopes", "=mcp.call"], "--mcp-scopes '=mcp.call' is not SERVER=SCOPE[,SCOPE]"),
    (["--mcp-scopes", "mcp= , "], "--mcp-scopes 'mcp= , ': names no scope"),
    (["--mcp-stdio", STUB, "--mcp-scopes", "mcp2=mcp.call"],
     "--mcp-scopes names MCP server 'mcp2', which is not the namespace of any --mcp-stdio "
     "server (this run's servers are mcp)"),
    (["--mcp-scopes", "mcp=mcp.call"],
     "--mcp-scopes names MCP server 'mcp', which is not the namespace of any --mcp-stdio "
     "server (this run starts no MCP server)"),
]


@pytest.mark.parametrize(("flags", "said"), BAD_FLAGS, ids=[" ".join(f) for f, _ in BAD_FLAGS])
def test_a_bad_mcp_scopes_is_refused_in_one_sentence_before_anything_runs(
        tmp_path: Path, flags: list[str], said: str) -> None:
    script = write_script(tmp_path / "s.json", [answer("x")])
    result = CliRunner().invoke(mission_command, ["x", "--script", str(script),
                                                  "--events", str(tmp_path / "e.jsonl"), *flags],
                                env=clean_env(tmp_path))
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith(f"Error: {said}"), result.output
    assert not (tmp_path / "e.jsonl").exists()


# -- the skill manifest's mcp_scopes -------------------------------------------------------------


def test_a_manifest_declares_servers_scopes_and_refuses_what_the_flag_refuses() -> None:
    good = parse_manifest("---\nname: notes\nmcp_scopes: {mcp: [mcp.call], mcp2: [mcp.write, "
                          "mcp.write]}\n---\n")
    assert good.mcp_scopes == {"mcp": ("mcp.call",), "mcp2": ("mcp.write",)}
    for block, says in (("[mcp.call]", "must map each MCP server to a list of scopes"),
                        ("{}", "must map each MCP server to a list of scopes"),
                        ("{mcp: mcp.call}", "mcp_scopes 'mcp' must be a list of scopes"),
                        ("{mcp: ['*']}", "mcp_scopes 'mcp': * is refused"),
                        ("{'*': [mcp.call]}", "mcp_scopes '*': * is refused"),
                        ("{mcp: [nope]}", "mcp_scopes 'mcp': no such scope 'nope'"),
                        ("{mcp: []}", "mcp_scopes 'mcp': names no scope")):
        with pytest.raises(EvalkitError) as caught:
            parse_manifest(f"---\nname: x\nmcp_scopes: {block}\n---\n")
        assert says in caught.value.message, (block, caught.value.message)


def test_skills_compose_their_declarations_and_the_flag_wins_over_them() -> None:
    first = parse_manifest("---\nname: one\nmcp_scopes: {mcp: [mcp.call]}\n---\n")
    second = parse_manifest("---\nname: two\nmcp_scopes: {mcp: [mcp.call], mcp2: [mcp.write]}"
                            "\n---\n")
    both = compose([first, second])
    assert both is not None and both.mcp_scopes == {"mcp": ("mcp.call",), "mcp2": ("mcp.write",)}
    assert declarations({}, both) == {"mcp": Declared(("mcp.call",), "skill 'one'"),
                                      "mcp2": Declared(("mcp.write",), "skill 'two'")}
    assert declarations(parse_flag(["mcp2=mcp.call"]), both)["mcp2"] == Declared(
        ("mcp.call",), "--mcp-scopes")
    other = parse_manifest("---\nname: three\nmcp_scopes: {mcp: [mcp.write]}\n---\n")
    with pytest.raises(EvalkitError, match="skills 'one' and 'three' declare different scopes "
                                           "for MCP server 'mcp'; declare it once"):
        compose([first, other])


@pytest.mark.slow
def test_a_skills_declaration_governs_a_mission_and_the_flag_overrides_it(tmp_path: Path) -> None:
    skill = tmp_path / "SKILL.md"
    skill.write_text("---\nname: notes\nmcp_scopes: {mcp: [mcp.call]}\n---\nKeep notes.\n")
    script = write_script(tmp_path / "s.json", [call("mcp.note", text="a"), answer("x")])
    base = ["mission", "note it", "--script", str(script), "--mcp-stdio", ANNOTATED,
            "--skill", str(skill)]
    as_skill = cli(tmp_path, *base, "--events", "skill.jsonl")
    assert as_skill.returncode == 0, as_skill.stderr
    records = read_jsonl(tmp_path / "skill.jsonl")
    assert [r["ok"] for r in records if r["event"] == "tool_result"] == [True]
    line = read_jsonl(Path(records[0]["audit_ref"]))[0]
    assert (line["scopes"], line["scopes_from"], line["declared_by"]) == (
        ["mcp.call"], "operator", "skill 'notes'")
    overridden = cli(tmp_path, *base, "--mcp-scopes", "mcp=mcp.write", "--events", "flag.jsonl")
    assert overridden.returncode == 0, overridden.stderr
    result = next(r for r in read_jsonl(tmp_path / "flag.jsonl") if r["event"] == "tool_result")
    assert result["error"] == ("denied under profile 'safe': mcp.write needs --profile dev "
                               "(scopes declared by --mcp-scopes)")
    stray = tmp_path / "stray.md"
    stray.write_text("---\nname: stray\nmcp_scopes: {vault: [mcp.call]}\n---\n")
    refused = cli(tmp_path, "mission", "x", "--script", str(script), "--mcp-stdio", ANNOTATED,
                  "--skill", str(stray))
    assert refused.returncode == 2 and refused.stderr.strip() == (
        "Error: skill 'stray' names MCP server 'vault', which is not the namespace of any "
        "--mcp-stdio server (this run's servers are mcp)")
