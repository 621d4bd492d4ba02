"""Scoring in shares: a suite judged by several processes, a run of missions each.

Its promise is the same bytes: the report written from the shares' encoded
verdicts is byte-identical to the one rendered from every verdict at once
in one process, whichever way the work was split, from a dataset and from a
folder of runs alike.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from evalkit.cli import main as cli
from evalkit.eval import score as score_module
from evalkit.eval.report_json import decode_verdicts, encode_verdicts, json_parts
from evalkit.eval.score import score
from evalkit.eval.suite import load_suite
from evalkit.eval.tables import ingest
from evalkit.report.markdown import to_json_bytes, to_markdown
from evalkit.store.replace import joined
from tests._synth import synthesised


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """240 synthesised runs (a share of them failing), their suite, and their dataset."""
    return synthesised(tmp_path_factory.mktemp("shares"), 240, records=12, output_bytes=300)


@pytest.fixture(autouse=True)
def small_shares(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shares of a few missions, so the small corpus is judged in many."""
    monkeypatch.setattr(score_module, "SHARE", 16)


def _source(path: Path) -> dict[str, Path]:
    """``dataset=path`` for a dataset, ``runs=path`` for a folder of runs."""
    return {"dataset" if (path / "dataset.json").is_file() else "runs": path}


def _serial(suite: Path, source: Path, split: str) -> tuple[bytes, str]:
    """The report as one process judges it, rendered from its verdicts as a whole."""
    report = score(load_suite(suite), split=split, workers=1, **_source(source)).to_dict()
    return to_json_bytes(report), to_markdown(report)


@pytest.fixture(scope="module")
def serial(corpus: Path) -> Callable[[str, str], tuple[bytes, str]]:
    """``_serial`` of the corpus suite over one of its sources (``dataset.parquet`` or
    ``runs``), judged once per source and split and read by every test that compares to it."""
    judged: dict[tuple[str, str], tuple[bytes, str]] = {}

    def of(source: str, split: str) -> tuple[bytes, str]:
        if (source, split) not in judged:
            judged[source, split] = _serial(corpus / "suite.yaml", corpus / source, split)
        return judged[source, split]

    return of


def _shared(suite: Path, source: Path, split: str, workers: int) -> tuple[bytes, str]:
    """The report as ``workers`` processes judge it, written from the shares' bytes."""
    report = score(load_suite(suite), split=split, workers=workers, **_source(source))
    return joined(report.json_parts()), to_markdown(report.to_dict())


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("split", ["all", "train", "test"])
@pytest.mark.parametrize("source", ["dataset.parquet", "runs"])
def test_shares_judged_by_several_processes_give_the_one_process_bytes(
        corpus: Path, serial: Callable[[str, str], tuple[bytes, str]], source: str, split: str,
        workers: int) -> None:
    suite = corpus / "suite.yaml"
    want = serial(source, split)
    got = _shared(suite, corpus / source, split, workers)
    assert got == want
    assert b'"passed": false' in got[0] and "FAIL" in got[1]  # the failure paths ran too


def _edited(corpus: Path, tmp_path: Path, edit) -> Path:
    """A copy of the corpus suite with ``edit`` applied to its parsed missions."""
    data = json.loads((corpus / "suite.yaml").read_text())
    edit(data)
    path = tmp_path / "suite.json"
    path.write_text(json.dumps(data, indent=2))
    return path


