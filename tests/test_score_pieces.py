"""Scoring a large JSON suite in pieces (``evalkit.eval.pieces``).

Its promise: the very bytes of the report that loading the suite whole and then
scoring it gives, whatever the suite's layout and however it is cut; and for a
suite check has anything to say of, the very refusal. Where a cut is in doubt
(it lands inside a string, a nested list, a repeated key), the pieces route
gives up and the suite is loaded whole, never scored from a wrong reading.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import evalkit
from evalkit.cli import main as cli
from evalkit.errors import EvalkitError
from evalkit.eval import pieces
from evalkit.eval.check import gradeable
from evalkit.eval.score import score
from evalkit.eval.suite import load_suite
from evalkit.store.replace import joined
from tests._synth import synthesised


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """80 synthesised runs (some failing), their suite, and their dataset."""
    return synthesised(tmp_path_factory.mktemp("pieces"), 80, records=6, output_bytes=100)


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every suite cut, into pieces of a few missions each."""
    monkeypatch.setattr(pieces, "CUT_FROM", 0)
    monkeypatch.setattr(pieces, "PIECE_BYTES", 3000)


def _source(corpus: Path, source: str) -> dict[str, Path]:
    return {"dataset" if source == "dataset" else "runs": corpus / (
        "dataset.parquet" if source == "dataset" else "runs")}


def _whole(suite: Path, split: str = "all", **source: Any) -> bytes:
    """The report of the suite loaded whole, then scored."""
    return joined(score(load_suite(suite), split=split, workers=1, **source).json_parts())


def _in_pieces(suite: Path, split: str = "all", workers: int = 1, **source: Any) -> bytes:
    """The report scored in pieces; the route must have been taken."""
    report = pieces.score_pieces(suite, split=split, workers=workers, **source)
    assert report is not None, "the suite was not scored in pieces"
    return joined(report.json_parts())


def _written(corpus: Path, tmp_path: Path, edit=None, *, indent: int | None = 1,
             name: str = "suite.json", **dumps: Any) -> Path:
    data = json.loads((corpus / "suite.yaml").read_text())
    if edit is not None:
        edit(data)
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=indent, **dumps))
    return path


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("split", ["all", "test"])
@pytest.mark.parametrize("source", ["dataset", "runs"])
def test_a_suite_scored_in_pieces_gives_the_bytes_of_one_loaded_whole(
        corpus: Path, source: str, split: str, workers: int) -> None:
    suite = corpus / "suite.yaml"
    assert len(pieces.cut(suite).spans) > 10
    want = _whole(suite, split, **_source(corpus, source))
    assert _in_pieces(suite, split, workers, **_source(corpus, source)) == want
    assert b'"passed": false' in want and b'"passed": true' in want


@pytest.mark.parametrize("layout", ["compact", "indented", "missions first", "fields after",
                                    "crlf", "no name"])
def test_any_layout_of_the_document_is_cut_and_read_alike(corpus: Path, tmp_path: Path,
                                                         layout: str) -> None:
    def reorder(data: dict[str, Any]) -> None:
        missions = data.pop("missions")
        rest = dict(data)
        data.clear()
        if layout == "missions first":
            data.update(missions=missions, **rest)
        else:
            data.update(**rest, missions=missions, description="after the list",
                        vocabulary=["extra_capability"])

    edit = {"missions first": reorder, "fields after": reorder,
            "no name": lambda d: d.pop("name")}.get(layout)
    suite = _written(corpus, tmp_path, edit, indent=None if layout == "compact" else 2,
                     name="unnamed.json" if layout == "no name" else "suite.json")
    if layout == "crlf":
        suite.write_bytes(suite.read_bytes().replace(b"\n", b"\r\n"))
    source = _source(corpus, "dataset")
    assert _in_pieces(suite, **source) == _whole(suite, **source)


