"""The check registry: one definition per check drives the loader, check, the verdict and diff."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalkit.eval import checks
from evalkit.eval.check import check_path
from evalkit.eval.checks import Check, CheckError, Field, register_check, unregister_check
from evalkit.eval.diff import check_of
from evalkit.eval.mission import CORE_FIELDS, MISSION_FIELDS, Mission
from evalkit.eval.suite import SuiteError, load_suite
from evalkit.eval.summary import RunSummary
from evalkit.eval.verdict import check_names, judge

ROOT = Path(__file__).resolve().parent.parent
GOOD = Path(__file__).parent / "data" / "suites" / "good.yaml"


def test_the_built_in_checks_name_what_verdicts_have_always_named():
    assert check_names()[:15] == (
        "missing", "tampered", "empty_stream", "contract", "unfinished", "expects_tools",
        "forbids_tools", "expects_outcome", "expects_grounded", "answer", "answer_must_match",
        "answer_must_not_match", "answer_pattern", "max_reply_rejected", "must_not_stage")


def test_every_seed_field_is_a_core_field_or_a_built_in_check_s():
    owned = {f.name for f in CORE_FIELDS} | {f.name for c in checks.built_in() for f in c.fields}
    assert set(MISSION_FIELDS) <= owned


def test_a_check_reads_only_facts_a_run_summary_has():
    facts = {f.name for f in dataclasses.fields(RunSummary)}
    for check in checks.registered():
        assert check.reads and set(check.reads) <= facts, check.name


# -- a check registered in code -----------------------------------------------------------


def _no_answer_longer_than(m: Mission, s: RunSummary) -> Iterator[str]:
    if s.answer is not None and len(s.answer) > m.max_answer_chars:
        yield (f"the answer runs to {len(s.answer)} characters; "
               f"this mission allows {m.max_answer_chars}")


def _a_positive_bound(m: Mission, rules: object) -> Iterator[str]:
    if m.max_answer_chars < 1:
        yield f"{m.max_answer_chars} leaves no room for an answer; use 1 or more"


SHORT = Check(
    name="max_answer_chars",
    fields=(Field("max_answer_chars", "int", "int ≥ 1", "longest answer allowed"),),
    judge=_no_answer_longer_than,
    validate=_a_positive_bound,
    reads=("answer",),
    reasons=((r"^the answer runs to \d+ characters", "max_answer_chars"),),
)


@pytest.fixture
def short_answers() -> Iterator[Check]:
    register_check(SHORT)
    try:
        yield SHORT
    finally:
        unregister_check(SHORT.name)


def _suite_with(tmp_path: Path, extra: str) -> Path:
    text = GOOD.read_text().replace("  - key: orient-1\n", f"  - key: orient-1\n{extra}", 1)
    path = tmp_path / "suite.yaml"
    path.write_text(text)
    return path


def test_an_unregistered_check_is_an_unknown_field(tmp_path):
    with pytest.raises(SuiteError) as refused:
        load_suite(_suite_with(tmp_path, "    max_answer_chars: 10\n"))
    assert len(refused.value.problems) == 1
    assert refused.value.problems[0].startswith(
        "mission 'orient-1' field 'max_answer_chars' (line ")
    assert "unknown field; known fields: key, flag, prompt," in refused.value.problems[0]


def test_a_registered_check_is_loaded_checked_judged_and_read_back(tmp_path, short_answers):
    suite = load_suite(_suite_with(tmp_path, "    max_answer_chars: 10\n"))
    mission = suite.mission("orient-1")
    assert mission is not None and mission.max_answer_chars == 10
    assert suite.mission("chain-1").max_answer_chars is None  # not checked
    assert check_path(_suite_with(tmp_path, "    max_answer_chars: 0\n")).problems == [
        "mission 'orient-1' field 'max_answer_chars': 0 leaves no room for an answer; "
        "use 1 or more"]
    with pytest.raises(SuiteError) as refused:
        load_suite(_suite_with(tmp_path, "    max_answer_chars: ten\n"))
    assert "must be an integer, not a string ('ten')" in refused.value.problems[0]
    summary = RunSummary(records=3, started=True, finished=True, outcome="answered",
                         answered=True, answer="a" * 12)
    verdict = judge(mission, summary)
    assert verdict.reasons == ["the answer runs to 12 characters; this mission allows 10"]
    assert verdict.checks == ["max_answer_chars"] and "max_answer_chars" in check_names()
    assert check_of(verdict.reasons[0]) == "max_answer_chars"


def test_a_registered_check_comes_after_the_built_in_ones(short_answers):
    assert checks.registered()[-1] is SHORT
    verdict = judge(Mission("k", "state", "p", max_answer_chars=1, must_not_stage=True),
                    RunSummary(records=3, started=True, finished=True, answered=True,
                               answer="ab", staged=True))
    assert verdict.checks == ["must_not_stage", "max_answer_chars"]


def test_after_unregistering_the_field_is_unknown_again(tmp_path):
    register_check(SHORT)
    unregister_check(SHORT.name)
    with pytest.raises(TypeError, match="max_answer_chars"):
        Mission("k", "state", "p", max_answer_chars=3)


@pytest.mark.parametrize("clash, said", [
    (dataclasses.replace(SHORT, name="expects_tools"), "a check named 'expects_tools' is "
     "registered already"),
    (dataclasses.replace(SHORT, fields=(Field("expects_grounded", "bool", "bool", "x"),)),
     "cannot take the mission field 'expects_grounded': it belongs to check 'expects_grounded'"),
    (dataclasses.replace(SHORT, fields=(Field("prompt", "str", "str", "x"),)),
     "cannot take the mission field 'prompt': it belongs to every mission"),
    (dataclasses.replace(SHORT, fields=(Field("x", "float", "n", "x"),)),  # type: ignore[arg-type]
     "field 'x' has kind 'float'; use one of str, strs, bool, int"),
    (dataclasses.replace(SHORT, fields=()), "names no mission field that sets it"),
    (dataclasses.replace(SHORT, reasons=(("^x", "other"),)), "reads reasons back as 'other'"),
    (dataclasses.replace(SHORT, reasons=(("(", "max_answer_chars"),)), "which does not compile"),
    (dataclasses.replace(SHORT, fields=(Field("line", "int", "int", "x"),)),
     "cannot name a mission field 'line'"),
])
def test_a_check_that_would_clash_is_refused_in_one_sentence(clash, said):
    with pytest.raises(CheckError) as refused:
        register_check(clash)
    assert said in str(refused.value) and "\n" not in str(refused.value)
    assert SHORT.name not in {c.name for c in checks.registered()}


# -- a check installed as a distribution ---------------------------------------------------

PLUGIN = '''\
from evalkit.eval.checks import Check, Field


def judge(mission, summary):
    if summary.tools_called.count("mcp.multiply") > mission.max_multiplies:
        yield f"multiplied more than {mission.max_multiplies} times"


CHECK = Check(name="max_multiplies", judge=judge, reads=("tools_called",),
              fields=(Field("max_multiplies", "int", "int", "most mcp.multiply calls"),))
'''


def _install(site: Path, entry: str, module: str = PLUGIN) -> None:
    """A distribution as an installer leaves it: a module and its ``.dist-info``."""
    (site / "evalkit_plugin_demo.py").write_text(module)
    info = site / "evalkit_plugin_demo-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: evalkit-plugin-demo\n"
                                   "Version: 0.1\n")
    (info / "entry_points.txt").write_text(f"[evalkit.checks]\n{entry}\n")


def _evalkit(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a fresh process that finds the distribution on its path."""
    code = "import sys; from evalkit.cli import main; sys.exit(main())"
    env = {"PYTHONPATH": f"{site}:{ROOT}", "PATH": "/usr/bin:/bin", "HOME": str(site)}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.slow