@pytest.mark.slow
def test_missing_and_nested_runs_are_found_alike_from_a_dataset_and_a_folder(
        corpus: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    shutil.copytree(corpus / "runs", runs)
    # One run sits a level deeper than usual; another mission has no run at all.
    first = sorted(runs.iterdir())[0]
    inner = next(first.iterdir())
    inner.rename(tmp_path / "moved")
    (first / "deeper").mkdir()
    (tmp_path / "moved").rename(first / "deeper" / inner.name)
    shutil.rmtree(sorted(runs.iterdir())[5])
    # One mission's folder holds no stream; another's is three levels down, too deep to count.
    for index, depth in ((7, 0), (9, 3)):
        folder = sorted(runs.iterdir())[index]
        events = next(folder.glob("*/events.jsonl"))
        target = folder.joinpath(*["deep"] * depth, "events.moved")
        target.parent.mkdir(parents=True, exist_ok=True)
        events.rename(target)
        if depth:
            target.rename(target.with_name("events.jsonl"))
    # One mission's folder holds two runs: the one first in glob order is scored.
    twice = sorted(runs.iterdir())[11]
    shutil.copytree(next(sorted(runs.iterdir())[12].glob("*/")), twice / "0-first")
    # One mission's stream is a file of torn lines where its folder was (no record:
    # an empty stream); another's folder lives elsewhere, linked in.
    garbled = sorted(runs.iterdir())[13]
    shutil.rmtree(garbled)
    garbled.write_bytes(b'{"seq": 1, "at\n\n')
    linked = sorted(runs.iterdir())[14]
    linked.rename(tmp_path / "elsewhere")
    linked.symlink_to(tmp_path / "elsewhere")
    dataset = tmp_path / "dataset.parquet"
    ingest(runs, dataset)
    suite = corpus / "suite.yaml"
    want = _serial(suite, dataset, "all")
    assert b"not run" in want[0] and b"no stream: no events.jsonl in " in want[0]
    assert f'"{twice.name}/0-first/events.jsonl"'.encode() in want[0]
    verdicts = {v["key"]: v for v in json.loads(want[0])["verdicts"]}
    assert verdicts[garbled.name]["reasons"] == ["the stream is empty: the run failed"]
    assert not verdicts[linked.name]["missing"]
    assert _shared(suite, dataset, "all", 2) == want
    assert _shared(suite, runs, "all", 2) == _serial(suite, runs, "all")
    # and the dataset words each mission as scoring the folder itself does
    from_runs = score(load_suite(suite), runs=runs).to_dict()["verdicts"]
    from_dataset = json.loads(want[0])["verdicts"]
    assert [(v["key"], v["passed"], v["missing"], v["reasons"]) for v in from_dataset] == [
        (v["key"], v["passed"], v["missing"], v["reasons"]) for v in from_runs]


@pytest.mark.slow
@pytest.mark.parametrize("given", ["folder", "file"])
def test_a_suite_without_a_name_is_named_alike_on_both_paths(corpus: Path, tmp_path: Path,
                                                             given: str) -> None:
    """The file stem for a file, the folder's name for a folder: each path names it so."""
    data = json.loads((corpus / "suite.yaml").read_text())
    del data["name"]
    pack = tmp_path / "unnamed-pack"
    pack.mkdir()
    (pack / "missions.json").write_text(json.dumps(data))
    suite = pack if given == "folder" else pack / "missions.json"
    want = _serial(suite, corpus / "dataset.parquet", "all")
    assert _shared(suite, corpus / "dataset.parquet", "all", 2) == want
    name = "unnamed-pack" if given == "folder" else "missions"
    assert json.loads(want[0])["suite"] == name


@pytest.mark.slow
def test_the_cli_writes_the_same_report_from_a_dataset_and_from_the_runs(
        corpus: Path, serial: Callable[[str, str], tuple[bytes, str]], tmp_path: Path) -> None:
    runner = CliRunner()
    outputs = {}
    for source in (["--dataset", "dataset.parquet"], ["--runs", "runs"]):
        args = ["score", "--suite", str(corpus / "suite.yaml"), source[0], str(corpus / source[1])]
        report = tmp_path / source[1]
        written = runner.invoke(cli, [*args, "--report", str(report)])
        printed = runner.invoke(cli, [*args, "--json"])
        assert written.exit_code == printed.exit_code == 1  # some missions fail
        assert printed.stdout_bytes == (report / "report.json").read_bytes()
        want = serial(source[1], "all")
        assert (report / "report.json").read_bytes() == want[0]
        assert (report / "report.md").read_text() == want[1]
        outputs[source[1]] = json.loads(printed.stdout_bytes)
    from_dataset, from_runs = outputs["dataset.parquet"], outputs["runs"]
    assert [(v["key"], v["passed"], v["missing"], v["reasons"], v["kpis"])
            for v in from_dataset["verdicts"]] == [
        (v["key"], v["passed"], v["missing"], v["reasons"], v["kpis"])
        for v in from_runs["verdicts"]]


@pytest.mark.slow
@pytest.mark.parametrize("source", [["--dataset", "dataset.parquet"], ["--runs", "runs"]])
def test_nothing_to_score_is_one_sentence(corpus: Path, tmp_path: Path,
                                          source: list[str]) -> None:
    suite = _edited(corpus, tmp_path, lambda d: [m.update(key=f"z{m['key']}") for m in d["missions"]])
    args = ["score", "--suite", str(suite), source[0], str(corpus / source[1])]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert "nothing to score: no mission of suite" in result.output
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_runs_that_all_died_before_a_line_are_scored_alike(corpus: Path, tmp_path: Path) -> None:
    """Mission folders with no stream in any: every mission missing on both paths."""
    suite = corpus / "suite.yaml"
    runs = tmp_path / "runs"
    for m in json.loads(suite.read_text())["missions"][:5]:
        (runs / m["key"]).mkdir(parents=True)
    want = _serial(suite, runs, "all")
    assert _shared(suite, runs, "all", 2) == want
    verdicts = json.loads(want[0])["verdicts"]
    assert sum(v["reasons"][0].startswith("no stream") for v in verdicts) == 5
    assert all(v["missing"] for v in verdicts)


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**60, 2**60) | st.text(max_size=8)
                     | st.floats(allow_nan=False, allow_infinity=False),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=12)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(head=st.dictionaries(st.sampled_from(["format", "suite", "halves"]), _JSON, max_size=3),
       verdicts=st.lists(st.dictionaries(st.text(max_size=4), _JSON, max_size=4), max_size=4),
       cut_at=st.integers(0, 4))
def test_verdicts_encoded_in_runs_stitch_to_one_encoding(head, verdicts, cut_at) -> None:
    import orjson

    report = {**head, "verdicts": verdicts}
    whole = orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
    assert to_json_bytes(report) == whole
    runs = [encode_verdicts(verdicts[:cut_at]), encode_verdicts(verdicts[cut_at:])]
    assert joined(json_parts(head, runs)) == whole
    assert [v for run in runs for v in decode_verdicts(run)] == verdicts