def test_a_suite_default_is_laid_over_the_missions_of_every_piece(corpus: Path,
                                                                 tmp_path: Path) -> None:
    def judged(data: dict[str, Any]) -> None:
        data["judge"] = {"model": "suite-judge"}
        for m in data["missions"][::3]:
            m["judge"] = {"pass": 0.5}

    suite = _written(corpus, tmp_path, judged)
    source = _source(corpus, "dataset")
    report = _in_pieces(suite, **source)
    assert report == _whole(suite, **source)
    assert b"not judged: no judgment of this answer by openai/suite-judge" in report


@pytest.mark.slow
def test_cut_points_inside_strings_are_never_taken(corpus: Path, tmp_path: Path) -> None:
    """Prompts and settings full of ``}, {``: a piece cut there does not parse, so the
    suite is either cut where it truly may be or loaded whole; the bytes are the same."""
    def tricky(data: dict[str, Any]) -> None:
        for i, m in enumerate(data["missions"]):
            m["prompt"] += ' Note: "}, {" and \\"}, {\\" are text.' * (i % 4)
            if i % 5 == 0:
                m["judge"] = {"model": "j }, {", "criteria": "names }, { the order"}

    suite = _written(corpus, tmp_path, tricky)
    source = _source(corpus, "dataset")
    found = pieces.score_pieces(suite, workers=1, **source)
    want = _whole(suite, **source)
    assert found is None or joined(found.json_parts()) == want
    assert joined(evalkit.score(suite, **source).json_parts()) == want
    # A piece that ends inside a prompt is not a run of whole values: it does not parse.
    text = suite.read_bytes()
    inside = text.index(b'\\"}, {\\"')
    assert pieces.loads(b"[" + text[text.index(b"{", text.index(b"[")):inside + 3] + b"]") is None


@pytest.mark.slow
def test_a_stream_altered_after_its_seal_is_tampered_in_pieces_too(corpus: Path,
                                                                  tmp_path: Path) -> None:
    """The adversary's edit (a failing run's record rewritten after the run was sealed) is
    caught by the seal checker the workers inherit, from the runs and from a dataset."""
    import shutil

    from evalkit.eval.tables import ingest
    from evalkit.store import seal
    from evalkit.store.signing import PUBLIC_FILE, Signer

    runs = tmp_path / "runs"
    shutil.copytree(corpus / "runs", runs)
    signer = Signer.generate()
    (runs / PUBLIC_FILE).write_bytes(signer.public_pem())
    missions = sorted(p for p in runs.iterdir() if p.is_dir())
    for folder in missions:
        seal.seal_mission(folder, signer)
    seal.seal_folder(runs, missions, signer)
    victim = missions[40]
    events = next(victim.glob("*/events.jsonl"))
    events.write_bytes(events.read_bytes().replace(b'"seq":', b'"seq" :', 1))
    ingest(runs, tmp_path / "dataset.parquet")
    suite = corpus / "suite.yaml"
    for source in ({"runs": runs}, {"dataset": tmp_path / "dataset.parquet"}):
        report = _in_pieces(suite, workers=2, **source)
        assert report == _whole(suite, **source)
        verdict = next(v for v in json.loads(report)["verdicts"] if v["key"] == victim.name)
        assert verdict["checks"] == ["tampered"] and not verdict["passed"]


@pytest.mark.slow
@pytest.mark.parametrize("problem", ["bad flag", "key twice across pieces", "held out too few",
                                     "unknown field", "repeated key", "not a mapping"])
