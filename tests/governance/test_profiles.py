"""Capability profiles: each profile against tools needing each scope, deny by default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.contract import PROFILES
from evalkit.errors import EvalkitError
from evalkit.runtime.governance import KNOWN_SCOPES, Governor
from evalkit.runtime.tools import ToolDescriptor
from tests.governance.conftest import RunGoverned, answer, call, clean_env, cli, write_script

# The spec's table, written out independently of the module under test.
SAFE = {"fs.read", "git.read", "verify.run", "mcp.call", "memory.read"}
DEV = SAFE | {"fs.write", "git.write", "python.exec", "shell.exec", "memory.write", "mcp.write"}
RESEARCH = DEV | {"http.read"}
OPS = RESEARCH | {"git.push", "pip.install", "fs.delete", "mcp.destructive"}
HELD = {"safe": SAFE, "dev": DEV, "research": RESEARCH, "ops": OPS}
LOWEST = {**{s: "safe" for s in SAFE}, **{s: "dev" for s in DEV - SAFE},
          **{s: "research" for s in RESEARCH - DEV}, **{s: "ops" for s in OPS - RESEARCH}}


def tool_needing(scope: str) -> ToolDescriptor:
    return ToolDescriptor(name="t", description="", parameters={"type": "object"},
                          scopes=(scope,))


def test_the_known_scopes_are_exactly_the_specs() -> None:
    assert set(KNOWN_SCOPES) == OPS


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("scope", sorted(OPS) + ["custom.scope"])
def test_each_profile_against_a_tool_needing_each_scope(profile: str, scope: str) -> None:
    verdict = Governor(profile).judge(tool_needing(scope), "t", {})
    allowed = profile == "god" or scope in HELD[profile]
    assert verdict.kind == ("allow" if allowed else "deny")
    if not allowed:
        lowest = LOWEST.get(scope, "god")
        assert verdict.reason == f"denied under profile {profile!r}: {scope} needs --profile {lowest}"


def test_a_call_missing_several_scopes_names_each() -> None:
    both = ToolDescriptor(name="t", description="", parameters={}, scopes=("fs.write", "git.push"))
    assert Governor().judge(both, "t", {}).reason == (
        "denied under profile 'safe': fs.write needs --profile dev; git.push needs --profile ops")


def test_fs_write_needs_more_than_fs_read() -> None:
    from evalkit.runtime.tools.builtins import FS

    governor = Governor("safe")
    assert governor.judge(FS, "fs", {"action": "read"}).kind == "allow"
    assert governor.judge(FS, "fs", {"action": "write"}).reason == \
        "denied under profile 'safe': fs.write needs --profile dev"


def test_grants_widen_one_scope_and_refuse_star_and_unknown() -> None:
    governor = Governor("safe", grants=["http.read", "http.read"])
    assert governor.judge(tool_needing("http.read"), "t", {}).kind == "allow"
    assert governor.judge(tool_needing("git.push"), "t", {}).kind == "deny"
    assert governor.granted == ["http.read"] and Governor("dev").granted is None
    for bad, says in (("*", "--grant * is refused"), ("fs.*", "--grant * is refused"),
                      ("root.everything", "no such scope")):
        with pytest.raises(EvalkitError, match=r"--grant"):
            Governor("safe", grants=[bad])
        try:
            Governor("safe", grants=[bad])
        except EvalkitError as exc:
            assert says in exc.message


# -- whole missions --------------------------------------------------------------------------

SCRIPT = [
    call("fs", action="read", path="data.txt"),
    call("fs", action="write", path="out.txt", content="written"),
    call("run_python_code", code="print(6 * 7)"),
    call("run_shell_command", command="echo shell-ran"),
    call("mission_result", handle="r1"),
    answer("done"),
]


@pytest.mark.parametrize("profile", PROFILES)
def test_a_mission_under_each_profile(governed: RunGoverned, tmp_path: Path, profile: str) -> None:
    root = tmp_path / f"root-{profile}"
    root.mkdir()
    (root / "data.txt").write_text("the data\n")
    done = governed(SCRIPT, profile=profile, root=root, servers=0)
    assert done.started["profile"] == profile and "granted" not in done.started
    results = done.results()
    assert len(results) == 5 and done.outcome.outcome == "answered"
    expected_ok = [True, True, True, True, True] if profile != "safe" else \
        [True, False, False, False, True]
    assert [r["ok"] for r in results] == expected_ok, [r["error"] for r in results]
    if profile == "safe":
        assert [r["error"] for r in results if not r["ok"]] == [
            "denied under profile 'safe': fs.write needs --profile dev",
            "denied under profile 'safe': python.exec needs --profile dev",
            "denied under profile 'safe': shell.exec needs --profile dev",
        ]
        assert all(r["exit_code"] is None for r in results if not r["ok"])
        assert not (root / "out.txt").exists()
    else:
        assert (root / "out.txt").read_text() == "written"
        assert results[2]["output"] == "42\n" and results[3]["output"] == "shell-ran\n"
    verdicts = [line["verdict"] for line in done.audit]
    assert verdicts == ["allowed" if ok else "denied" for ok in expected_ok]
    assert all(line["profile"] == profile for line in done.audit)


def test_a_grant_rides_mission_started_and_lets_one_scope_through(governed: RunGoverned) -> None:
    done = governed([call("run_python_code", code="print(1)"),
                     call("run_shell_command", command="echo no"), answer("x")],
                    grants=["python.exec", "fs.write"], servers=0)
    assert done.started["granted"] == ["fs.write", "python.exec"]
    assert [r["ok"] for r in done.results()] == [True, False]
    assert done.audit[0]["granted"] == ["fs.write", "python.exec"]
    assert done.audit[0]["reason"] == "--grant gives python.exec"


@pytest.mark.slow
def test_the_default_profile_is_safe_from_the_command_line(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.json", [call("run_python_code", code="print(1)"),
                                                answer("x")])
    done = cli(tmp_path, "mission", "x", "--script", str(script), "--events", "e.jsonl",
               "--unsandboxed")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    assert records[0]["profile"] == "safe"
    assert records[3]["error"] == "denied under profile 'safe': python.exec needs --profile dev"


@pytest.mark.slow
def test_evalkit_profile_and_grant_from_the_command_line(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.json", [call("run_python_code", code="print(1)"),
                                                answer("x")])
    done = cli(tmp_path, "mission", "x", "--script", str(script), "--events", "e.jsonl",
               "--unsandboxed", "--grant", "http.read",
               env=clean_env(tmp_path, EVALKIT_PROFILE="dev"))
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    assert records[0]["profile"] == "dev" and records[0]["granted"] == ["http.read"]
    assert records[3]["ok"] is True
    for bad in ("*", "nope.scope"):
        refused = cli(tmp_path, "mission", "x", "--script", str(script), "--grant", bad)
        assert refused.returncode == 2 and "--grant" in refused.stderr
        assert "mission_started" not in refused.stdout


@pytest.mark.slow
def test_mcp_tools_need_mcp_call_which_safe_holds(governed: RunGoverned) -> None:
    done = governed([call("mcp.echo", text="hello"), answer("hello")])
    assert done.results()[0]["ok"] and done.audit[0]["scopes"] == ["mcp.call"]
    assert done.audit[0]["reason"] == "profile 'safe' holds mcp.call"
