"""Regrade: a folder of recordings replayed under a new manifest, then scored as before."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.errors import EvalkitError
from evalkit.runtime.mission import MissionSettings
from evalkit.runtime.regrade import destination, find_runs, regrade
from tests._disk import fills_on, leftovers
from tests.replay.conftest import STUB, Lab, answer, call, digest, read_jsonl, without_ids

SUITE = """\
name: regrade-test
tools: [mcp.add, mcp.echo]
flags: [chaining, state]
missions:
  - key: sum-1
    flag: chaining
    prompt: what is 2 plus 3
    must: [states 5]
    must_not: [guesses]
    because: a sum
    expects_outcome: answered
  - key: sum-2
    flag: chaining
    prompt: what is 20 plus 22
    must: [states 42]
    must_not: [guesses]
    because: a sum
    expects_outcome: answered
  - key: echo-1
    flag: state
    split: test
    prompt: say hi back
    must: [says hi]
    must_not: [says bye]
    because: a reply
    expects_outcome: answered
  - key: lost-1
    flag: state
    split: test
    prompt: say hi back twice
    must: [says hi twice]
    must_not: [stops]
    because: an unfinished run
    expects_outcome: answered
""" + "".join(f"""\
  - key: unrun-{i}
    flag: chaining
    split: {'test' if i == 0 else 'train'}
    prompt: what is {i} plus {i}
    must: [states the sum]
    must_not: [guesses]
    because: held out so the suite passes check; never run here
""" for i in range(4))

#: A grammar under which a figure must come from a tool result (no prompt body: no drift).
STRICT = """\
---
name: strict-figures
grounding:
  number_pattern: '\\b\\d+\\b'
  max_repairs: 1
---
"""

SCRIPTS: dict[str, tuple[str, list[Any]]] = {
    "sum-1": ("add 2 and 3", [call("mcp.add", a=2, b=3), answer("2 + 3 = 5")]),
    # the answer's 43 appears in no tool result: fine until a grammar asks for evidence
    "sum-2": ("add 20 and 22", [call("mcp.add", a=20, b=22), answer("it is 43")]),
    "echo-1": ("echo hi", [call("mcp.echo", text="hi"), answer("hi")]),
    "lost-1": ("echo twice", [call("mcp.echo", text="hi")]),  # the script runs dry
}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DIR/<key>/runs/<run_id>/ for each mission, as `evalkit run --out` lays them out."""
    lab = Lab(tmp_path_factory.mktemp("recorded"))
    source = lab.root / "recorded"
    for key, (objective, items) in SCRIPTS.items():
        lab.launch(MissionSettings(objective=objective, provider="scripted",
                                   script=lab.script(items, f"{key}.json"), mcp_stdio=(STUB,)),
                   EVALKIT_RUNS=str(source / key / "runs"))
    return source


@pytest.fixture
def folder(lab: Lab, recorded: Path) -> Path:
    """A fresh copy of the recorded folder in this test's lab."""
    return Path(shutil.copytree(recorded, lab.root / "recorded"))


