"""Small suites are welcome: one case of one's own is checked, run and scored.

Below 8 missions the suite's discipline (held-out half, claimed capabilities,
the reader's rubric) is warned about, not refused; ``--strict`` and ``measure``
keep it strict, and a suite of 8 or more is held to it as before.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evalkit.eval.check import SMALL_SUITE, check_path

ROOT = Path(__file__).resolve().parents[1]
FOREIGN = ROOT / "tests" / "harness" / "agents" / "foreign.py"


def _suite(path: Path, n: int = 1, **mission_fields) -> Path:
    missions = [{"key": f"m{i}", "flag": "chaining", "prompt": "What is 2 plus 3?",
                 "expects_tools": ["mcp.add"], **mission_fields} for i in range(n)]
    path.write_text(yaml.safe_dump({"name": "mine", "tools": ["mcp.add"],
                                    "missions": missions}), encoding="utf-8")
    return path


def _evalkit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evalkit.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                               "HOME": str(cwd), "EVALKIT_HOME": str(cwd / "state")})


def test_a_one_mission_suite_is_gradeable_with_warnings(tmp_path):
    result = check_path(_suite(tmp_path / "s.yaml"))
    assert result.ok and result.problems == []
    said = "\n".join(result.warnings)
    for part in ("'must'", "'must_not'", "'because'", "only 0 test missions", "held out (0%)",
                 "no mission captures 10 of the capabilities"):
        assert part in said
    assert "too small for a held-out half" in result.summary


def test_strict_and_a_large_suite_keep_the_discipline(tmp_path):
    small = _suite(tmp_path / "s.yaml")
    assert check_path(small, strict=True).warnings == []
    assert any("test missions" in p for p in check_path(small, strict=True).problems)
    large = check_path(_suite(tmp_path / "l.yaml", SMALL_SUITE))
    assert not large.ok and large.warnings == []
    assert any("'because'" in p for p in large.problems)


def test_what_makes_a_small_suite_ungradeable_is_still_refused(tmp_path):
    result = check_path(_suite(tmp_path / "s.yaml", flag="not_a_capability",
                               prompt="Call mcp.add on 2 and 3"))
    assert not result.ok
    assert any("'flag'" in p for p in result.problems)
    assert any("'prompt'" in p for p in result.problems)


@pytest.mark.slow
def test_check_run_and_score_a_one_mission_suite_from_the_command_line(tmp_path):
    suite = _suite(tmp_path / "s.yaml")
    checked = _evalkit("check", "--suite", str(suite), cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert "warning: mission 'm0' field 'because'" in checked.stderr
    assert "Traceback" not in checked.stderr
    strict = _evalkit("check", "--strict", "--suite", str(suite), cwd=tmp_path)
    assert strict.returncode == 1 and "not gradeable" in strict.stderr

    ran = _evalkit("run", "--suite", str(suite), "--out", str(tmp_path / "out"), "--",
                   sys.executable, str(FOREIGN), cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "too small for a held-out half" in (tmp_path / "out" / "report.md").read_text()
    scored = _evalkit("score", "--suite", str(suite), "--runs", str(tmp_path / "out"),
                      cwd=tmp_path)
    assert scored.returncode == 0 and "too small for a held-out half" in scored.stdout


@pytest.mark.slow
def test_measure_wants_a_held_out_half(tmp_path):
    suite = _suite(tmp_path / "s.yaml")
    measured = _evalkit("measure", "--suite", str(suite), "--out", str(tmp_path / "m"), "--",
                        sys.executable, str(FOREIGN), cwd=tmp_path)
    assert measured.returncode == 1
    assert "only 0 test missions" in measured.stderr and "Traceback" not in measured.stderr
