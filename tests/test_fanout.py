"""The fan-out scorer (``evalkit.report.fanout``) against the one-process path.

Its promise is the same bytes or nothing: either the report it renders is
byte-identical to the one ``score`` renders in one process, or it gives
None and ``score`` takes the usual path. The suites here are small, so the
size threshold is lowered; the cutting is held to a plain parse by
hypothesis over suites written with any indentation and awkward strings.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from evalkit.cli import main as cli
from evalkit.eval import strict_json, suite_pieces
from evalkit.eval.check import check_suite
from evalkit.eval.score import score
from evalkit.eval.suite import load_suite
from evalkit.eval.tables import ingest
from evalkit.report import fanout
from evalkit.report.markdown import to_json_bytes, to_markdown

ROOT = Path(__file__).resolve().parents[1]


def _synth():
    spec = importlib.util.spec_from_file_location("evalkit_bench_synth", ROOT / "benchmarks" / "synth.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """240 synthesised runs (a share of them failing), their suite, and their dataset."""
    out = tmp_path_factory.mktemp("fanout")
    _synth().synthesise(out, 240, records=12, output_bytes=300)
    ingest(out / "runs", out / "dataset.parquet")
    return out


@pytest.fixture(autouse=True)
def small_suites_fan_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fanout, "FANOUT_FROM_BYTES", 0)


def _source(path: Path) -> dict[str, Path]:
    """``dataset=path`` for a dataset, ``runs=path`` for a folder of runs."""
    return {"dataset" if (path / "dataset.json").is_file() else "runs": path}


def _serial(suite: Path, source: Path, split: str) -> tuple[bytes, str]:
    report = score(load_suite(suite), split=split, **_source(source)).to_dict()
    return to_json_bytes(report), to_markdown(report)


def _fanned(suite: Path, source: Path, split: str, workers: int) -> tuple[bytes, str] | None:
    found = fanout.score_rendered(suite, split, want_json=True, want_markdown=True,
                                  workers=workers, **_source(source))
    if found is None:
        return None
    with found:
        return found.json_bytes(), found.markdown_text()


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("split", ["all", "train", "test"])
@pytest.mark.parametrize("source", ["dataset.parquet", "runs"])
def test_fanout_renders_the_one_process_bytes(corpus: Path, source: str, split: str,
                                              workers: int) -> None:
    suite = corpus / "suite.yaml"
    want = _serial(suite, corpus / source, split)
    got = _fanned(suite, corpus / source, split, workers)
    assert got is not None
    assert got == want
    assert b'"passed": false' in got[0] and "FAIL" in got[1]  # the failure paths ran too


def _edited(corpus: Path, tmp_path: Path, edit) -> Path:
    """A copy of the corpus suite with ``edit`` applied to its parsed missions."""
    data = json.loads((corpus / "suite.yaml").read_text())
    edit(data)
    path = tmp_path / "suite.json"
    path.write_text(json.dumps(data, indent=2))
    return path


def test_missing_and_nested_runs_are_found_as_the_one_process_path_finds_them(
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
    assert _fanned(suite, dataset, "all", 2) == want
    assert _fanned(suite, runs, "all", 2) == _serial(suite, runs, "all")
    # and the dataset words each mission as scoring the folder itself does
    from_runs = score(load_suite(suite), runs=runs).to_dict()["verdicts"]
    from_dataset = json.loads(want[0])["verdicts"]
    assert [(v["key"], v["passed"], v["missing"], v["reasons"]) for v in from_dataset] == [
        (v["key"], v["passed"], v["missing"], v["reasons"]) for v in from_runs]


@pytest.mark.parametrize("edit", [
    pytest.param(lambda d: d["missions"][-1].update(key=d["missions"][0]["key"]), id="key-twice"),
    pytest.param(lambda d: d["missions"][-3].update(flag="not-a-flag"), id="check-problem"),
    pytest.param(lambda d: d["missions"][-2].update(unknown_field=1), id="load-problem"),
    pytest.param(lambda d: d.update(flags=[*d["flags"], "teleportation"]), id="suite-problem"),
])
def test_any_problem_sends_the_suite_the_usual_way(corpus: Path, tmp_path: Path, edit) -> None:
    suite = _edited(corpus, tmp_path, edit)
    assert _fanned(suite, corpus / "dataset.parquet", "all", 2) is None


def test_a_repeated_key_inside_a_mission_is_left_to_the_whole_suite_loader(
        corpus: Path, tmp_path: Path) -> None:
    suite = _edited(corpus, tmp_path, lambda d: None)
    text = suite.read_text()
    at = text.rindex('"because"')
    suite.write_text(text[:at] + '"because": "twice",\n      ' + text[at:])
    assert _fanned(suite, corpus / "dataset.parquet", "all", 2) is None


def test_a_compact_suite_fans_out_too(corpus: Path, tmp_path: Path) -> None:
    compact = tmp_path / "compact.json"
    compact.write_text(json.dumps(json.loads((corpus / "suite.yaml").read_text())))
    want = _serial(compact, corpus / "dataset.parquet", "all")
    assert _fanned(compact, corpus / "dataset.parquet", "all", 2) == want


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
    assert _fanned(suite, corpus / "dataset.parquet", "all", 2) == want
    name = "unnamed-pack" if given == "folder" else "missions"
    assert json.loads(want[0])["suite"] == name


def test_a_cut_that_lands_inside_a_string_is_refused(corpus: Path, tmp_path: Path) -> None:
    def trap(data: dict) -> None:  # "}, {" inside prompts, all over the text
        for m in data["missions"]:
            m["prompt"] += " (see }, { and }]"
    suite = tmp_path / "trap.json"
    data = json.loads((corpus / "suite.yaml").read_text())
    trap(data)
    suite.write_text(json.dumps(data))
    found = _fanned(suite, corpus / "dataset.parquet", "all", 3)
    assert found is None or found == _serial(suite, corpus / "dataset.parquet", "all")


def test_a_yaml_suite_or_stale_summaries_take_the_usual_path(corpus: Path, tmp_path: Path) -> None:
    yaml_suite = tmp_path / "suite.yaml"
    yaml_suite.write_text("name: y\nmissions:\n" + "".join(
        f"  - {{key: m{i:06d}, flag: state, prompt: p, must: [a], must_not: [b], because: c}}\n"
        for i in range(5)))
    assert _fanned(yaml_suite, corpus / "dataset.parquet", "all", 2) is None
    dataset = tmp_path / "stale.parquet"
    shutil.copytree(corpus / "dataset.parquet", dataset)
    manifest = json.loads((dataset / "dataset.json").read_text())
    manifest["summaries"]["version"] = "an older fold"
    (dataset / "dataset.json").write_text(json.dumps(manifest))
    assert _fanned(corpus / "suite.yaml", dataset, "all", 2) is None


@pytest.mark.parametrize("source", [["--dataset", "dataset.parquet"], ["--runs", "runs"]])
def test_the_cli_gives_the_same_report_through_either_path(
        corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: list[str]) -> None:
    args = ["score", "--suite", str(corpus / "suite.yaml"), source[0], str(corpus / source[1])]
    runner = CliRunner()
    rendered = fanout.score_rendered
    taken = []
    monkeypatch.setattr(fanout, "score_rendered",
                        lambda *a, **k: taken.append(rendered(*a, **k)) or taken[-1])
    fanned = runner.invoke(cli, [*args, "--report", str(tmp_path / "a")])
    fanned_json = runner.invoke(cli, [*args, "--json"])
    assert len(taken) == 2 and None not in taken  # the fan-out wrote both
    monkeypatch.setattr(fanout, "score_rendered", lambda *a, **k: None)
    usual = runner.invoke(cli, [*args, "--report", str(tmp_path / "b")])
    usual_json = runner.invoke(cli, [*args, "--json"])
    assert fanned.exit_code == usual.exit_code == 1  # some missions fail
    assert fanned.output == usual.output
    assert fanned_json.stdout_bytes == usual_json.stdout_bytes
    for name in ("report.json", "report.md"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


@pytest.mark.parametrize("source", [["--dataset", "dataset.parquet"], ["--runs", "runs"]])
def test_nothing_to_score_is_said_the_same_way(corpus: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               source: list[str]) -> None:
    suite = _edited(corpus, tmp_path, lambda d: [m.update(key=f"z{m['key']}") for m in d["missions"]])
    args = ["score", "--suite", str(suite), source[0], str(corpus / source[1])]
    fanned = CliRunner().invoke(cli, args)
    monkeypatch.setattr(fanout, "score_rendered", lambda *a, **k: None)
    usual = CliRunner().invoke(cli, args)
    assert fanned.exit_code == usual.exit_code == 2
    assert fanned.output == usual.output
    assert "nothing to score: no mission of suite" in fanned.output
    assert "Traceback" not in fanned.output


def test_runs_that_all_died_before_a_line_are_scored_alike(corpus: Path, tmp_path: Path) -> None:
    """Mission folders with no stream in any: every mission missing on both paths."""
    suite = corpus / "suite.yaml"
    runs = tmp_path / "runs"
    for m in json.loads(suite.read_text())["missions"][:5]:
        (runs / m["key"]).mkdir(parents=True)
    want = _serial(suite, runs, "all")
    assert _fanned(suite, runs, "all", 2) == want
    verdicts = json.loads(want[0])["verdicts"]
    assert sum(v["reasons"][0].startswith("no stream") for v in verdicts) == 5
    assert all(v["missing"] for v in verdicts)


# -- sharing the spans out ------------------------------------------------------------

def test_a_process_that_runs_out_takes_the_far_half_of_the_largest_range_left() -> None:
    claims = fanout._Claims([(0, 10), (10, 10), (10, 16)])
    assert claims.next(0) == 0
    # Process 1 owns nothing: of 0's [1, 10) and 2's [10, 16) it takes the far half of 0's.
    assert [claims.next(1), claims.next(1)] == [5, 6]
    assert [claims.next(0) for _ in range(4)] == [1, 2, 3, 4]
    assert claims.next(2) == 10
    # 0 is done; the largest range left is 2's [11, 16): 0 moves to its far half.
    assert claims.next(0) == 13
    claims.abandon()  # a process gave up: nobody takes anything more
    assert [claims.next(w) for w in range(3)] == [None, None, None]


@given(spans=st.integers(0, 60), workers=st.integers(1, 4),
       order=st.lists(st.integers(0, 3), min_size=1, max_size=40))
def test_every_span_is_taken_once_whoever_asks_when(spans: int, workers: int,
                                                     order: list[int]) -> None:
    claims = fanout._Claims(fanout.first_ranges(spans, workers))
    taken: dict[int, list[int]] = {w: [] for w in range(workers)}
    done: set[int] = set()
    asks = (w % workers for i in range(10 * spans + workers) for w in [order[i % len(order)]])
    for worker in asks:
        if worker in done:
            continue
        span = claims.next(worker)
        if span is None:
            done.add(worker)
        else:
            taken[worker].append(span)
    every = sorted(span for spans_of in taken.values() for span in spans_of)
    assert every == list(range(spans))
    # Whoever asks after the last is gone hears there is nothing left.
    assert all(claims.next(w) is None for w in range(workers))


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("source", ["dataset.parquet", "runs"])
def test_spans_one_process_took_from_another_are_stitched_in_suite_order(
        corpus: Path, monkeypatch: pytest.MonkeyPatch, source: str, workers: int) -> None:
    monkeypatch.setattr(fanout, "SPAN_BYTES", 2000)  # dozens of spans of a few missions
    # The last process starts with every span: the others begin by taking from it.
    monkeypatch.setattr(fanout, "first_ranges",
                        lambda spans, n: [(0, 0)] * (n - 1) + [(0, spans)])
    stitched = []
    real = fanout._stitch
    monkeypatch.setattr(fanout, "_stitch",
                        lambda *args: stitched.append(args[3]) or real(*args))
    for split in ("all", "train"):
        want = _serial(corpus / "suite.yaml", corpus / source, split)
        assert _fanned(corpus / "suite.yaml", corpus / source, split, workers) == want
    shares = stitched[0]
    assert len(shares) == workers and sum(len(s.spans) for s in shares) > 20
    assert shares[0].spans[0][0] > 0  # process 0 began with a span it took from the last


# -- cutting -------------------------------------------------------------------------

_TEXT = st.text(alphabet=st.sampled_from(list('ab }{[],:"\\\n\t') + ["é", "\u2028"]), max_size=12)
_MISSION = st.fixed_dictionaries({
    "key": st.from_regex(r"k[0-9]{1,4}", fullmatch=True), "flag": st.sampled_from(["state", "routing"]),
    "prompt": _TEXT, "must": st.lists(_TEXT, min_size=1, max_size=2),
    "must_not": st.lists(_TEXT, min_size=1, max_size=2), "because": _TEXT,
}, optional={"split": st.sampled_from(["train", "test"]), "answer_must_match": st.lists(_TEXT, max_size=2)})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(missions=st.lists(_MISSION, max_size=12), before=st.booleans(), after=st.booleans(),
       indent=st.sampled_from([None, 1, 2, 4, "\t"]), parts=st.integers(1, 5))
def test_cut_pieces_hold_exactly_what_one_parse_holds(missions, before, after, indent, parts) -> None:
    document: dict = {"name": "cut"}
    if before:
        document["tools"] = ["mcp.a", "x}, {y"]
    document["missions"] = missions
    if after:
        document["rubric_changes"] = [{"date": "2025-01-01", "key": "k1", "what": "w", "why": "y"}]
    text = json.dumps(document, indent=indent, ensure_ascii=False).encode()
    pieces = suite_pieces.cut(Path("cut.json"), text, parts)
    if not missions:
        assert pieces is None
        return
    if pieces is None:  # a cut it could not prove: allowed only where a string holds "}, {"
        assert any("}" in text for m in missions for value in m.values()
                   for text in (value if isinstance(value, list) else [value]))
        return
    assert pieces.fields == {k: v for k, v in document.items() if k != "missions"}
    assert 1 <= len(pieces.spans) <= parts
    try:
        rebuilt = [json.loads(b"[" + text[a:b] + b"]") for a, b in pieces.spans]
    except json.JSONDecodeError:
        # A cut inside a string ("},{" in a value) leaves a piece with an open string,
        # which no parse accepts: the share that parses it refuses (Odd), and the
        # suite is scored the usual way. Never a piece that parses to other missions.
        assert any("}" in text for m in missions for value in m.values()
                   for text in (value if isinstance(value, list) else [value]))
        with pytest.raises(suite_pieces.Odd):
            for index in range(len(pieces.spans)):
                list(suite_pieces.missions(pieces, index))
        return
    assert [m for run in rebuilt for m in run] == missions


def test_every_mission_of_a_clean_suite_is_built_once(corpus: Path) -> None:
    text = (corpus / "suite.yaml").read_bytes()
    whole = load_suite(corpus / "suite.yaml")
    assert check_suite(whole).ok
    pieces = suite_pieces.cut(corpus / "suite.yaml", text, 3)
    assert pieces is not None and len(pieces.spans) == 3
    built = [m for i in range(3) for run in suite_pieces.missions(pieces, i, chunk_chars=5000)
             for m in run]
    assert built == list(whole.missions)


def test_the_scratch_files_go_once_the_report_is_written(corpus: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    found = fanout.score_rendered(corpus / "suite.yaml", "all", dataset=corpus / "dataset.parquet",
                                  want_json=True, want_markdown=True, workers=2)
    assert found is not None and any(scratch.iterdir())  # the shares wrote their parts
    with found:
        found.json_bytes()
    assert not any(scratch.iterdir())
    refused = _edited(corpus, tmp_path, lambda d: d["missions"][-1].update(flag="nope"))
    assert fanout.score_rendered(refused, "all", dataset=corpus / "dataset.parquet",
                                 want_json=True, want_markdown=True, workers=2) is None
    assert not any(scratch.iterdir())


def test_scratch_a_killed_score_left_goes_with_the_next_one(corpus: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import socket
    import subprocess
    import sys
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead, here = int(gone.stdout), socket.gethostname()
    killed = tmp_path / f"{fanout.SCRATCH_PREFIX}{here}-{dead}"
    (killed / "0.json").parent.mkdir()
    (killed / "0.json").write_bytes(b"x" * 1000)
    kept = [tmp_path / f"{fanout.SCRATCH_PREFIX}{here}-{os.getppid()}",  # still running
            tmp_path / f"{fanout.SCRATCH_PREFIX}another-host-{dead}",  # cannot be told
            tmp_path / f"other-{here}-{dead}"]  # not ours
    for folder in kept:
        folder.mkdir()
    found = fanout.score_rendered(corpus / "suite.yaml", "all", runs=corpus / "runs",
                                  want_json=True, want_markdown=False, workers=2)
    assert found is not None
    with found:
        found.json_bytes()
    assert sorted(tmp_path.iterdir()) == sorted(kept)


def test_bytes_the_whole_suite_loader_refuses_are_refused_here_too(corpus: Path,
                                                                   tmp_path: Path) -> None:
    good = (corpus / "suite.yaml").read_bytes()
    at = good.rindex(b"the everyday question")
    for name, data in (("invalid-utf8", good[:at] + b"\xff" + good[at:]),
                       ("surrogate", good[:at] + b"\xed\xa0\x80" + good[at:]),
                       ("nul", good[:at] + b"\0" + good[at:])):
        path = tmp_path / f"{name}.json"
        path.write_bytes(data)
        assert _fanned(path, corpus / "dataset.parquet", "all", 2) is None, name
    with_bom = tmp_path / "bom.json"
    with_bom.write_bytes(b"\xef\xbb\xbf" + good)
    assert _fanned(with_bom, corpus / "dataset.parquet", "all", 2) == _serial(
        with_bom, corpus / "dataset.parquet", "all")


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**60, 2**60) | st.text(max_size=8)
                     | st.floats(allow_nan=False, allow_infinity=False),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(head=st.dictionaries(st.sampled_from(["format", "suite", "halves"]), _JSON, max_size=3),
       verdicts=st.lists(st.dictionaries(st.text(max_size=4), _JSON, max_size=4), max_size=4),
       cut_at=st.integers(0, 4))
def test_verdicts_encoded_in_runs_stitch_to_one_encoding(head, verdicts, cut_at) -> None:
    import orjson

    from evalkit.report.markdown import encode_verdicts, stitch_json, to_json_bytes

    report = {**head, "verdicts": verdicts}
    whole = orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
    assert to_json_bytes(report) == whole
    runs = [encode_verdicts(verdicts[:cut_at]), encode_verdicts(verdicts[cut_at:])]
    assert stitch_json(head, runs) == whole


def _space() -> st.SearchStrategy[str]:
    return st.sampled_from(["", " ", "\n  ", "\t"])


#: JSON texts as any writer might spell them: escapes of every kind, keys that repeat
#: (some spelled with different escapes), numbers orjson and json read apart.
_KEYS = st.sampled_from(['"a"', '"b"', '"\\u0061"', '"a\\""', '"a\\\\"', '"\\\\\\""', '"é"'])
_SCALARS = st.one_of(
    st.text(max_size=8).map(lambda s: json.dumps(s)),
    st.text(max_size=8).map(lambda s: json.dumps(s, ensure_ascii=False)),
    st.sampled_from(['"\\ud800"', '"\\\\"', '"\\"\\\\\\""', '"\\/"', "NaN", "-Infinity",
                     "1e400", "-0", "0.5", "true", "false", "null",
                     "1234567890123456789", "123456789012345678901234567890"]),
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)
_JSON_TEXT = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(st.tuples(_space(), inner), max_size=4).map(
        lambda items: "[" + ",".join(s + v for s, v in items) + "]"),
    st.lists(st.tuples(_KEYS, _space(), inner), max_size=4).map(
        lambda items: "{" + ",".join(f"{k}:{s}{v}" for k, s, v in items) + "}"),
), max_leaves=12)


def _typed(value):
    """A value with every type spelled out (1, 1.0 and True are equal in Python)."""
    if isinstance(value, dict):
        return ("dict", [(k, _typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [_typed(v) for v in value])
    return (type(value).__name__, repr(value))


@settings(max_examples=400, deadline=None)
@given(text=_JSON_TEXT)
@example(text='{"a\\\\":1,"a\\u005c":2}')  # one key spelled two ways
@example(text='[{"k":"\\\\\\"", "k":"x"}]')  # a repeat after an escaped backslash and quote
@example(text='{"n": 123456789012345678901234567890}')  # orjson: a float
def test_suite_json_is_read_exactly_as_json_with_repeats_refused(text: str) -> None:
    def refuse_repeats(pairs):
        out = dict(pairs)
        if len(out) != len(pairs):
            raise ValueError("repeated")
        return out

    try:
        want = json.loads(text, object_pairs_hook=refuse_repeats)
    except (ValueError, RecursionError):
        want = None
    got = strict_json.loads(text.encode("utf-8", "surrogatepass"))
    assert _typed(got) == _typed(want), text


def test_a_plain_run_of_missions_is_parsed_by_orjson(corpus: Path) -> None:
    text = (corpus / "suite.yaml").read_bytes()
    pieces = suite_pieces.cut(corpus / "suite.yaml", text, 1)
    start, end = pieces.spans[0]
    run = b"[" + pieces.data[start:end] + b"]"
    assert strict_json._fast(run) == json.loads(run)
    repeated = run.replace(b'"flag"', b'"flag": "x", "flag"', 1)
    assert strict_json._fast(repeated) is strict_json._UNSURE
    assert strict_json.loads(repeated) is None
