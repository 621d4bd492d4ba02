"""`evalkit run`: any agent spawned once per mission, captured, scored."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.harness.conftest import FOREIGN, STUB_SUITE, foreign_suite, invoke, read_json

LAYOUT = {"events.jsonl", "runs", "stdout.txt", "stderr.txt", "command.json"}


@pytest.mark.slow
def test_a_foreign_agent_is_spawned_once_per_mission_with_objective_events_and_runs_root(
        suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = invoke("run", "--suite", suite, "--out", out, "--", *FOREIGN)
    assert result.exit_code == 0, result.output + result.stderr
    keys = [f"t{i}" for i in range(5)] + [f"h{i}" for i in range(3)]
    for key in keys:
        folder = out / key
        assert LAYOUT <= {p.name for p in folder.iterdir()}
        said = json.loads((folder / "stdout.txt").read_text().splitlines()[0])
        objective = f"Work out the sum for case {key}."
        # The objective is the first argument after the spawn line, then --events fd:N.
        assert said["argv"][0] == objective
        assert said["argv"][1] == "--events" and said["argv"][2].startswith("fd:")
        assert len(said["argv"]) == 3
        assert said["runs"] == str((out / key / "runs").resolve())
        assert (folder / "runs" / "foreign.txt").read_text() == objective
        capture = read_json(folder / "command.json")
        assert capture["argv"] == [*FOREIGN, objective, "--events", said["argv"][2]]
        assert capture["exit_code"] == 0 and capture["timed_out"] is False
        assert capture["wall_s"] > 0 and capture["spawn_error"] is None
    report = read_json(out / "report.json")
    assert report["format"] == "evalkit-score" and report["passed"] is True
    assert [v["key"] for v in report["verdicts"]] == keys
    assert {v["category"] for v in report["verdicts"]} == {"pass"}
    assert all(v["infra"] is None for v in report["verdicts"])
    assert report["halves"]["train"]["categories"]["pass"] == 5
    assert report["halves"]["test"]["categories"]["rate"]["value"] == 1.0
    assert "## Failure taxonomy" in (out / "report.md").read_text()
    run = read_json(out / "run.json")
    assert run["suite"] == "sums" and run["spawn"] == FOREIGN and run["builtin"] is False
    assert {"commit", "date", "jobs", "timeout", "split", "suite_path"} <= set(run)


@pytest.mark.slow
def test_the_objective_and_runs_root_go_where_the_spawn_line_puts_them(
        suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = invoke("run", "--suite", suite, "--out", out, "--split", "test", "--",
                    *FOREIGN, "--objective", "{objective}", "--runs", "{runs}", "--model", "m")
    assert result.exit_code == 0, result.stderr
    said = json.loads((out / "h1" / "stdout.txt").read_text().splitlines()[0])
    runs = str((out / "h1" / "runs").resolve())
    assert said["argv"][:6] == ["--objective", "Work out the sum for case h1.", "--runs", runs,
                                "--model", "m"]
    assert said["argv"][6] == "--events" and len(said["argv"]) == 8  # not appended again
    assert (out / "h1" / "runs" / "foreign.txt").is_file()
    assert not (out / "t0").exists()  # --split test ran the held-out half only
    assert list(read_json(out / "report.json")["halves"]) == ["test"]


@pytest.mark.slow
def test_command_json_and_provenance_withhold_credentials(
        suite: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_TEST_TOKEN", "tok-very-secret-value")
    out = tmp_path / "out"
    key = "sk-abcdefghijklmnopqrstuvwx"
    url = "https://alice:hunter22@mcp.example.com/v1/mcp?token=zz-top-secret&team=7"
    result = invoke("run", "--suite", suite, "--out", out, "--split", "test", "--", *FOREIGN,
                    "--api-key", key, "--mcp-url", url, "--model", "tok-very-secret-value")
    assert result.exit_code == 0, result.stderr
    for secret in (key, "hunter22", "zz-top-secret", "tok-very-secret-value", "alice:"):
        for name in ("command.json", "stdout.txt", "stderr.txt"):
            assert secret not in (out / "h0" / name).read_text(), (secret, name)
        assert secret not in (out / "run.json").read_text()
    argv = read_json(out / "h0" / "command.json")["argv"]
    assert argv[argv.index("--api-key") + 1] == "[REDACTED]"
    assert argv[argv.index("--mcp-url") + 1] == (
        "https://[REDACTED]@mcp.example.com/v1/mcp?token=[REDACTED]&team=[REDACTED]")
    # The agent itself got the real values.
    said = json.loads((out / "h0" / "stdout.txt").read_text().splitlines()[0].replace(
        "[REDACTED]", "x"))
    assert said["argv"][said["argv"].index("--mcp-url") + 1].startswith("https://")


@pytest.mark.slow
def test_a_declared_secret_is_withheld_from_the_capture_of_a_foreign_agent(
        suite: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No shape, no credential name: only ``--secret`` says the value is one."""
    monkeypatch.setenv("HARNESS_TEST_DSN", "dsn-shapeless-value-42")
    out = tmp_path / "out"
    result = invoke("run", "--suite", suite, "--out", out, "--split", "test", "--secret",
                    "HARNESS_TEST_DSN", "--", *FOREIGN, "--model", "dsn-shapeless-value-42")
    assert result.exit_code == 0, result.stderr
    for name in ("command.json", "stdout.txt", "stderr.txt"):
        assert "dsn-shapeless-value-42" not in (out / "h0" / name).read_text(), name
    assert "dsn-shapeless-value-42" not in (out / "run.json").read_text()
    assert "[REDACTED]" in (out / "h0" / "stdout.txt").read_text()