def _score(lab: Lab, runs: Path) -> dict[str, Any]:
    suite = lab.root / "suite.yaml"
    suite.write_text(SUITE, encoding="utf-8")
    result = CliRunner().invoke(main, ["score", "--suite", str(suite), "--runs", str(runs),
                                       "--json", "--allow-failures"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _verdicts(report: dict[str, Any]) -> dict[str, tuple[bool, str | None]]:
    return {v["key"]: (v["passed"], v["kpis"]["outcome"]) for v in report["verdicts"]}


@pytest.mark.slow
def test_regrade_replays_every_run_into_the_same_layout_with_two_jobs(lab: Lab, folder: Path) -> None:
    source = folder
    before = digest(source)
    out = lab.root / "regraded"
    result = CliRunner().invoke(main, ["regrade", str(source), "--out", str(out),
                                       "--jobs", "2"], env=lab.env())
    assert result.exit_code == 0, result.output
    assert result.stderr == ""  # no progress bar's label in a log: stderr is no terminal
    assert digest(source) == before  # the recordings are only read
    report = json.loads((out / "regrade.json").read_text())
    assert report["format"] == "evalkit-regrade" and report["jobs"] == 2
    assert report["totals"] == {"runs": 4, "replayed": 4, "failed": 0, "drifted": 0,
                                "ran_off_end": 0, "outcome_changed": 0}
    for row in report["runs"]:
        key = row["source"].split("/")[0]
        assert row["replay"].startswith(f"{key}/runs/run_")
        replayed = out / row["replay"]
        original = source / row["source"]
        assert json.loads((replayed / "meta.json").read_text())["meta"]["replay_of"] == \
            original.name
        assert without_ids([r["record"] for r in read_jsonl(replayed / "events.jsonl")]) == \
            without_ids([r["record"] for r in read_jsonl(original / "events.jsonl")])
    assert _verdicts(_score(lab, out)) == _verdicts(_score(lab, source))
    assert "regraded 4 of 4 run(s)" in result.stdout


@pytest.mark.slow
def test_a_stricter_grammar_flips_an_answered_run_and_score_shows_it(lab: Lab, folder: Path) -> None:
    source = folder
    skill = lab.root / "STRICT.md"
    skill.write_text(STRICT, encoding="utf-8")
    out = lab.root / "strict"
    report = regrade(source, out, skills=[str(skill)], jobs=2)
    rows = {row["source"].split("/")[0]: row for row in report["runs"]}
    assert rows["sum-2"]["outcome_before"] == "answered"
    assert rows["sum-2"]["outcome_after"] == "answered_with_caveat"
    assert rows["sum-2"]["outcome_changed"] and rows["sum-2"]["drift"] is None
    assert rows["sum-2"]["ran_off_end"] is None  # the repair it never made is not asked for
    assert rows["sum-1"]["outcome_after"] == "answered"  # 2, 3 and 5 are all in the result
    replayed = out / rows["sum-2"]["replay"]
    grounding = [r["record"] for r in read_jsonl(replayed / "events.jsonl")
                 if r["record"]["event"] == "grounding"]
    assert grounding and grounding[-1]["grounded"] is False
    assert _verdicts(_score(lab, source))["sum-2"] == (True, "answered")
    flipped = _verdicts(_score(lab, out))["sum-2"]
    assert flipped == (False, "answered_with_caveat")


@pytest.mark.slow
def test_two_worker_processes_regrade_as_one_process_does(lab: Lab, folder: Path) -> None:
    """In a process of its own (no test-runner threads), ``--jobs 2`` forks two workers of
    ``evalkit.parallel``: the rows, in order, are the ones a single process writes."""
    reports = []
    for jobs in ("1", "2"):
        out = lab.root / f"regraded-{jobs}"
        done = subprocess.run([sys.executable, "-m", "evalkit.cli", "regrade", str(folder),
                               "--out", str(out), "--jobs", jobs], env=lab.env(),
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        reports.append(json.loads((out / "regrade.json").read_text()))
    one, two = reports
    assert two["jobs"] == 2 and one["totals"] == two["totals"] and one["totals"]["replayed"] == 4
    keep = ("source", "outcome_before", "outcome_after", "drift", "ran_off_end", "error")
    assert [{k: r[k] for k in keep} for r in one["runs"]] == \
        [{k: r[k] for k in keep} for r in two["runs"]]


@pytest.mark.slow
def test_runs_that_ran_off_the_end_or_could_not_be_replayed_are_listed(lab: Lab, folder: Path) -> None:
    source = folder
    [cut] = find_runs(source / "sum-1")
    lines = (cut / "model.jsonl").read_text().splitlines()
    (cut / "model.jsonl").write_text(lines[0] + "\n")  # a recording cut short
    [broken] = find_runs(source / "echo-1")
    (broken / "events.jsonl").write_text("")  # nothing on record: no mission_started
    out = lab.root / "out"
    result = CliRunner().invoke(main, ["regrade", str(source), "--out", str(out),
                                       "--jobs", "2"], env=lab.env())
    assert result.exit_code == 1, result.output  # a run that could not be replayed
    report = json.loads((out / "regrade.json").read_text())
    assert report["totals"]["ran_off_end"] == 1 and report["totals"]["failed"] == 1
    assert "ran off end  sum-1/runs/" in result.stdout
    assert "failed       echo-1/runs/" in result.stdout and "no mission_started" in result.stdout


@pytest.mark.slow
def test_regrade_refuses_what_it_cannot_do(lab: Lab, folder: Path) -> None:
    source = folder
    with pytest.raises(EvalkitError, match="lies inside"):
        regrade(source, source / "out")
    busy = lab.root / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    with pytest.raises(EvalkitError, match="is not empty"):
        regrade(source, busy)
    bad = lab.root / "BAD.md"
    bad.write_text("---\nname: bad\nprompt: nope\n---\n")
    with pytest.raises(EvalkitError, match="unknown key"):
        regrade(source, lab.root / "fresh", skills=[str(bad)])
    empty = lab.root / "empty"
    empty.mkdir()
    with pytest.raises(EvalkitError, match="no run directories"):
        regrade(empty, lab.root / "fresh2")


def test_destination_mirrors_the_relative_place() -> None:
    out = Path("/o")
    assert destination(out, Path("k/runs/run_20250101-000000-abcd")) == Path("/o/k/runs")
    assert destination(out, Path("k")) == Path("/o/k")


@pytest.mark.slow
def test_a_disk_that_fills_on_the_report_leaves_no_half_report_and_keeps_the_replays(
        lab: Lab, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = lab.root / "full"
    fills_on(monkeypatch, "regrade.json")
    with pytest.raises(OSError, match="No space left"):
        regrade(folder, out, jobs=1)
    assert not (out / "regrade.json").exists()  # none, rather than half a one
    assert leftovers(out) == []
    assert len(find_runs(out)) == len(find_runs(folder))  # what was replayed stays


@pytest.mark.slow
def test_a_run_whose_meta_is_a_fifo_fails_its_row_and_out_may_not_be_a_file(
        lab: Lab, folder: Path) -> None:
    """A FIFO where meta.json would be waited for a writer for ever (regrade hung); an
    --out that is a file was a NotADirectoryError, exit 3."""
    [run] = find_runs(folder / "echo-1")
    (run / "meta.json").unlink()
    os.mkfifo(run / "meta.json")
    a_file = lab.root / "out.txt"
    a_file.write_text("mine\n")
    refused = CliRunner().invoke(main, ["regrade", str(folder), "--out", str(a_file)])
    assert refused.exit_code == 2 and a_file.read_text() == "mine\n"
    assert refused.stderr == f"Error: --out {a_file} is a file: give a new or empty folder\n"
    report = regrade(folder, lab.root / "out", jobs=1)
    rows = {row["source"].split("/")[0]: row for row in report["runs"]}
    assert rows["echo-1"]["error"] == f"{run / 'meta.json'} is not a regular file"
    assert rows["sum-1"]["error"] is None