def test_a_check_installed_under_the_entry_point_group_is_registered(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _install(site, "max_multiplies = evalkit_plugin_demo:CHECK")
    suite = _suite_with(tmp_path, "    max_multiplies: 0\n")
    done = _evalkit(site, "check", "--suite", str(suite))
    assert done.returncode == 0, done.stderr
    assert "is gradeable" in done.stdout
    runs = ROOT / "recordings" / "stub" / "good"
    stub = ROOT / "suites" / "stub" / "missions.yaml"
    strict = tmp_path / "stub.yaml"
    strict.write_text(stub.read_text().replace("  - key: chaining\n",
                                               "  - key: chaining\n    max_multiplies: 0\n", 1))
    scored = _evalkit(site, "score", "--suite", str(strict), "--runs", str(runs), "--json")
    assert scored.returncode == 1, scored.stderr
    assert '"multiplied more than 0 times"' in scored.stdout
    assert '"max_multiplies"' in scored.stdout
    # Without the distribution, the same suite names an unknown field.
    (site / "evalkit_plugin_demo-0.1.dist-info" / "entry_points.txt").write_text("")
    refused = _evalkit(site, "check", "--suite", str(suite))
    assert refused.returncode == 1 and "field 'max_multiplies'" in refused.stderr
    assert "unknown field" in refused.stderr


@pytest.mark.slow
def test_a_broken_plugin_is_one_sentence_not_a_traceback(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _install(site, "broken = evalkit_plugin_demo:CHECK", module="raise ImportError('no numpy')\n")
    done = _evalkit(site, "check", "--suite", str(GOOD))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "Error: the check 'broken' (evalkit_plugin_demo:CHECK, entry point evalkit.checks) "
        "cannot be loaded: ImportError: no numpy")