@pytest.mark.slow
def test_a_hanging_agent_is_killed_at_the_timeout_with_its_process_group(
        tmp_path: Path) -> None:
    suite = foreign_suite(tmp_path / "hang.yaml", flags={"h0": ["--hang"]})
    out = tmp_path / "out"
    started = time.monotonic()
    result = invoke("run", "--suite", suite, "--out", out, "--split", "test", "--timeout", "2",
                    "--jobs", "3", "--", *FOREIGN)
    took = time.monotonic() - started
    assert result.exit_code == 1  # h0 did not pass
    assert took < 15, took
    capture = read_json(out / "h0" / "command.json")
    assert capture["timed_out"] is True and 2 <= capture["wall_s"] < 10
    assert capture["exit_code"] == -signal.SIGTERM
    verdict = next(v for v in read_json(out / "report.json")["verdicts"] if v["key"] == "h0")
    # Scored from what it wrote: started, never finished.
    assert verdict["kpis"]["records"] == 2 and verdict["passed"] is False
    assert verdict["category"] == "infra" and verdict["infra"].startswith("timeout")
    report = read_json(out / "report.json")["halves"]["test"]["categories"]
    assert (report["pass"], report["infra"]) == (2, 1)
    assert report["rate"]["value"] == pytest.approx(0.6667)
    assert report["rate_without_infra"]["value"] == 1.0
    # The grandchild that held the stream open died with the group.
    ps = os.popen("ps -eo args").read()
    assert "time.sleep(120)" not in ps


@pytest.mark.slow
def test_jobs_4_gives_the_same_report_bytes_as_jobs_1(suite: Path, tmp_path: Path) -> None:
    reports = []
    for jobs in ("1", "4"):
        out = tmp_path / f"jobs{jobs}"
        result = invoke("run", "--suite", suite, "--out", out, "--jobs", jobs, "--", *FOREIGN)
        assert result.exit_code == 0, result.stderr
        assert result.stderr.count("] ") == 8  # one progress line per mission
        reports.append(((out / "report.json").read_bytes(), (out / "report.md").read_bytes()))
    assert reports[0] == reports[1]


