"""Skill manifests: loading, refusals, composition, the closed set on a live plane."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from evalkit.errors import EvalkitError
from evalkit.runtime.governance import Governor, compose, load_manifest
from evalkit.runtime.governance.skills import GROUNDING_KEYS, KEYS, parse_manifest
from evalkit.runtime.tools import BUILTIN_NAMES, ResultStore, ToolPlane
from tests.governance.conftest import (
    STUB,
    RunGoverned,
    answer,
    call,
    cli,
    needs_bwrap,
    write_script,
)


def skill(tmp_path: Path, name: str, front: str, body: str = "") -> Path:
    path = tmp_path / name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\n{textwrap.dedent(front).strip()}\n---\n{body}", encoding="utf-8")
    return path


def refusal(text: str) -> str:
    with pytest.raises(EvalkitError) as caught:
        parse_manifest(text, path=Path("SKILL.md"))
    return caught.value.message


GROUNDING = """
name: analyst
description: reads assets and adds them up
allowed_tools: [mcp.read_asset, add]
grounding:
  identifier_pattern: '\\basset\\.[0-9a-f]{4}\\b'
  max_repairs: 1
  figures_from: [mcp.add]
  must_cite: {identifiers: 1}
"""


# -- loading ---------------------------------------------------------------------------------


def test_a_manifest_loads_with_its_body_and_raw_grounding(tmp_path: Path) -> None:
    path = skill(tmp_path, "analyst", GROUNDING, "Read the asset first.\n\nThen add.\n")
    manifest = load_manifest(path)
    assert manifest.name == "analyst" and manifest.allowed_tools == ("mcp.read_asset", "add")
    assert manifest.grounding == {"identifier_pattern": r"\basset\.[0-9a-f]{4}\b",
                                  "max_repairs": 1, "figures_from": ["mcp.add"],
                                  "must_cite": {"identifiers": 1}}
    assert manifest.body == "Read the asset first.\n\nThen add.\n"
    assert load_manifest(path.parent) == manifest  # a directory holding SKILL.md
    assert "Skill: analyst" in manifest.prompt() and "Then add." in manifest.prompt()
    bare = parse_manifest("---\nname: bare\n---\n")
    assert bare.allowed_tools is None and bare.grounding is None and bare.sandbox is None


def test_unknown_keys_are_refused_in_one_message() -> None:
    said = refusal("---\nname: x\nallowed-tools: [fs]\nprofile: god\nmodel: big\n---\n")
    assert said.count("unknown key") == 1
    assert "allowed-tools (did you mean allowed_tools?)" in said
    assert "profile" in said and "model" in said and ", ".join(KEYS) in said


@pytest.mark.parametrize(("text", "says"), [
    ("name: x\n", "must start with a '---' line"),
    ("---\nname: x\n", "never closed"),
    ("---\n- a\n---\n", "must be a mapping"),
    ("---\nname: [unclosed\n---\n", "not valid YAML"),
    ("---\ndescription: no name\n---\n", "'name' is required"),
    ("---\nname: x\nallowed_tools: fs\n---\n", "must be a list of tool names"),
    ("---\nname: x\nallowed_tools: [fs, 3]\n---\n", "must be a list of tool names"),
    ("---\nname: x\nsandbox: docker\n---\n", "must be bwrap or none"),
    ("---\nname: x\ngrounding: [a]\n---\n", "'grounding' must be a mapping"),
    ("---\nname: x\ngrounding: {claims_only: true}\n---\n", "unknown key 'claims_only'"),
    ("---\nname: x\ngrounding: {identifier_pattern: '(['}\n---\n", "does not compile"),
    ("---\nname: x\ngrounding: {number_pattern: '\\d+(?= tests)'}\n---\n",
     "number_pattern /\\d+(?= tests)/ uses lookahead, which RE2 cannot match in linear time; "
     "rewrite it without"),
    ("---\nname: x\ngrounding: {max_repairs: -1}\n---\n", "max_repairs"),
    ("---\nname: x\ngrounding: {must_cite: {identifiers: x}}\n---\n", "must_cite"),
    ("---\nname: x\ngrounding: {planes: {compute: {tools: run_python_code}}}\n---\n", "planes"),
])
def test_malformed_manifests_are_refused(text: str, says: str) -> None:
    assert says in refusal(text)


def test_every_grounding_key_of_the_grammar_is_accepted() -> None:
    manifest = parse_manifest(textwrap.dedent("""\
        ---
        name: g
        grounding:
          identifier_pattern: 'run\\.[0-9a-f]+'
          number_pattern: '\\d+'
          ignore: ['2024']
          max_repairs: 2
          must_cite: true
          figures_from: [verify]
          claim_table: true
          planes: {compute: {tools: [run_python_code], claims: [I computed]}}
        ---
        """))
    assert manifest.grounding is not None and set(manifest.grounding) == set(GROUNDING_KEYS)


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EvalkitError, match="no such file"):
        load_manifest(tmp_path / "nope" / "SKILL.md")


# -- composition -----------------------------------------------------------------------------


def test_composition_first_is_primary_and_tools_union(tmp_path: Path) -> None:
    first = load_manifest(skill(tmp_path, "a", "name: a\nallowed_tools: [mcp.echo, fs]",
                                "Body A"))
    second = load_manifest(skill(tmp_path, "b", GROUNDING, "Body B"))
    third = load_manifest(skill(tmp_path, "c", "name: c\nsandbox: bwrap", "Body C"))
    both = compose([first, second, third])
    assert both is not None and both.name == "a" and both.names == ["a", "analyst", "c"]
    assert both.allowed_tools == ("mcp.echo", "fs", "mcp.read_asset", "add")
    assert both.grounding == second.grounding and both.sandbox == "bwrap"
    prompt = both.prompt()
    assert prompt.index("Body A") < prompt.index("Body B") < prompt.index("Body C")
    assert compose([first]) is first and compose([]) is None
    # a manifest that does not close the set never reopens one another closed
    open_one = load_manifest(skill(tmp_path, "d", "name: d"))
    assert compose([open_one, first]).allowed_tools == ("mcp.echo", "fs")
    assert compose([open_one]).allowed_tools is None
    with pytest.raises(EvalkitError, match="two manifests are named 'a'"):
        compose([first, first])


# -- on a live plane ---------------------------------------------------------------------------


@pytest.mark.slow
def test_the_closed_set_is_what_the_model_is_offered(governed: RunGoverned,
                                                     tmp_path: Path) -> None:
    manifest = load_manifest(skill(tmp_path, "analyst", GROUNDING, "Read assets before adding."))
    done = governed([call("mcp.echo", text="not offered"), call("add", a=1, b=2),
                     call("mcp.add", a=1, b=2), answer("3")], manifest=manifest)
    assert done.started["catalogue"] == ["mcp.add", "mcp.read_asset"]
    rejected = done.events("reply_rejected")
    assert [r["tool"] for r in rejected] == ["mcp.echo", "add"]
    assert done.results()[0]["ok"] and done.outcome.outcome == "answered"
    system = done.model_calls[0]["request"]["messages"][0]
    assert system["role"] == "system" and "Skill: analyst" in system["content"]
    assert "Read assets before adding." in system["content"]
    tools_line = json.loads((done.run_dir / "tools.jsonl").read_text().splitlines()[0])
    assert [t["name"] for t in tools_line["catalogue"]] == ["mcp.add", "mcp.read_asset"]


@pytest.mark.slow
def test_a_named_tool_the_plane_lacks_is_refused_listing_every_missing_name(
        tmp_path: Path) -> None:
    manifest = parse_manifest("---\nname: x\nallowed_tools: [fs, other.nope, frobnicate, "
                              "echo, run_pyton_code]\n---\n")
    with ToolPlane(tmp_path, ResultStore(), mcp_stdio=[STUB]) as plane:
        with pytest.raises(EvalkitError) as caught:
            Governor.at_door(plane.catalogue(), manifest=manifest)
    said = caught.value.message
    assert "does not offer other.nope, frobnicate, run_pyton_code" in said
    assert "skill 'x'" in said


@pytest.mark.slow
def test_a_tool_a_running_server_registers_mid_run_is_admitted_when_it_appears(
        governed: RunGoverned, tmp_path: Path) -> None:
    manifest = parse_manifest("---\nname: vault\nallowed_tools: [mcp.unlock, mcp.vault_read, "
                              "mcp.never_registered]\n---\n")
    done = governed([call("mcp.unlock", name="vault_read"), call("mcp.vault_read", key="beta"),
                     answer("0193-BETA")], manifest=manifest, grants=["mcp.write"])
    assert done.governor.deferred == ["mcp.vault_read", "mcp.never_registered"]
    assert done.started["catalogue"] == ["mcp.unlock"]
    assert done.events("step_started")[1]["catalogue"] == ["mcp.unlock", "mcp.vault_read"]
    assert [r["ok"] for r in done.results()] == [True, True]
    assert json.loads(done.results()[1]["output"])["value"] == "0193-BETA"


@pytest.mark.slow
def test_a_short_name_two_planes_offer_is_refused_asking_for_the_namespace(
        tmp_path: Path) -> None:
    manifest = parse_manifest("---\nname: x\nallowed_tools: [echo, mcp2.add]\n---\n")
    with ToolPlane(tmp_path, ResultStore(), mcp_stdio=[STUB, STUB]) as plane:
        with pytest.raises(EvalkitError) as caught:
            Governor.at_door(plane.catalogue(), manifest=manifest)
        assert "echo (write one of mcp.echo, mcp2.echo)" in caught.value.message
        assert "write the namespace" in caught.value.message
        ok = parse_manifest("---\nname: x\nallowed_tools: [mcp2.echo, mcp2.add]\n---\n")
        governor = Governor.at_door(plane.catalogue(), manifest=ok)
        assert [d.name for d in governor.offer(plane.catalogue())] == ["mcp2.add", "mcp2.echo"]


@pytest.mark.parametrize("tool", ["run_shell_command", "run_python_code"])
def test_a_manifest_closing_over_a_code_tool_must_declare_bwrap(tmp_path: Path,
                                                               tool: str) -> None:
    manifest = parse_manifest(f"---\nname: coder\nallowed_tools: [fs, {tool}]\n---\n")
    catalogue = ToolPlane(tmp_path, ResultStore()).catalogue()
    with pytest.raises(EvalkitError, match=f"closes over code tool.*{tool}.*sandbox: bwrap"):
        Governor.at_door(catalogue, manifest=manifest, sandbox="bwrap")
    declared = parse_manifest(f"---\nname: coder\nallowed_tools: [{tool}]\nsandbox: bwrap\n---\n")
    with pytest.raises(EvalkitError, match="requires the bwrap sandbox, but this run has none"):
        Governor.at_door(catalogue, manifest=declared, sandbox="none")
    governor = Governor.at_door(catalogue, manifest=declared, sandbox="bwrap")
    assert [d.name for d in governor.offer(catalogue)] == [tool]


def test_a_manifest_without_code_tools_needs_no_sandbox(tmp_path: Path) -> None:
    manifest = parse_manifest("---\nname: reader\nallowed_tools: [fs, mission_result]\n---\n")
    catalogue = ToolPlane(tmp_path, ResultStore()).catalogue()
    governor = Governor.at_door(catalogue, manifest=manifest, sandbox="none")
    assert [d.name for d in governor.offer(catalogue)] == ["fs", "mission_result"]
    assert set(BUILTIN_NAMES) - {"fs", "mission_result"} == {"run_python_code",
                                                             "run_shell_command"}


@pytest.mark.slow
def test_skills_from_the_command_line(tmp_path: Path) -> None:
    first = skill(tmp_path, "a", "name: a\nallowed_tools: [mission_result]", "Look things up.")
    second = skill(tmp_path, "b", "name: b\nallowed_tools: [fs]")
    script = write_script(tmp_path / "s.json", [call("fs", action="list"), answer("listed")])
    done = cli(tmp_path, "mission", "x", "--script", str(script), "--events", "e.jsonl",
               "--skill", str(first), "--skill", str(second.parent))
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    assert records[0]["catalogue"] == ["fs", "mission_result"]
    assert records[3]["ok"] and records[-1]["outcome"] == "answered"
    meta = json.loads((tmp_path / "runs" / records[0]["run_id"] / "meta.json").read_text())
    assert meta["meta"]["flags"]["skills"] == [str(first), str(second.parent)]
    bad = skill(tmp_path, "bad", "name: bad\nallowed_tools: [mcp.nope, fs, nope]")
    refused = cli(tmp_path, "mission", "x", "--script", str(script), "--skill", str(bad))
    assert refused.returncode == 2 and "does not offer mcp.nope, nope" in refused.stderr
    assert "mission_started" not in refused.stdout
    unknown = skill(tmp_path, "unknown", "name: u\nprompt: hi\ntools: [fs]")
    refused = cli(tmp_path, "mission", "x", "--script", str(script), "--skill", str(unknown))
    assert refused.returncode == 2 and "unknown key(s) prompt" in refused.stderr


@pytest.mark.slow
@needs_bwrap
def test_a_coding_skill_refuses_an_unsandboxed_run_at_the_door(tmp_path: Path) -> None:
    coding = skill(tmp_path, "coding", "name: coding\nallowed_tools: [fs, run_shell_command]\n"
                                       "sandbox: bwrap")
    script = write_script(tmp_path / "s.json", [call("run_shell_command", command="echo hi"),
                                                answer("hi")])
    refused = cli(tmp_path, "mission", "x", "--script", str(script), "--skill", str(coding),
                  "--profile", "dev", "--unsandboxed")
    assert refused.returncode == 2 and "requires the bwrap sandbox" in refused.stderr
    ran = cli(tmp_path, "mission", "x", "--script", str(script), "--skill", str(coding),
              "--profile", "dev", "--events", "e.jsonl")
    assert ran.returncode == 0, ran.stderr
    records = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    assert records[0]["sandbox"] == "bwrap" and records[3]["output"] == "hi\n"
