"""`evalkit score` end to end: exit codes, the JSON report's shape, determinism, bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from evalkit.cli import main
from tests._stream_builders import (
    answer,
    finished,
    good_run,
    mission,
    padded,
    started,
    step,
    write_stream,
    write_suite,
)


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def suite_and_runs(tmp_path):
    missions = [mission(f"t{i}", split="train", expects_tools=["mcp.add"],
                        expects_outcome="answered") for i in range(5)]
    missions += [mission(f"h{i}", split="test", expects_tools=["mcp.add"],
                         answer_must_match=["(?i)sum is 5"]) for i in range(3)]
    suite = write_suite(tmp_path / "suite.yaml", missions, flags=["chaining"])
    runs = tmp_path / "runs"
    for m in missions:
        write_stream(runs / m["key"] / "events.jsonl", good_run())
    return suite, runs


def test_all_passing_exits_zero_and_the_json_report_has_every_verdict(suite_and_runs):
    suite, runs = suite_and_runs
    result = invoke("score", "--suite", str(suite), "--runs", str(runs), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [v["key"] for v in report["verdicts"]] == [f"t{i}" for i in range(5)] + [
        f"h{i}" for i in range(3)]
    for v in report["verdicts"]:
        assert {"key", "flag", "split", "passed", "reasons", "needs_reader", "kpis"} <= set(v)
        assert v["passed"] is True and v["reasons"] == []
        assert v["needs_reader"] == {"must": ["states the sum"], "must_not": ["invents a figure"]}
    assert report["halves"]["train"]["totals"]["success_rate"] == 1.0
    assert report["halves"]["test"]["totals"]["missions"] == 3
    assert "success_rate" not in report  # halves are never blended


def test_a_failure_exits_one_unless_allowed_and_missing_runs_stay_in_the_denominator(
        suite_and_runs):
    suite, runs = suite_and_runs
    write_stream(runs / "t1" / "events.jsonl", good_run("mcp.echo"))
    shutil.rmtree(runs / "h2")
    result = invoke("score", "--suite", str(suite), "--runs", str(runs), "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    by_key = {v["key"]: v for v in report["verdicts"]}
    assert by_key["t1"]["reasons"] == ["never called mcp.add; it called ['mcp.echo']"]
    assert by_key["h2"]["reasons"] == ["not run"] and by_key["h2"]["missing"]
    test_totals = report["halves"]["test"]["totals"]
    assert (test_totals["missions"], test_totals["missing"], test_totals["passed"]) == (3, 1, 2)
    assert test_totals["success_rate"] == round(2 / 3, 4)
    allowed = invoke("score", "--suite", str(suite), "--runs", str(runs), "--allow-failures")
    assert allowed.exit_code == 0
    assert "Why they failed" in allowed.stdout and "never called mcp.add" in allowed.stdout


def test_split_scores_one_half(suite_and_runs):
    suite, runs = suite_and_runs
    report = json.loads(invoke("score", "--suite", str(suite), "--runs", str(runs), "--split",
                               "test", "--json").stdout)
    assert {v["split"] for v in report["verdicts"]} == {"test"}
    assert list(report["halves"]) == ["test"]


def test_report_files_are_the_same_bytes_for_the_same_runs_anywhere(suite_and_runs, tmp_path):
    suite, runs = suite_and_runs
    invoke("score", "--suite", str(suite), "--runs", str(runs), "--report", str(tmp_path / "a"))
    moved = shutil.copytree(runs, tmp_path / "elsewhere" / "runs")
    invoke("score", "--suite", str(suite), "--runs", str(moved), "--report", str(tmp_path / "b"))
    for name in ("report.json", "report.md"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert json.loads((tmp_path / "a" / "report.json").read_text())["passed"] is True


def test_map_scores_from_explicit_paths(suite_and_runs, tmp_path):
    suite, runs = suite_and_runs
    elsewhere = write_stream(tmp_path / "x.jsonl", [started(), step(1), answer("nope"),
                                                    finished()])
    result = invoke("score", "--suite", str(suite), "--runs", str(runs), "--map",
                    f"h0={elsewhere}", "--json")
    by_key = {v["key"]: v for v in json.loads(result.stdout)["verdicts"]}
    assert by_key["h0"]["source"] == str(elsewhere)
    assert not by_key["h0"]["passed"]
    only_map = invoke("score", "--suite", str(suite), "--map", f"t0={runs / 't0'}", "--json")
    verdicts = json.loads(only_map.stdout)["verdicts"]
    assert sum(not v["missing"] for v in verdicts) == 1 and only_map.exit_code == 1


def test_a_map_entry_for_the_other_half_is_left_unused(suite_and_runs, tmp_path):
    """One list of --map entries serves either half: t0 is a train mission, so scoring
    the test half neither refuses its entry nor reads it."""
    suite, runs = suite_and_runs
    failing = write_stream(tmp_path / "x.jsonl", [started(), step(1), answer("nope"), finished()])
    plain = invoke("score", "--suite", str(suite), "--runs", str(runs), "--split", "test", "--json")
    mapped = invoke("score", "--suite", str(suite), "--runs", str(runs), "--split", "test",
                    "--map", f"t0={failing}", "--json")
    assert (mapped.exit_code, mapped.stdout) == (plain.exit_code, plain.stdout) == (0, plain.stdout)
    train = invoke("score", "--suite", str(suite), "--runs", str(runs), "--split", "train",
                   "--map", f"t0={failing}", "--json")
    assert train.exit_code == 1  # the entry is read where its mission is scored


@pytest.mark.parametrize("args, message", [
    (["--map", "t0"], "bad --map 't0': write it as KEY=PATH"),
    (["--map", "nobody=x"], "bad --map: the suite has no mission 'nobody'"),
    (["--runs", "MISSING"], "does not exist"),
    (["--runs", "RUNS", "--map", "t0=MISSING"], "bad --map t0=MISSING: it does not exist"),
    (["--map", "t0=MISSING"], "bad --map t0=MISSING: it does not exist"),
    (["--runs", "RUNS", "--dataset", "RUNS"], "from --dataset or from --runs/--map, not both"),
    (["--map", "t0=x", "--dataset", "RUNS"], "from --dataset or from --runs/--map, not both"),
    ([], "nothing to score"),
])
def test_usage_errors_exit_two_with_one_sentence(suite_and_runs, args, message):
    suite, runs = suite_and_runs
    args = [a.replace("MISSING", str(runs / "nope")).replace("RUNS", str(runs)) for a in args]
    result = invoke("score", "--suite", str(suite), *args)
    assert result.exit_code == 2
    assert message.replace("MISSING", str(runs / "nope")) in result.stderr
    assert "Traceback" not in result.output


def test_an_empty_runs_folder_is_nothing_to_score(suite_and_runs, tmp_path):
    suite, _ = suite_and_runs
    (tmp_path / "empty").mkdir()
    result = invoke("score", "--suite", str(suite), "--runs", str(tmp_path / "empty"))
    assert result.exit_code == 2 and "nothing to score" in result.stderr


def test_runs_that_all_died_before_a_line_are_scored_as_missing_not_refused(tmp_path):
    """Every mission folder is there and none holds a stream (each spawn died at once):
    that is a result, every mission missing, exit 1; not "nothing to score"."""
    suite = write_suite(tmp_path / "suite.yaml", padded([mission(f"t{i}", split="train")
                                                         for i in range(5)]), flags=["chaining"])
    runs = tmp_path / "runs"
    for i in range(5):
        (runs / f"t{i}").mkdir(parents=True)
    (runs / "t0" / "stderr.txt").write_text("connection refused\n")
    invoke("ingest", str(runs), "--out", str(tmp_path / "ds"))
    for source in (["--runs", str(runs)], ["--dataset", str(tmp_path / "ds")]):
        result = invoke("score", "--suite", str(suite), *source, "--split", "train", "--json")
        assert result.exit_code == 1, (source, result.output)
        report = json.loads(result.stdout)
        assert [v["missing"] for v in report["verdicts"]] == [True] * 5
        assert all(v["reasons"][0].startswith("no stream") for v in report["verdicts"])
        assert report["halves"]["train"]["totals"]["missing"] == 5


def test_a_hidden_copy_beside_a_run_is_passed_over_from_either_source(tmp_path):
    """t0's stream is run_1, not the cut-off .partial beside it; t1 has only a hidden
    copy, so no stream: the runs folder and its dataset say so alike."""
    suite = write_suite(tmp_path / "suite.yaml", padded([mission(f"t{i}", split="train")
                                                         for i in range(2)]), flags=["chaining"])
    runs = tmp_path / "runs"
    write_stream(runs / "t0" / "run_1" / "events.jsonl", good_run())
    for key in ("t0", "t1"):
        write_stream(runs / key / ".partial" / "events.jsonl", good_run()[:2])
    invoke("ingest", str(runs), "--out", str(tmp_path / "ds"))
    reports = []
    for source in (["--runs", str(runs)], ["--dataset", str(tmp_path / "ds")]):
        result = invoke("score", "--suite", str(suite), *source, "--split", "train", "--json")
        by_key = {v["key"]: v for v in json.loads(result.stdout)["verdicts"]}
        assert by_key["t0"]["passed"] and by_key["t0"]["source"] == "t0/run_1/events.jsonl"
        assert by_key["t1"]["missing"] and by_key["t1"]["reasons"][0].startswith("no stream")
        reports.append([(v["key"], v["passed"], v["reasons"]) for v in by_key.values()])
    assert reports[0] == reports[1]


def test_a_half_with_no_mission_is_nothing_to_score_from_either_source(tmp_path):
    """The held-out missions (padded ones) have no runs: --split test has nothing to score."""
    suite = write_suite(tmp_path / "suite.yaml", padded([mission(f"t{i}", split="train")
                                                         for i in range(3)]), flags=["chaining"])
    runs = tmp_path / "runs"
    for i in range(3):
        write_stream(runs / f"t{i}" / "events.jsonl", good_run())
    invoke("ingest", str(runs), "--out", str(tmp_path / "ds"))
    for source in (["--runs", str(runs)], ["--dataset", str(tmp_path / "ds")]):
        result = invoke("score", "--suite", str(suite), *source, "--split", "test")
        assert result.exit_code == 2, source
        assert "nothing to score: no mission of suite 'suite'" in result.stderr


def test_an_events_path_that_is_a_directory_is_no_stream(suite_and_runs, tmp_path):
    suite, runs = suite_and_runs
    (runs / "t0" / "events.jsonl").unlink()
    (runs / "t0" / "events.jsonl").mkdir()
    result = invoke("score", "--suite", str(suite), "--runs", str(runs), "--json")
    v = next(v for v in json.loads(result.stdout)["verdicts"] if v["key"] == "t0")
    assert v["missing"] and v["reasons"][0].startswith("no stream:")


def test_torn_and_binary_streams_score_without_a_traceback(suite_and_runs):
    suite, runs = suite_and_runs
    write_stream(runs / "t0" / "events.jsonl", good_run(), tail='{"seq": 99, "rec')
    (runs / "t1" / "events.jsonl").write_bytes(bytes(range(256)) * 100)
    result = invoke("score", "--suite", str(suite), "--runs", str(runs), "--json")
    by_key = {v["key"]: v for v in json.loads(result.stdout)["verdicts"]}
    assert by_key["t0"]["passed"] and by_key["t0"]["kpis"]["skipped_lines"] == 1
    assert by_key["t1"]["reasons"] == ["the stream is empty: the run failed"]


def test_unreadable_suite_path_exits_two(tmp_path):
    result = invoke("score", "--suite", str(tmp_path / "nope.yaml"), "--runs", str(tmp_path))
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_a_suite_that_check_refuses_is_not_scored_even_when_every_run_passes(tmp_path):
    """The spec: every subcommand runs check first. A one-mission suite names its tool in
    the prompt (its held-out half of none is only a warning); its one run passes every check."""
    suite = write_suite(tmp_path / "s.yaml", [mission("only", prompt="Use mcp.add on 2 and 3.")],
                        flags=["chaining"])
    write_stream(tmp_path / "runs" / "only" / "events.jsonl", good_run())
    report = tmp_path / "report"
    result = invoke("score", "--suite", str(suite), "--runs", str(tmp_path / "runs"), "--json",
                    "--report", str(report))
    assert result.exit_code == 1 and result.stdout == ""
    assert "suite 's' is not gradeable (1 problem); nothing scored:" in result.stderr
    assert "names the served tool 'mcp.add'" in result.stderr
    assert "only 0 test missions" not in result.stderr and "Traceback" not in result.output
    assert not report.exists()


def test_a_pattern_that_does_not_compile_refuses_the_suite_in_checks_words(suite_and_runs):
    suite, runs = suite_and_runs
    text = suite.read_text().replace("(?i)sum is 5", "(sum is 5", 1)
    suite.write_text(text)
    result = invoke("score", "--suite", str(suite), "--runs", str(runs), "--json")
    checked = invoke("check", "--suite", str(suite))
    assert result.exit_code == checked.exit_code == 1 and result.stdout == ""
    problem = next(line for line in checked.stderr.splitlines() if "does not compile" in line)
    assert problem in result.stderr.splitlines()


def test_a_backreference_refuses_the_suite_in_one_sentence_and_scores_nothing(suite_and_runs):
    """Never scored slowly instead: the pattern is named with why, and nothing runs."""
    suite, runs = suite_and_runs
    suite.write_text(suite.read_text().replace("(?i)sum is 5", "(sum) is \\1", 1))
    checked = invoke("check", "--suite", str(suite))
    scored = invoke("score", "--suite", str(suite), "--runs", str(runs), "--json")
    assert checked.exit_code == scored.exit_code == 1 and scored.stdout == ""
    [problem] = [line for line in checked.stderr.splitlines() if "backreference" in line]
    assert problem.endswith("pattern '(sum) is \\\\1' uses a backreference, which RE2 cannot "
                            "match in linear time; rewrite it without")
    assert problem in scored.stderr.splitlines() and "Traceback" not in checked.output


def test_check_exit_codes(tmp_path):
    good = invoke("check", "--suite", "tests/data/suites/good.yaml")
    assert good.exit_code == 0
    assert good.stdout.strip() == ("suite 'good' is gradeable: 12 missions, 4 held out (33%), "
                                   "11 of 11 claimed flags captured")
    bad = write_suite(tmp_path / "bad.yaml", [mission("a", flag="teleport")])
    result = invoke("check", "--suite", str(bad))
    assert result.exit_code == 1 and "teleport" in result.stderr


def test_score_does_not_import_heavy_modules():
    code = ("import sys; from evalkit.cli import main\n"
            "try:\n    main(['score', '--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('pandas', 'duckdb', 'pyarrow', 'openai', 'mcp', 'jinja2')"
            " if m in sys.modules]\nprint(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_a_report_written_half_way_leaves_the_last_one_whole(suite_and_runs, tmp_path,
                                                              monkeypatch):
    from evalkit.store import replace

    suite, runs = suite_and_runs
    report = tmp_path / "report"
    assert invoke("score", "--suite", str(suite), "--runs", str(runs), "--report",
                  str(report)).exit_code == 0
    before = {name: (report / name).read_bytes() for name in ("report.json", "report.md")}
    written = replace.write_parts

    def disk_fills_half_way(stream, parts):
        written(stream, [bytes(part)[:10] for part in parts])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(replace, "write_parts", disk_fills_half_way)
    result = invoke("score", "--suite", str(suite), "--runs", str(runs), "--report", str(report))
    assert result.exit_code == 2
    assert "cannot write the report" in result.stderr and "No space left" in result.stderr
    assert {name: (report / name).read_bytes() for name in before} == before
    assert sorted(p.name for p in report.iterdir()) == ["report.json", "report.md"]


@pytest.mark.slow
def test_scoring_a_runs_folder_imports_nothing_heavy(suite_and_runs):
    """The ~80-run target counts interpreter start: Arrow, NumPy and DuckDB alone
    would take a third of it, and scoring JSONL needs none of them."""
    suite, runs = suite_and_runs
    code = ("import sys; from evalkit.cli import main\n"
            f"try:\n    main(['score', '--suite', {str(suite)!r}, '--runs', {str(runs)!r}])\n"
            "except SystemExit as exit:\n    assert exit.code == 0, exit.code\n"
            "heavy = [m for m in ('pandas', 'duckdb', 'pyarrow', 'numpy', 'openai', 'mcp',"
            " 'jinja2') if m in sys.modules]\nprint(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stderr


def test_judging_in_several_processes_equals_judging_in_one(suite_and_runs, monkeypatch):
    from evalkit.eval import score as scoring
    from evalkit.eval.suite import load_suite
    from evalkit.store.replace import joined

    suite, runs = suite_and_runs
    write_stream(runs / "t3" / "events.jsonl", good_run("mcp.echo"), tail="{torn")
    (runs / "t4" / "events.jsonl").unlink()  # there, with no stream
    shutil.rmtree(runs / "h2")  # not run
    monkeypatch.setattr(scoring, "SHARE", 2)  # shares of two missions
    loaded = load_suite(suite)
    one = scoring.score(loaded, runs=runs, workers=1)
    for workers in (2, 3):
        assert joined(scoring.score(loaded, runs=runs, workers=workers).json_parts()) == \
            joined(one.json_parts())
    assert [v.reasons[0] for v in one.verdicts if v.missing] == [
        "no stream: no events.jsonl in t4 or two levels below it", "not run"]
    assert [v.key for v in one.verdicts] == [m.key for m in loaded.missions]  # suite order


def test_an_events_file_that_is_a_looping_link_is_no_stream(suite_and_runs, tmp_path):
    """A symbolic link to itself where a stream would be: no stream, in one verdict, from
    the folder and from its dataset alike (it was an OSError, exit 3, in both)."""
    suite, runs = suite_and_runs
    (runs / "t0" / "events.jsonl").unlink()
    (runs / "t0" / "events.jsonl").symlink_to("events.jsonl")
    shutil.rmtree(runs / "t1")
    (runs / "t1" / "run_1").mkdir(parents=True)
    (runs / "t1" / "run_1" / "events.jsonl").symlink_to("events.jsonl")
    done = invoke("ingest", str(runs), "--out", str(tmp_path / "ds"))
    assert done.exit_code == 0, done.output
    for source in (["--runs", str(runs)], ["--dataset", str(tmp_path / "ds")]):
        result = invoke("score", "--suite", str(suite), *source, "--json")
        assert result.exit_code == 1, (source, result.output)
        by_key = {v["key"]: v for v in json.loads(result.stdout)["verdicts"]}
        for key in ("t0", "t1"):
            assert by_key[key]["missing"] and by_key[key]["reasons"][0].startswith("no stream")
        assert by_key["t2"]["passed"]


def test_a_mean_of_the_largest_finite_numbers_is_reported_not_overflowed(suite_and_runs):
    """Streams may carry any finite number: two runs of 1e308 s sum past the largest
    float, and the train half's mean over its five runs is still reported (it was an
    OverflowError in fsum, exit 3)."""
    suite, runs = suite_and_runs
    for key in ("t0", "t1"):
        write_stream(runs / key / "events.jsonl", [*good_run()[:-1], finished(elapsed_s=1e308)])
    result = invoke("score", "--suite", str(suite), "--runs", str(runs), "--json")
    assert result.exit_code == 0, result.output
    train = json.loads(result.stdout)["halves"]["train"]["totals"]
    assert train["mean_wall_s"] == pytest.approx(2 * (1e308 / 5) + 3 * 1.25 / 5, rel=1e-12)


def test_a_run_folder_whose_name_is_not_utf8_is_scored_and_ingested(suite_and_runs, tmp_path):
    """A name of bytes that are not UTF-8 reaches Python as surrogates, which JSON and
    Parquet refuse (exit 3 in score --json and ingest); it is shown with \\xNN instead."""
    import os

    suite, runs = suite_and_runs
    odd = runs / "t0" / os.fsdecode(b"run\xff")
    write_stream(odd / "events.jsonl", good_run())
    (runs / "t0" / "events.jsonl").unlink()
    done = invoke("ingest", str(runs), "--out", str(tmp_path / "ds"))
    assert done.exit_code == 0, done.output
    for source in (["--runs", str(runs)], ["--dataset", str(tmp_path / "ds")]):
        result = invoke("score", "--suite", str(suite), *source, "--json")
        assert result.exit_code == 0, (source, result.output)
        t0 = next(v for v in json.loads(result.stdout)["verdicts"] if v["key"] == "t0")
        assert t0["passed"] and t0["source"] == "t0/run\\xff/events.jsonl"
    bad_out = invoke("ingest", str(runs), "--out", str(tmp_path / os.fsdecode(b"x\xff")))
    assert bad_out.exit_code == 2 and "take only paths that are UTF-8" in bad_out.stderr


def test_a_report_folder_that_is_a_file_is_refused_and_kept(suite_and_runs, tmp_path):
    suite, runs = suite_and_runs
    mine = tmp_path / "notes.txt"
    mine.write_text("mine\n")
    result = invoke("score", "--suite", str(suite), "--runs", str(runs), "--report", str(mine))
    assert result.exit_code == 2 and mine.read_text() == "mine\n"
    assert result.stderr == (f"Error: cannot write the report to {mine}: it is a file, and "
                             "--report names the folder that holds report.json and report.md\n")


def test_a_mistyped_map_path_is_refused_whichever_half_is_scored(suite_and_runs):
    """An entry for the other half is left unused, but a path where nothing is stays a
    typo: exit 2 under --split test as under train, nothing scored."""
    suite, runs = suite_and_runs
    for split in ("test", "train", "all"):
        result = invoke("score", "--suite", str(suite), "--runs", str(runs), "--split", split,
                        "--map", f"t0={runs / 'nope'}")
        assert result.exit_code == 2, split
        assert f"bad --map t0={runs / 'nope'}: it does not exist" in result.stderr
        assert result.stdout == ""