@pytest.mark.slow
def test_every_infra_error_is_told_apart_from_a_failure(tmp_path: Path) -> None:
    suite = foreign_suite(tmp_path / "mixed.yaml",
                          flags={"t1": ["--silent"], "t2": ["--endpoint-down"]})
    out = tmp_path / "out"
    result = invoke("run", "--suite", suite, "--out", out, "--split", "train", "--", *FOREIGN)
    assert result.exit_code == 1
    verdicts = {v["key"]: v for v in read_json(out / "report.json")["verdicts"]}
    assert verdicts["t0"]["category"] == "pass"
    assert verdicts["t1"]["category"] == "infra"
    # The kind, then the cause an operator can act on: the agent's last line on stderr.
    assert verdicts["t1"]["infra"] == ("zero_events: the agent wrote no record (exit code 1); "
                                       "the agent's last words on stderr: nothing to say")
    assert verdicts["t2"]["category"] == "infra"
    assert verdicts["t2"]["infra"] == "endpoint_failure: model foreign/m failed: HTTP 500: boom"
    cats = read_json(out / "report.json")["halves"]["train"]["categories"]
    assert (cats["pass"], cats["fail"], cats["missing"], cats["infra"]) == (3, 0, 0, 2)
    assert "train: 3/5 passed; 0 failed, 0 missing, 2 infra errors" in result.output