def test_a_suite_check_refuses_is_refused_in_its_words(corpus: Path, tmp_path: Path,
                                                      problem: str) -> None:
    def spoil(data: dict[str, Any]) -> None:
        missions = data["missions"]
        if problem == "bad flag":
            missions[50]["flag"] = "telepathy"
        elif problem == "key twice across pieces":
            missions[70]["key"] = missions[2]["key"]
        elif problem == "held out too few":
            for m in missions:
                m["split"] = "train"
        elif problem == "unknown field":
            missions[70]["expect_tools"] = ["mcp.x"]
        elif problem == "not a mapping":
            missions[60] = ["key", "flag"]

    suite = _written(corpus, tmp_path, spoil)
    if problem == "repeated key":
        text = suite.read_text().replace('"flag": ', '"flag": "state", "flag": ', 1)
        suite.write_text(text)
    source = _source(corpus, "dataset")
    assert pieces.score_pieces(suite, workers=1, **source) is None
    with pytest.raises(EvalkitError) as refused:
        gradeable(suite, refusing="nothing scored")
    with pytest.raises(EvalkitError) as scored:
        evalkit.score(suite, **source)
    assert scored.value.message == refused.value.message
    assert scored.value.exit_code == refused.value.exit_code


def test_the_suite_is_refused_before_a_missing_runs_folder_is(corpus: Path,
                                                             tmp_path: Path) -> None:
    """Scoring checks the suite first: its problems are said before any about the runs."""
    suite = _written(corpus, tmp_path, lambda d: d["missions"][3].update(flag="telepathy"))
    with pytest.raises(EvalkitError) as raised:
        evalkit.score(suite, runs=tmp_path / "nowhere")
    assert "is not gradeable" in raised.value.message
    good = corpus / "suite.yaml"
    with pytest.raises(EvalkitError, match="--runs .*nowhere does not exist"):
        evalkit.score(good, runs=tmp_path / "nowhere")


def test_the_cli_prints_the_report_it_would_print_for_the_suite_loaded_whole(
        corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = ["score", "--suite", str(corpus / "suite.yaml"), "--dataset",
            str(corpus / "dataset.parquet"), "--json", "--allow-failures"]
    cut = CliRunner().invoke(cli, args)
    monkeypatch.setattr(pieces, "CUT_FROM", 1 << 40)  # never cut
    whole = CliRunner().invoke(cli, args)
    assert cut.exit_code == whole.exit_code == 0
    assert cut.stdout_bytes == whole.stdout_bytes


def test_yaml_and_small_suites_are_not_cut(corpus: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    yaml_suite = tmp_path / "suite.yaml"
    yaml_suite.write_text("name: y\nmissions:\n  - {key: a, flag: state, prompt: p}\n")
    assert pieces.cut(yaml_suite) is None
    monkeypatch.setattr(pieces, "CUT_FROM", (corpus / "suite.yaml").stat().st_size + 1)
    assert pieces.cut(corpus / "suite.yaml") is None
    assert pieces.cut(tmp_path / "missing.json") is None


_TEXT = st.text(alphabet=st.sampled_from(list('ab }{][,:"\\\n\u00e9')), max_size=12)


@pytest.mark.slow
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompts=st.lists(_TEXT, min_size=1, max_size=6), indent=st.sampled_from([None, 0, 1, 4]),
       separators=st.sampled_from([None, (",", ":"), (" ,\n", " : ")]),
       piece=st.integers(1, 4000), after=st.booleans())
def test_a_cut_suite_reads_as_the_whole_one_or_not_at_all(
        corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prompts: list[str],
        indent: int | None, separators: tuple[str, str] | None, piece: int, after: bool) -> None:
    """Whatever the text in the missions and the layout of the document, a suite the pieces
    route reads gives the bytes of the suite loaded whole."""
    monkeypatch.setattr(pieces, "PIECE_BYTES", piece)

    def edit(data: dict[str, Any]) -> None:
        for i, m in enumerate(data["missions"]):
            m["prompt"] += prompts[i % len(prompts)]
        if after:
            data["description"] = prompts[0]

    suite = _written(corpus, tmp_path, edit, indent=indent, separators=separators)
    source = _source(corpus, "dataset")
    found = pieces.score_pieces(suite, workers=1, **source)
    if found is not None:
        assert joined(found.json_parts()) == _whole(suite, **source)
