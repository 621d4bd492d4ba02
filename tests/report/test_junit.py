"""`--junit FILE` on score, run and measure: what a CI server reads, checked by its schema
(tests/data/junit.xsd, the Jenkins xUnit plugin's) and read back by junitparser."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import xmlschema
from junitparser import Error, Failure, JUnitXml, Skipped

from evalkit.report import junit
from tests.harness.conftest import FOREIGN, foreign_suite, invoke

ROOT = Path(__file__).resolve().parents[2]
XSD = ROOT / "tests" / "data" / "junit.xsd"
STUB = ROOT / "suites" / "stub"
GOOD, BAD = ROOT / "recordings" / "stub" / "good", ROOT / "recordings" / "stub" / "bad"


@pytest.fixture(scope="module")
def schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(str(XSD))


def read(path: Path, schema: xmlschema.XMLSchema) -> JUnitXml:
    """Valid against the CI schema, then parsed the way a CI plugin parses it."""
    schema.validate(str(path))
    return JUnitXml.fromfile(str(path))


def cases(xml: JUnitXml) -> dict[tuple[str, str], object]:
    return {(suite.name, case.name): case for suite in xml for case in suite}


@pytest.mark.slow
def test_score_of_the_good_recordings_is_a_suite_per_half_all_passing(
        tmp_path: Path, schema: xmlschema.XMLSchema) -> None:
    out = tmp_path / "ci" / "junit.xml"
    result = invoke("score", "--suite", STUB, "--runs", GOOD, "--junit", out)
    assert result.exit_code == 0, result.stderr
    xml = read(out, schema)
    report = json.loads((GOOD / "report.json").read_text())
    assert [s.name for s in xml] == ["stub.train", "stub.test"]
    assert {s.name: s.tests for s in xml} == {"stub.train": 8, "stub.test": 4}
    assert xml.tests == 12 and xml.failures == 0 and xml.errors == 0
    found = cases(xml)
    for verdict in report["verdicts"]:
        case = found[(f"stub.{verdict['split']}", verdict["key"])]
        assert case.is_passed and case.classname == f"stub.{verdict['split']}"
        # timing is the recording's own elapsed_s, not how long scoring took
        assert case.time == pytest.approx(verdict["kpis"]["elapsed_s"], abs=5e-4)
        assert f"source: {verdict['source']}" in case.system_out
    # the same runs give the same bytes: the file can be committed and diffed
    again = tmp_path / "again.xml"
    assert invoke("score", "--suite", STUB, "--runs", GOOD, "--junit", again).exit_code == 0
    assert again.read_bytes() == out.read_bytes()


def test_a_failed_mission_is_a_failure_carrying_its_reasons_and_checks(
        tmp_path: Path, schema: xmlschema.XMLSchema) -> None:
    out = tmp_path / "junit.xml"
    result = invoke("score", "--suite", STUB, "--runs", BAD, "--junit", out)
    assert result.exit_code == 1
    xml = read(out, schema)
    assert xml.tests == 12 and xml.failures == 12 and xml.errors == 0
    report = json.loads((BAD / "report.json").read_text())
    found = cases(xml)
    for verdict in report["verdicts"]:
        (failure,) = found[(f"stub.{verdict['split']}", verdict["key"])].result
        assert isinstance(failure, Failure)
        assert failure.type.split(",") == list(dict.fromkeys(verdict["checks"]))
        for check, reason in zip(verdict["checks"], verdict["reasons"], strict=True):
            assert reason in failure.message
            assert f"{check}: {reason}" in failure.text


@pytest.mark.slow
def test_a_missing_run_is_skipped_and_a_tampered_one_an_error(
        tmp_path: Path, schema: xmlschema.XMLSchema) -> None:
    runs = tmp_path / "runs"
    shutil.copytree(GOOD, runs)
    shutil.rmtree(runs / "chaining")
    with open(runs / "state" / "events.jsonl", "a", encoding="utf-8") as stream:
        stream.write("\n")  # a byte added after the folder was sealed
    out = tmp_path / "junit.xml"
    result = invoke("score", "--suite", STUB, "--runs", runs, "--junit", out,
                    "--trust", ROOT / "recordings" / "evalkit.pub")
    assert result.exit_code == 1
    xml = read(out, schema)
    assert xml.errors == 1 and xml.failures == 0
    (skipped,) = cases(xml)[("stub.train", "chaining")].result
    assert isinstance(skipped, Skipped) and skipped.message == "not run"
    (error,) = cases(xml)[("stub.train", "state")].result
    assert isinstance(error, Error) and error.type == "tampered"
    assert "recording altered after it was closed" in error.message
    train = next(s for s in xml if s.name == "stub.train")
    assert (train.tests, train.skipped, train.errors) == (8, 1, 1)


@pytest.mark.slow
def test_run_writes_infrastructure_failures_as_errors(
        tmp_path: Path, schema: xmlschema.XMLSchema) -> None:
    suite = foreign_suite(tmp_path / "sums.yaml",
                          flags={"t1": ["--silent"], "h0": ["--endpoint-down"]})
    out = tmp_path / "junit.xml"
    result = invoke("run", "--suite", suite, "--out", tmp_path / "run", "--quiet", "--jobs", "2",
                    "--junit", out, "--", *FOREIGN)
    assert result.exit_code == 1, result.stderr
    xml = read(out, schema)
    assert xml.tests == 8 and xml.errors == 2 and xml.failures == 0
    found = cases(xml)
    (silent,) = found[("sums.train", "t1")].result
    (down,) = found[("sums.test", "h0")].result
    assert isinstance(silent, Error) and silent.type == "zero_events"
    assert isinstance(down, Error) and down.type == "endpoint_failure"
    assert found[("sums.train", "t0")].is_passed


@pytest.mark.slow
def test_measure_writes_a_suite_per_row_and_half_and_a_case_per_repeat(
        folders: dict, schema: xmlschema.XMLSchema, tmp_path: Path) -> None:
    out = tmp_path / "matrix.xml"
    result = invoke("measure", "--suite", folders["suite"], "--out", folders["measure"],
                    "--rescore", "--junit", out)
    assert result.exit_code == 0, result.stderr
    xml = read(out, schema)
    names = [s.name for s in xml]
    assert names == ["suite.direct.train", "suite.direct.test", "suite.swarm.train",
                     "suite.swarm.test", "suite.native.train", "suite.native.test",
                     "suite.claims"]
    by_name = {s.name: s for s in xml}
    assert by_name["suite.direct.train"].tests == 5 * 3
    found = cases(xml)
    assert found[("suite.direct.train", "t0 [rep 1]")].is_passed
    assert isinstance(found[("suite.direct.train", "t1 [rep 2]")].result[0], Failure)
    (never,) = found[("suite.native.test", "h2 [rep 3]")].result
    assert isinstance(never, Skipped) and never.message == "not run"
    (row,) = found[("suite.claims", "claims")].result
    assert isinstance(row, Skipped)
    assert row.message == "row not run: the manifest has no claim table"


@pytest.mark.parametrize("command", ["score", "run"])
def test_a_junit_target_that_is_not_evalkits_is_refused_in_one_sentence_before_any_work(
        tmp_path: Path, command: str) -> None:
    precious = tmp_path / "events.jsonl"
    precious.write_text('{"event": "mission_started"}\n')
    args = (["--runs", GOOD] if command == "score"
            else ["--out", tmp_path / "out", "--quiet", "--", *FOREIGN])
    result = invoke(command, "--suite", STUB if command == "score" else foreign_suite(
        tmp_path / "s.yaml"), "--junit", precious, *args)
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: refusing to write the JUnit file over")
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert precious.read_text() == '{"event": "mission_started"}\n'
    assert not (tmp_path / "out").exists()  # nothing was spawned


def test_a_folder_as_the_junit_file_is_a_usage_error(tmp_path: Path) -> None:
    result = invoke("score", "--suite", STUB, "--runs", GOOD, "--junit", tmp_path)
    assert result.exit_code == 2
    assert "is a folder; give the JUnit file's own name" in result.stderr


def test_text_xml_cannot_carry_is_replaced_and_the_file_still_parses(
        tmp_path: Path, schema: xmlschema.XMLSchema) -> None:
    verdict = {"key": "m\x01", "flag": "chaining", "split": "train", "passed": False,
               "missing": False, "reasons": ["the answer said \x00\x1b[31mred"],
               "checks": ["answer_must_match"], "kpis": {"records": 4, "elapsed_s": None},
               "source": "m/events.jsonl"}
    path = junit.write(junit.from_score({"suite": "s", "verdicts": [verdict]}),
                       tmp_path / "j.xml")
    xml = read(path, schema)
    (case,) = [case for suite in xml for case in suite]
    assert case.name == "m\ufffd" and case.time is None  # no time recorded: none claimed
    assert "\ufffd\ufffd[31mred" in case.result[0].message
    # written again over its own file: evalkit's own output is replaceable
    junit.write(junit.from_score({"suite": "s", "verdicts": []}), path)
    assert read(path, schema).tests == 0
