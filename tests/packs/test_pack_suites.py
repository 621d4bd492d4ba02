"""The three mission packs are gradeable suites with a skill, a README, fixtures and agents."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from evalkit.eval.check import check_suite
from evalkit.eval.staging import fixture_plan, serve_spec
from evalkit.eval.suite import load_suite
from evalkit.grounding import parse_grammar
from evalkit.runtime.backends.scripted import ScriptedBackend
from evalkit.runtime.governance.skills import load_manifest
from tests.packs.conftest import PACKS, SUITES

#: The profile each pack's closed set needs, and whether it runs code on this host.
PROFILE = {"analyst": "dev", "coding": "dev", "research": "research"}
SANDBOX = {"analyst": "bwrap", "coding": "bwrap", "research": "none"}
CLOSED = {
    "analyst": {"fs", "run_python_code", "mission_result"},
    "coding": {"repo_map", "fs", "patch", "verify", "git", "mission_result"},
    "research": {"fetch_page", "mission_result"},
}


@pytest.mark.parametrize("pack", PACKS)
def test_the_pack_is_gradeable(pack: str) -> None:
    result = check_suite(load_suite(SUITES / pack))
    assert result.ok, result.problems
    suite = result.suite
    assert len(suite.missions) >= 8
    assert 3 <= len(suite.split_of("test")) and 0.25 <= len(suite.split_of("test")) / len(
        suite.missions) <= 0.40
    assert set(suite.claimed) == {m.flag for m in suite.missions}  # every claim is captured


@pytest.mark.parametrize("pack", PACKS)
def test_the_pack_has_its_parts(pack: str) -> None:
    folder = SUITES / pack
    suite = load_suite(folder)
    for part in ("SKILL.md", "missions.yaml", "README.md"):
        assert (folder / part).is_file(), part
    assert suite.resolve("fixtures") == folder / "fixtures"
    assert any((folder / "fixtures").iterdir())
    assert suite.extras["profile"] == PROFILE[pack]
    readme = (folder / "README.md").read_text(encoding="utf-8")
    for heading in ("## What it measures", "## What it refuses", "## The profile it needs"):
        assert heading in readme, heading
    assert f"`{PROFILE[pack]}`" in readme


@pytest.mark.parametrize("pack", PACKS)
def test_the_skill_closes_the_tool_set_and_declares_a_grammar(pack: str) -> None:
    manifest = load_manifest(SUITES / pack / "SKILL.md")
    assert manifest.name == pack
    assert set(manifest.allowed_tools or ()) == CLOSED[pack]
    assert manifest.sandbox == SANDBOX[pack]
    assert manifest.grounding is not None and parse_grammar(manifest.grounding).configured
    suite = load_suite(SUITES / pack)
    assert CLOSED[pack] <= set(suite.tools or ())


def test_counts_in_a_coding_answer_ground_only_against_the_test_run() -> None:
    grounding = load_manifest(SUITES / "coding" / "SKILL.md").grounding
    assert grounding is not None and grounding["figures_from"] == ["verify"]


@pytest.mark.parametrize("pack", PACKS)
def test_every_mission_has_a_good_and_a_bad_scripted_agent(pack: str) -> None:
    suite = load_suite(SUITES / pack)
    agents = SUITES / pack / "agents"
    keys = {m.key for m in suite.missions}
    for key in keys:
        assert (agents / f"{key}.yaml").is_file(), f"{pack}: no good agent for {key}"
        assert list(agents.glob(f"{key}.*.yaml")), f"{pack}: no bad agent for {key}"
    for script in sorted(agents.glob("*.yaml")):
        assert script.name.split(".")[0] in keys, f"{script.name} belongs to no mission"
        backend = ScriptedBackend.from_file(script)  # every reply is a well-formed item
        assert backend.model == script.name
        replies = yaml.safe_load(script.read_text(encoding="utf-8"))
        assert replies and all(isinstance(r, (str, dict)) for r in replies)


def test_fixture_for_gives_every_coding_mission_its_own_repository() -> None:
    suite = load_suite(SUITES / "coding")
    plan = fixture_plan(suite, suite.missions)
    assert set(plan) == {m.key for m in suite.missions}
    assert set(plan.values()) == {"ledger", "shapes", "stockroom", "textkit"}


def test_the_research_pack_is_served_on_its_fixed_port() -> None:
    spec = serve_spec(load_suite(SUITES / "research"))
    assert spec == ("pages", (SUITES / "research" / "fixtures").resolve(), 8808)
    for pack in ("analyst", "coding"):
        assert serve_spec(load_suite(SUITES / pack)) is None


def test_prompts_name_no_tool_and_no_undeclared_file(tmp_path: Path) -> None:
    # check already refuses both; this pins that the rule is live for the packs by breaking one.
    text = (SUITES / "coding" / "missions.yaml").read_text(encoding="utf-8")
    broken = tmp_path / "coding"
    broken.mkdir()
    (broken / "missions.yaml").write_text(text.replace(
        "Is this repository's test suite passing right now?",
        "Run verify on notes.txt and say if the suite passes right now."), encoding="utf-8")
    problems = check_suite(load_suite(broken)).problems
    assert any("verify" in p for p in problems)
    assert any("notes.txt" in p for p in problems)
