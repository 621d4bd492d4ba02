"""The pytest plugin, run as a user runs it: pytest (pytester) over the committed recordings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ("pytester",)

ROOT = Path(__file__).resolve().parents[1]
STUB = ROOT / "suites" / "stub"
GOOD, BAD = ROOT / "recordings" / "stub" / "good", ROOT / "recordings" / "stub" / "bad"



def _installed() -> bool:
    """Whether an installed evalkit offers the plugin under ``pytest11`` (the README's test
    command installs it), so that pytest loads it by itself."""
    from importlib.metadata import entry_points

    return any(p.value == "evalkit.pytest_plugin" for p in entry_points(group="pytest11"))


@pytest.fixture(autouse=True)
def _this_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    """This checkout's evalkit, and no other plugin loaded by itself: each installed one
    (hypothesis, langsmith, anyio…) costs every pytest process here a second or more, so
    the plugin is named with ``-p``; one test below starts pytest as a user does."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """pytest in a process of its own, as a user starts it, with this checkout's evalkit.

    Its own rootdir and ini file, so evalkit's pyproject.toml (found above the suite and
    runs paths it is given) does not become the user's configuration.
    """
    ini = pytester.makeini("[pytest]\n")
    return pytester.runpytest_subprocess("-p", "evalkit.pytest_plugin", "-p", "no:cacheprovider",
                                         "-c", str(ini),
                                         "--rootdir", str(pytester.path), *args)


def missions(runs: Path, *args: str) -> list[str]:
    return ["--evalkit-suite", str(STUB), "--evalkit-runs", str(runs), *args]


@pytest.mark.slow
def test_every_mission_of_the_good_recordings_is_an_item_that_passes(
        pytester: pytest.Pytester) -> None:
    result = run(pytester, *missions(GOOD), "-v")
    result.assert_outcomes(passed=12)
    result.stdout.fnmatch_lines(["*evalkit[[]stub[]]::chaining PASSED*"])


@pytest.mark.slow
def test_a_failed_verdict_fails_its_item_with_the_reasons_and_checks(
        pytester: pytest.Pytester) -> None:
    result = run(pytester, *missions(BAD))
    result.assert_outcomes(failed=12)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*mission 'boundary' (boundary, test) failed:",
        "*- expects_outcome: ended 'answered'; this mission wants awaiting_approval",
    ])
    assert "Traceback" not in result.stdout.str() and "raise MissionFailed" not in result.stdout.str()


@pytest.mark.slow
def test_k_and_markers_select_by_key_flag_and_half(pytester: pytest.Pytester) -> None:
    run(pytester, *missions(GOOD), "-k", "orientation").assert_outcomes(passed=1)
    run(pytester, *missions(GOOD), "-m", "test").assert_outcomes(passed=4)
    # the flags and halves are registered markers, so --strict-markers takes them
    strict = run(pytester, *missions(GOOD), "--strict-markers", "-m", "test and synthesis")
    strict.assert_outcomes(passed=1)
    run(pytester, *missions(GOOD), "-m", "evalkit and not train").assert_outcomes(passed=4)
    run(pytester, *missions(GOOD), "--evalkit-split", "train").assert_outcomes(passed=8)


@pytest.mark.slow
def test_a_users_own_tests_run_beside_the_missions(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mine="def test_mine():\n    assert True\n")
    run(pytester, *missions(GOOD)).assert_outcomes(passed=13)


@pytest.mark.parametrize(("args", "said"), [
    (["--evalkit-suite", str(STUB)], "ERROR: --evalkit-suite and --evalkit-runs go together*"),
    (["--evalkit-suite", "/nowhere/suite", "--evalkit-runs", str(GOOD)],
     "ERROR: --evalkit-suite: *"),
    (["--evalkit-suite", str(STUB), "--evalkit-runs", "/nowhere/runs"], "ERROR: evalkit: *"),
])
def test_bad_options_are_one_usage_error_and_no_traceback(
        pytester: pytest.Pytester, args: list[str], said: str) -> None:
    result = run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([said])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


@pytest.mark.slow
def test_without_its_options_the_plugin_adds_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mine="def test_mine():\n    assert True\n")
    result = run(pytester, "--strict-markers", "-v")
    result.assert_outcomes(passed=1)
    assert "evalkit[" not in result.stdout.str()


@pytest.mark.slow
def test_loading_the_plugin_imports_nothing_of_evalkit() -> None:
    code = ("import sys, evalkit.pytest_plugin; "
            "print(sorted(m for m in sys.modules if m.startswith('evalkit')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    assert out.strip() == "['evalkit', 'evalkit.pytest_plugin']"


@pytest.mark.slow
def test_the_fixture_scores_for_a_users_own_asserts(pytester: pytest.Pytester) -> None:
    (pytester.path / "suites").symlink_to(ROOT / "suites")
    (pytester.path / "recordings").symlink_to(ROOT / "recordings")
    pytester.makepyfile(test_verdicts=f'''
def test_good(evalkit_score):
    report = evalkit_score("suites/stub", "recordings/stub/good")
    assert report.all_passed and len(report.verdicts) == 12

def test_bad_boundary(evalkit_score):
    report = evalkit_score({str(STUB)!r}, {str(BAD)!r}, split="test")
    verdict = {{v.key: v for v in report.verdicts}}["boundary"]
    assert not verdict.passed
    assert verdict.reasons == ["ended 'answered'; this mission wants awaiting_approval"]
''')
    run(pytester, "test_verdicts.py").assert_outcomes(passed=2)


@pytest.mark.slow
def test_the_installed_evalkit_offers_the_plugin_to_pytest_by_itself(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """As a user gets it: ``pip install evalkit`` and ``pytest --evalkit-suite …``, no ``-p``."""
    assert _installed(), "install evalkit (pip install -e .) so pytest finds its plugin"
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    ini = pytester.makeini("[pytest]\n")
    done = pytester.runpytest_subprocess("-c", str(ini), "--rootdir", str(pytester.path),
                                         "--help")
    assert "--evalkit-suite" in done.stdout.str()


def test_pyproject_registers_the_plugin_under_pytest11() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"evalkit": "evalkit.pytest_plugin"}
