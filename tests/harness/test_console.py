"""What ``run`` says as it goes, and running the same command twice.

A person watching a run wants each mission's verdict when it lands — not the
agent's exit code, which is 0 for a mission that failed — and at the end the
list of what failed. And the README's first command must run again into the
same folder without being told to pick another name.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
FOREIGN = ROOT / "tests" / "harness" / "agents" / "foreign.py"


def _suite(path: Path) -> Path:
    missions = [
        {"key": "adds", "flag": "chaining", "prompt": "What is 2 plus 3?",
         "expects_tools": ["mcp.add"]},
        {"key": "wrong", "flag": "chaining", "prompt": "What is 2 plus 3, in words?",
         "answer_must_match": ["(?i)five"]},
        {"key": "silent", "flag": "chaining", "prompt": "What is 2 plus 2?",
         "flags": ["--silent"]},
    ]
    path.write_text(yaml.safe_dump({"name": "console", "tools": ["mcp.add"],
                                    "agent_flags": ["--silent"], "flags": ["chaining"],
                                    "missions": missions}), encoding="utf-8")
    return path


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evalkit.cli", "run", *args, "--", sys.executable, str(FOREIGN)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
             "EVALKIT_HOME": str(tmp_path / "state")})


@pytest.mark.slow
def test_each_mission_is_said_pass_fail_or_infra_with_its_first_reason(tmp_path):
    result = _run(tmp_path, "--suite", str(_suite(tmp_path / "s.yaml")), "--out",
                  str(tmp_path / "out"))
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    said = {line.split()[2]: line for line in lines if line.startswith("[")}
    assert said["adds"].split()[1] == "PASS"
    assert said["wrong"].split()[1] == "FAIL" and "does not match /(?i)five/" in said["wrong"]
    assert said["silent"].split()[1] == "INFRA" and "nothing to say" in said["silent"]
    assert not any(": exit 0 in" in line for line in lines)
    closing = result.stdout[result.stdout.index("failed (2):"):].splitlines()
    assert closing[1].split()[:2] == ["FAIL", "wrong"]
    assert closing[2].split()[:2] == ["INFRA", "silent"]
    assert "\x1b[" not in result.stderr  # no colour codes when not a terminal


@pytest.mark.slow
def test_the_same_command_runs_twice_with_overwrite(tmp_path):
    suite = _suite(tmp_path / "s.yaml")
    out = tmp_path / "out"
    args = ("--suite", str(suite), "--out", str(out), "--overwrite", "--allow-failures")
    assert _run(tmp_path, *args).returncode == 0  # --allow-failures: two missions fail
    first = json.loads((out / "run.json").read_text())["date"]
    (out / "planted.txt").write_text("from the first run")
    again = _run(tmp_path, *args)
    assert again.returncode == 0, again.stderr
    assert not (out / "planted.txt").exists()
    assert json.loads((out / "run.json").read_text())["date"] >= first
    assert not list(tmp_path.glob(".out.replaced-*"))


@pytest.mark.slow
def test_overwrite_refuses_a_folder_evalkit_did_not_write(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("months of work")
    suite = _suite(tmp_path / "s.yaml")
    refused = _run(tmp_path, "--suite", str(suite), "--out", str(out), "--overwrite")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "--overwrite refuses" in refused.stderr and len(refused.stderr.splitlines()) == 1
    assert (out / "thesis.tex").read_text() == "months of work"
    plain = _run(tmp_path, "--suite", str(suite), "--out", str(out))
    assert plain.returncode == 2 and "give --overwrite" in plain.stderr
