"""An agent that refuses --skill at startup: rows that only strip the manifest run without it,
noted; rows that need the manifest are skipped. Exercised through the built-in path with the
runtime command pointed at the foreign agent (told to refuse --skill)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evalkit.eval import runner
from tests.harness.conftest import FOREIGN, foreign_suite, invoke, read_json
from tests.harness.test_measure import MANIFEST


@pytest.fixture
def scripted_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(runner, "_runtime", lambda: [*FOREIGN, "--refuse", "--skill"])
    (tmp_path / "SKILL.md").write_text(MANIFEST)
    # The native row runs from scripts shaped for it (agents/native/); the foreign agent
    # behind the runtime command answers alike whichever script it is handed.
    (tmp_path / "agents" / "native").mkdir(parents=True)
    for key in ("t0", "t1", "t2", "t3", "t4", "h0", "h1", "h2"):
        for folder in ("agents", "agents/native"):
            (tmp_path / folder / f"{key}.yaml").write_text("- '{\"answer\": \"x\"}'\n")
    return foreign_suite(tmp_path / "s.yaml", agents="agents", skill="SKILL.md")


@pytest.mark.slow
def test_run_drops_a_refused_skill_and_says_so(scripted_suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = invoke("run", "--suite", scripted_suite, "--out", out, "--jobs", "3")
    assert result.exit_code == 0, result.stderr
    assert "refused --skill" in result.stderr
    run = read_json(out / "run.json")
    assert run["notes"] and "--skill is not available yet" in run["notes"][0]
    assert run["spawn"].count("--skill") == 1  # the --refuse value; no manifest
    argv = read_json(out / "t0" / "command.json")["argv"]
    assert argv.count("--skill") == 1  # only the --refuse value: the manifest was dropped
    assert {v["category"] for v in read_json(out / "report.json")["verdicts"]} == {"pass"}


@pytest.mark.slow
def test_measure_runs_stripping_rows_without_the_manifest_and_skips_grounding_rows(
        scripted_suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "m"
    result = invoke("measure", "--suite", scripted_suite, "--out", out, "--split", "test",
                    "--config", "native", "--config", "grounding", "--jobs", "3")
    assert result.exit_code == 0, result.stderr
    rows = {row["name"]: row for row in read_json(out / "matrix.json")["rows"]}
    for name in ("direct", "native"):
        assert rows[name]["status"] == "ran"
        assert rows[name]["delta"]["skill"] is None and rows[name]["delta"]["manifest"] is None
        assert "refused --skill" in rows[name]["notes"][0]
        assert not (out / name / "skill.md").exists()
    assert rows["grounding"]["status"] == "skipped"
    assert "--skill is not available" in rows["grounding"]["reason"]
    stats = read_json(out / "matrix.json")["statistics"]
    assert stats["direct"]["test"]["counts"]["pass"] == 3
    assert stats["native"]["test"]["counts"]["pass"] == 3
    # Probes run again and a skipped row's missions keep the progress total true: it ends full.
    counts = re.findall(r"^\[(\d+)/(\d+)\] ", result.stderr, re.MULTILINE)
    assert [int(done) for done, _ in counts] == list(range(1, len(counts) + 1))
    assert counts[-1] == (str(len(counts)), str(len(counts))), result.stderr