def test_an_agent_that_cannot_be_started_is_an_infra_error(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = invoke("run", "--suite", suite, "--out", out, "--split", "test", "--",
                    str(tmp_path / "no-such-agent"))
    assert result.exit_code == 1
    capture = read_json(out / "h0" / "command.json")
    assert capture["exit_code"] is None and "cannot start" in capture["spawn_error"]
    verdict = read_json(out / "report.json")["verdicts"][0]
    assert verdict["category"] == "infra" and verdict["infra"].startswith("spawn_failure")


def test_an_ungradeable_suite_is_refused_before_anything_is_spawned(tmp_path: Path) -> None:
    suite = foreign_suite(tmp_path / "thin.yaml", train=8, test=1)  # 8+: the split is a rule
    out = tmp_path / "out"
    result = invoke("run", "--suite", suite, "--out", out, "--", *FOREIGN)
    assert result.exit_code == 1
    assert "not gradeable" in result.stderr and "only 1 test mission" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize(("args", "said"), [
    (["--agent", "bad", "--", *FOREIGN], "cannot be combined with a spawn line"),
    ([], "names no scripted agents"),
    (["--secret", "EVALKIT_TEST_NEVER_SET", "--", *FOREIGN],
     "--secret EVALKIT_TEST_NEVER_SET: no environment variable EVALKIT_TEST_NEVER_SET is set"),
])
def test_usage_errors(suite: Path, tmp_path: Path, args: list[str], said: str) -> None:
    result = invoke("run", "--suite", suite, "--out", tmp_path / "out", *args)
    assert result.exit_code == 2 and said in result.stderr


@pytest.mark.parametrize(("variant", "stem"), [("baad", "<key>.baad.yaml"), ("-", "<key>.-.yaml")])
def test_an_agent_no_mission_has_is_refused_naming_those_there_are(tmp_path: Path, variant: str,
                                                                   stem: str) -> None:
    """A typo was one warning per mission and "nothing to score"; now one sentence."""
    out = tmp_path / "out"
    result = invoke("run", "--suite", STUB_SUITE, "--out", out, "--agent", variant)
    assert result.exit_code == 2
    assert f"holds no scripted agent {stem} for any mission; --agent takes good, bad" \
        in result.stderr
    assert "is not run" not in result.stderr and not out.exists()


@pytest.mark.slow
def test_agent_good_names_the_plain_scripts(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """``good`` is what run.json and the corpus call ``<key>.yaml``; --agent takes it too."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    result = invoke("run", "--suite", STUB_SUITE, "--out", out, "--split", "test",
                    "--agent", "good")
    assert result.exit_code == 0, result.stderr
    assert read_json(out / "run.json")["agent"] == "good"
    assert {v["category"] for v in read_json(out / "report.json")["verdicts"]} == {"pass"}


def test_a_folder_that_already_holds_runs_is_refused(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "t0").mkdir(parents=True)
    result = invoke("run", "--suite", suite, "--out", out, "--", *FOREIGN)
    assert result.exit_code == 2 and "not empty" in result.stderr


@pytest.mark.slow
def test_fixtures_are_staged_into_each_mission_folder(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "table.csv").write_text("a,b\n1,2\n")
    suite = foreign_suite(tmp_path / "fx.yaml", fixtures="data")
    out = tmp_path / "out"
    result = invoke("run", "--suite", suite, "--out", out, "--split", "test", "--", *FOREIGN)
    assert result.exit_code == 0, result.stderr
    assert (out / "h0" / "work" / "table.csv").read_text() == "a,b\n1,2\n"
    assert read_json(out / "h0" / "command.json")["cwd"] == str((out / "h0" / "work").resolve())


# -- the built-in runtime ------------------------------------------------------------------------


def _normalised(report: dict) -> dict:
    """Two runs of the same scripted agent differ only in run ids and measured time."""
    for v in report["verdicts"]:
        v["kpis"]["run_id"] = v["kpis"]["elapsed_s"] = None
    for half in report["halves"].values():
        half["totals"]["mean_wall_s"] = None
        for flag in half["by_flag"].values():
            flag["mean_wall_s"] = None
    return report


@pytest.mark.slow
def test_the_built_in_runtime_runs_the_suites_scripted_agents_on_the_stub_plane(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the runtime's audit and approvals land in the cwd
    reports = []
    for jobs in ("1", "3"):
        out = tmp_path / f"jobs{jobs}"
        result = invoke("run", "--suite", STUB_SUITE, "--out", out, "--split", "test",
                        "--jobs", jobs)
        assert result.exit_code == 0, result.output + result.stderr
        reports.append(_normalised(read_json(out / "report.json")))
        capture = read_json(out / "units-1" / "command.json")
        argv = capture["argv"]
        assert argv[1:4] == ["-m", "evalkit.cli", "mission"]
        assert argv[argv.index("--script") + 1].endswith("agents/units-1.yaml")
        assert "evalkit.planes.stub" in argv[argv.index("--mcp-stdio") + 1]
        assert argv[argv.index("--events") - 1].startswith("How many units")
        run = read_json(out / "run.json")
        assert run["builtin"] is True and run["agent"] == "good"
        if "--skill" in argv:
            assert argv[argv.index("--skill") + 1].endswith("SKILL.md")
        else:  # the runtime refused --skill: the run says so
            assert any("--skill" in note for note in run["notes"])
        runs = list((out / "units-1" / "runs").iterdir())
        assert len(runs) == 1 and (runs[0] / "events.jsonl").is_file()
    assert reports[0] == reports[1]
    assert {v["category"] for v in reports[0]["verdicts"]} == {"pass"}


@pytest.mark.slow
def test_a_bad_scripted_agent_fails_and_missions_without_one_are_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    result = invoke("run", "--suite", STUB_SUITE, "--out", out, "--split", "test",
                    "--agent", "bad")
    assert result.exit_code == 1
    assert "mission 'add-2' is not run: no scripted agent add-2.bad.yaml" in result.stderr
    verdicts = {v["key"]: v for v in read_json(out / "report.json")["verdicts"]}
    assert verdicts["units-1"]["category"] == "fail"
    assert any("12,?148" in r for r in verdicts["units-1"]["reasons"])
    assert verdicts["add-2"]["category"] == "missing"
    assert read_json(out / "run.json")["agent"] == "bad"
