"""The public API, used as a program would use it: ``from evalkit import …``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import evalkit
from evalkit import (
    Check,
    EvalkitError,
    Field,
    ScoreReport,
    Verdict,
    check,
    ingest,
    load_suite,
    query,
    register_check,
    runs_df,
    score,
    verdicts_df,
)
from evalkit.cli import main
from evalkit.eval.checks import unregister_check
from evalkit.pricing import EXAMPLE

ROOT = Path(__file__).resolve().parent.parent
STUB = ROOT / "suites" / "stub"
GOOD_RUNS = ROOT / "recordings" / "stub" / "good"


def test_importing_evalkit_loads_nothing_else_of_it():
    code = ("import sys, evalkit; "
            "print(sorted(m for m in sys.modules if m.startswith('evalkit')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert done.stdout.strip() == "['evalkit']", done.stderr


def test_every_public_name_is_there_and_listed():
    assert {"load_suite", "check", "score", "ingest", "query", "runs_df", "verdicts_df",
            "register_check", "Check", "Verdict", "ScoreReport"} <= set(evalkit.__all__)
    for name in evalkit.__all__:
        assert getattr(evalkit, name) is not None, name
    with pytest.raises(AttributeError):
        evalkit.no_such_thing  # noqa: B018


def test_check_and_score_a_shipped_suite_from_its_recordings():
    suite = load_suite(STUB)
    assert check(suite).ok and check(STUB).summary.startswith("suite 'stub' is gradeable")
    report = score(STUB, runs=GOOD_RUNS, pricing=EXAMPLE)
    assert isinstance(report, ScoreReport) and report.all_passed
    assert all(isinstance(v, Verdict) for v in report.verdicts)
    # What the library returns is what the CLI wrote into the committed report (which
    # prices the recorded tokens with the example prices, recordings/README.md says).
    assert report.to_dict() == json.loads((GOOD_RUNS / "report.json").read_text())
    assert score(suite, runs=GOOD_RUNS, pricing=EXAMPLE).to_dict() == report.to_dict()


def test_score_refuses_a_suite_that_cannot_be_graded(tmp_path):
    broken = tmp_path / "s.yaml"
    broken.write_text((STUB / "missions.yaml").read_text().replace("flag: chaining",
                                                                   "flag: teleport", 1))
    with pytest.raises(EvalkitError) as refused:
        score(broken, runs=GOOD_RUNS)
    assert refused.value.exit_code == 1
    assert "is not gradeable (1 problem); nothing scored:" in str(refused.value)


def test_a_tampered_recording_is_still_caught(tmp_path):
    import shutil

    runs = tmp_path / "good"
    shutil.copytree(GOOD_RUNS, runs)
    events = runs / "chaining" / "events.jsonl"
    events.write_text(events.read_text().replace("4,218,578", "4,218,579"))
    report = score(STUB, runs=runs)
    chaining = next(v for v in report.verdicts if v.key == "chaining")
    assert chaining.checks == ["tampered"] and not report.all_passed
    assert next(v for v in score(STUB, runs=runs, verify=False).verdicts
                if v.key == "chaining").checks != ["tampered"]


@pytest.mark.slow
def test_the_tables_as_data_frames_with_arrow_types(tmp_path):
    runs = runs_df(GOOD_RUNS)
    assert isinstance(runs, pd.DataFrame) and len(runs) == 24  # each mission's stream twice
    assert all(isinstance(t, pd.ArrowDtype) for t in runs.dtypes)
    verdicts = verdicts_df(GOOD_RUNS)
    assert len(verdicts) == 12 and bool(verdicts["passed"].all())
    assert isinstance(verdicts["tools"].dtype, pd.ArrowDtype)  # a list per verdict
    assert verdicts.loc[verdicts["key"] == "chaining", "model_calls"].item() == 4
    # The same from a dataset written by ingest, which query reads too.
    result = ingest(GOOD_RUNS, tmp_path / "dataset.parquet")
    assert result.runs == 24 and result.gathered == {"verdicts": 12}
    assert runs_df(result.out).equals(runs) and verdicts_df(tmp_path).equals(verdicts)
    columns, rows = query(result.out, "SELECT count(*) AS n FROM verdicts WHERE passed")
    assert (columns, rows) == (["n"], [(12,)])


def test_a_folder_with_nothing_to_read_is_one_sentence(tmp_path):
    with pytest.raises(EvalkitError, match="no dataset and no runs at"):
        runs_df(tmp_path)
    with pytest.raises(EvalkitError, match="does not exist"):
        verdicts_df(tmp_path / "absent")


# -- a check of one's own ------------------------------------------------------------


def _one_read_at_most(mission, summary) -> Iterator[str]:
    reads = summary.tools_called.count("mcp.read_asset")
    if reads > mission.max_reads:
        yield f"read {reads} assets; this mission allows {mission.max_reads}"


@pytest.fixture
def max_reads() -> Iterator[Check]:
    check_ = register_check(Check(
        name="max_reads", judge=_one_read_at_most, reads=("tools_called",),
        fields=(Field("max_reads", "int", "int", "most mcp.read_asset calls"),)))
    yield check_
    unregister_check(check_.name)


def test_a_registered_check_judges_recordings(tmp_path, max_reads):
    suite = tmp_path / "stub.yaml"
    suite.write_text((STUB / "missions.yaml").read_text().replace(
        "  - key: chaining\n", "  - key: chaining\n    max_reads: 1\n", 1))
    report = score(suite, runs=GOOD_RUNS)
    chaining = next(v for v in report.verdicts if v.key == "chaining")
    assert (chaining.reasons, chaining.checks) == (
        ["read 2 assets; this mission allows 1"], ["max_reads"])


# -- the CLI calls these very functions ------------------------------------------------


@pytest.mark.parametrize("name, args", [
    ("check", ["check", "--suite", str(STUB)]),
    ("score", ["score", "--suite", str(STUB), "--runs", str(GOOD_RUNS)]),
    ("ingest", ["ingest", str(GOOD_RUNS), "--out", "{tmp}/ds"]),
    ("query", ["sql", str(GOOD_RUNS), "SELECT 1"]),
])
def test_the_cli_command_calls_the_public_function(monkeypatch, tmp_path, name, args):
    real = getattr(evalkit, name)
    called = []

    def spy(*given, **options):
        called.append(given)
        return real(*given, **options)

    monkeypatch.setattr(evalkit, name, spy)
    done = CliRunner().invoke(main, [a.replace("{tmp}", str(tmp_path)) for a in args])
    assert done.exit_code == 0, done.output
    assert len(called) == 1


@pytest.mark.slow
def test_the_readme_s_examples_run(tmp_path):
    """The Python in README's "Using evalkit from Python", run as written (the dataset
    written to a temporary folder rather than /tmp)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Using evalkit from Python"):]
    blocks = [b.split("```", 1)[0] for b in section.split("```python\n")[1:3]]
    code = "\n".join(blocks).replace("/tmp/stub.parquet", str(tmp_path / "stub.parquet"))
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                          "HOME": str(tmp_path)}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"  # no mission of the good recordings failed
