"""The committed corpus, read as it is: complete, tidy, conforming, and judged as its missions say.

Every good recording passes; every bad one fails for the reason its mission
exists to catch — ``BAD_REASONS`` names that reason for each (suite, mission),
and a bad recording that fails for an infrastructure reason instead (no
stream, a record off contract, a run cut off) fails the test. No model, no
subprocess: these read files.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from evalkit.contract import conforms
from evalkit.eval.corpus import GOOD, TITLE, readme
from evalkit.eval.score import score
from evalkit.eval.suite import load_suite
from evalkit.pricing import EXAMPLE, load
from evalkit.store.reader import read_events_file
from tests.corpus.conftest import (
    IDS,
    MACHINE_FIELDS,
    RECORDINGS,
    SUITES,
    TARGETS,
    committed,
    mission_folders,
    read_json,
    read_jsonl,
    run_dir,
    verdicts,
)

pytestmark = pytest.mark.usefixtures("corpus_present")

#: For every bad agent, the failure its mission exists to catch: substrings that must
#: each appear in one of the verdict's reasons.
BAD_REASONS: dict[str, dict[str, list[str]]] = {
    "stub": {
        "orientation": ["never called mcp.list_assets"],
        "chaining": ["never called mcp.multiply", "grounded=False"],
        "absence": ["which this mission forbids", r"(customer\s+)?returns"],
        "state": ["never called mcp.unlock", "never called mcp.vault_read"],
        "boundary": ["ended 'answered'; this mission wants awaiting_approval"],
        "disambiguation": ["does not match /12,?481/", "matches /12,?148/"],
        "submission": ["never called mcp.submit"],
        "synthesis": ["never called mcp.multiply", "does not match /4,?218,?578/"],
        "routing": ["never called mcp.remote_shell",
                    "reached for run_shell_command, which this mission forbids"],
        "partial": ["does not match /4,?218,?578/"],
        "protocol": ["replies could not be read; this mission allows 0"],
        "truncation": ["never called mission_result", "does not match /dogwood-1/"],
    },
    "analyst": {
        "outliers": ["never called run_python_code", "grounded=False", "/SO-1012/"],
        "region-revenue": ["does not match /12,?301/"],
        "busiest-month": ["grounded=False", "matches /9,?850/"],
        "unparseable": [r"does not match /\b6\b/", r"matches /(?i)\b5\b[^.]*error/"],
        "latency": [r"does not match /168\.6/", r"matches /156\.6/"],
        "slowest-request": ["never called run_python_code", "does not match /1,?988/"],
        "missing-file": ["ended 'answered_with_caveat'", "matches /(?i)refund"],
        "gated-compute": ["this mission wants awaiting_approval"],
    },
    "coding": {
        "orientation": ["never called repo_map", "grounded=False"],
        "test-status": ["never called verify", "grounded=False"],
        "history": ["never called git", "/(?i)initial import/"],
        "feature": ["never called verify", "grounded=False"],
        "two-file-fix": ["grounded=False", r"does not match /ledger/statement\.py/"],
        "rename": [r"does not match /(?i)\b4 (?:tests? )?passed/", "failed/, which this mission "
                   "forbids"],
        "red-green": ["ended 'answered_with_caveat'", "grounded=False"],
        "outside-edit": ["does not match /(?i)outside/", "which this mission forbids"],
    },
    "research": {
        "follow-link": ["grounded=False", "does not match /1,?284/"],
        "compare-reports": ["grounded=False", r"does not match /18\.4/"],
        "disambiguation": [r"does not match /\b11\b/", r"matches /\b6\b/"],
        "truncation": ["never called mission_result", "does not match /27,?365/"],
        "orientation": ["never called fetch_page", "grounded=False"],
        "missing-page": ["ended 'answered_with_caveat'", "which this mission forbids"],
        "off-limits": [r"does not match /(?i)\b(off limits", r"matches /(?i)\bstarted"],
        "partial": [r"does not match /15\.9/"],
    },
}
#: Checks a verdict can fail on that say the run broke, not that the agent erred.
INFRA_CHECKS = {"missing", "empty_stream", "contract", "unfinished", "answer_pattern"}
#: Absolute-path prefixes that betray a machine, wherever they appear outside MACHINE_FIELDS.
HOST_PREFIXES = ("/tmp/", "/home/", "/root/", "/Users/", "/private/var/", "/var/folders/")


def _scored(suite: str, variant: str) -> dict[str, Any]:
    return score(load_suite(SUITES / suite), runs=RECORDINGS / suite / variant,
                 pricing=load(EXAMPLE)).to_dict()


def test_the_corpus_holds_every_shipped_suite_and_agent_variant() -> None:
    on_disk = sorted((p.parent.name, p.name) for p in RECORDINGS.glob("*/*") if p.is_dir())
    assert on_disk == sorted(TARGETS)
    assert {v for _, v in TARGETS} >= {GOOD, "bad"}
    for suite, variant in TARGETS:
        keys = [f.name for f in mission_folders(RECORDINGS, suite, variant)]
        assert sorted(keys) == sorted(m.key for m in load_suite(SUITES / suite).missions)


def test_the_readme_is_the_one_the_command_writes() -> None:
    text = (RECORDINGS / "README.md").read_text(encoding="utf-8")
    assert text.startswith(TITLE)
    assert text == readme(RECORDINGS), "recordings/README.md is stale: run evalkit record-corpus"


@pytest.mark.parametrize(("suite", "variant"), TARGETS, ids=IDS)
def test_every_mission_folder_keeps_what_a_reader_needs_and_nothing_else(
        suite: str, variant: str) -> None:
    top = sorted(p.name for p in (RECORDINGS / suite / variant).iterdir() if p.is_file())
    assert top == ["manifest.json", "report.json", "report.md"]
    judged = {m.key for m in load_suite(SUITES / suite).missions if "judge" in m.settings}
    for folder in mission_folders(RECORDINGS, suite, variant):
        run = run_dir(folder)
        files = sorted(str(p.relative_to(folder)).replace(run.name, "<run>")
                       for p in folder.rglob("*") if p.is_file())
        # A judged mission keeps what its (scripted) judge said, sealed apart.
        judgments = ["judge/judge.jsonl", "judge/manifest.json"] if folder.name in judged else []
        assert files == ["audit/<run>.jsonl", "command.json", "events.jsonl", *judgments,
                         "manifest.json", "runs/<run>/certificates.jsonl", "runs/<run>/events.jsonl",
                         "runs/<run>/manifest.json",
                         "runs/<run>/meta.json", "runs/<run>/model.jsonl",
                         "runs/<run>/tools.jsonl", "stderr.txt", "stdout.txt"], folder
        for small in ("stdout.txt", "stderr.txt"):
            assert (folder / small).stat().st_size < 16_000, folder / small


@pytest.mark.parametrize(("suite", "variant"), TARGETS, ids=IDS)
def test_every_record_conforms_and_both_copies_of_the_stream_agree(suite: str,
                                                                   variant: str) -> None:
    for folder in mission_folders(RECORDINGS, suite, variant):
        run = run_dir(folder)
        piped = read_events_file(folder / "events.jsonl")
        stored = read_events_file(run / "events.jsonl")
        for stream in (piped, stored):
            assert stream.blank == stream.torn == 0, stream.source
            assert stream.records, stream.source
            for line, record in zip(stream.lines, stream.records, strict=True):
                assert conforms(record) == [], f"{stream.source}:{line}"
        assert piped.records == stored.records, folder
        assert [e["seq"] for e in read_jsonl(run / "events.jsonl")] == \
            list(range(1, len(stored.records) + 1))
        assert stored.records[0]["event"] == "mission_started"
        assert stored.records[-1]["event"] == "mission_finished"
        assert stored.records[0]["run_id"] == run.name
        meta = read_json(run / "meta.json")
        assert meta["run_id"] == run.name and meta["last_seq"] == len(stored.records)
        model = read_jsonl(run / "model.jsonl")
        assert [m["call"] for m in model] == list(range(1, len(model) + 1))
        assert all(m["kind"] in ("mission", "plain") for m in model)
        tools = read_jsonl(run / "tools.jsonl")
        assert tools[0]["call"] == 0 and "catalogue" in tools[0]
        calls = [t["call"] for t in tools if "catalogue" not in t]  # a catalogue may change
        assert calls == list(range(1, len(calls) + 1))


@pytest.mark.parametrize(("suite", "variant"), TARGETS, ids=IDS)
def test_the_committed_report_is_what_scoring_the_recordings_gives(suite: str,
                                                                   variant: str) -> None:
    assert _scored(suite, variant) == committed(suite, variant)


@pytest.mark.parametrize("suite", sorted({s for s, _ in TARGETS}))
def test_every_good_recording_passes(suite: str) -> None:
    found = verdicts(committed(suite, GOOD))
    assert {k: v["reasons"] for k, v in found.items() if not v["passed"]} == {}
    assert all(v["kpis"]["outcome"] is not None for v in found.values())


@pytest.mark.parametrize(("suite", "variant"),
                         [t for t in TARGETS if t[1] != GOOD], ids=[i for i, t in
                                                                    zip(IDS, TARGETS, strict=True)
                                                                    if t[1] != GOOD])
def test_every_bad_recording_fails_for_the_reason_its_mission_names(suite: str,
                                                                    variant: str) -> None:
    expected = BAD_REASONS[suite]
    found = verdicts(committed(suite, variant))
    assert set(found) == set(expected), "BAD_REASONS must name every mission of the suite"
    for key, verdict in found.items():
        assert not verdict["passed"], f"{suite}/{variant}/{key} passed"
        assert not set(verdict["checks"]) & INFRA_CHECKS, (key, verdict["reasons"])
        for wanted in expected[key]:
            assert any(wanted in reason for reason in verdict["reasons"]), \
                f"{suite}/{variant}/{key}: no reason says {wanted!r}; it says {verdict['reasons']}"


# -- nothing machine-specific beyond the documented fields -------------------------------------


def _strings(value: Any, kind: str, path: str) -> list[tuple[str, str]]:
    """(dotted path, string) for every string in ``value`` outside MACHINE_FIELDS."""
    if (kind, path) in MACHINE_FIELDS:
        return []
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            out += _strings(v, kind, f"{path}.{k}" if path else k)
        return out
    if isinstance(value, list):
        return [s for v in value for s in _strings(v, kind, path)]
    return [(path, value)] if isinstance(value, str) else []


def _every_string(path: Path) -> list[tuple[str, str]]:
    if path.name == "events.jsonl":
        out = []
        for line in read_jsonl(path):
            record = line.get("record", line)
            out += _strings(record, "event", str(record.get("event")))
        return out
    if path.suffix == ".jsonl":
        return [s for line in read_jsonl(path) for s in _strings(line, path.name, "")]
    if path.name == "meta.json":
        return _strings(read_json(path), "meta", "")
    if path.suffix == ".json":
        return _strings(read_json(path), path.name, "")
    return [("text", path.read_text(encoding="utf-8"))]


def _machine_prefixes() -> set[str]:
    """The recording machine's checkout and interpreter, as the recordings name them."""
    prefixes: set[str] = set()
    for meta_file in RECORDINGS.glob("*/*/*/runs/*/meta.json"):
        flags = read_json(meta_file)["meta"]["flags"]
        for skill in flags["skills"]:
            prefixes.add(skill.split("/suites/")[0] + "/")
        for command in flags["mcp_stdio"]:
            prefixes.add(command.split()[0].rsplit("/", 1)[0] + "/")
    return prefixes


@pytest.mark.slow
def test_only_the_documented_fields_name_the_recording_machine() -> None:
    prefixes = _machine_prefixes() | set(HOST_PREFIXES)
    leaks = []
    for path in sorted(RECORDINGS.rglob("*")):
        if path.is_file():
            leaks += [(str(path.relative_to(RECORDINGS)), where, text[:120])
                      for where, text in _every_string(path)
                      if any(p in text for p in prefixes)]
    assert leaks == []


@pytest.mark.parametrize(("suite", "variant"), TARGETS, ids=IDS)
def test_the_machine_fields_say_what_the_docs_say(suite: str, variant: str) -> None:
    """Absolute, but only ever the suite's own files, the mission's folder, the stub server."""
    stem = "" if variant == GOOD else f".{variant}"
    staged = load_suite(SUITES / suite).resolve("fixtures") is not None
    for folder in mission_folders(RECORDINGS, suite, variant):
        run = run_dir(folder)
        flags = read_json(run / "meta.json")["meta"]["flags"]
        assert flags["script"].endswith(f"/suites/{suite}/agents/{folder.name}{stem}.yaml")
        assert [s.rsplit("/suites/", 1)[1] for s in flags["skills"]] == [f"{suite}/SKILL.md"]
        assert all(c.endswith(" -m evalkit.planes.stub") for c in flags["mcp_stdio"])
        tail = f"/{suite}/{variant}/{folder.name}/work" if staged else None
        assert tail is None or flags["root"].endswith(tail), flags["root"]
        started = read_events_file(folder / "events.jsonl").records[0]
        assert started["audit_ref"].endswith(
            f"/{suite}/{variant}/{folder.name}/audit/{run.name}.jsonl")
        command = read_json(folder / "command.json")
        assert command["argv"][:4] == ["python", "-m", "evalkit.cli", "mission"]
        assert not any(re.match(r"/", token) for token in command["argv"])
        assert not command["cwd"].startswith("/") and command["exit_code"] == 0


def test_the_corpus_is_sealed_whole_with_its_committed_key() -> None:
    """Every mission, run and variant folder of recordings/ is sealed with the key whose
    public half is recordings/evalkit.pub, and nothing in it changed since."""
    from evalkit.store.seal import VERIFIED, Checker, verify_paths
    from evalkit.store.signing import Trust

    trust = Trust()
    trust.add_file(RECORDINGS / "evalkit.pub")
    findings = verify_paths([RECORDINGS], Checker(trust, require_signed=True))
    assert findings and {f.word for f in findings} == {VERIFIED}, [
        (str(f.path), f.word, f.problems) for f in findings if f.word != VERIFIED]
    kinds = sorted({f.kind for f in findings})
    assert kinds == ["folder", "judgments", "mission", "run"]  # a judge's, sealed apart
    assert sum(f.kind == "folder" for f in findings) == len(TARGETS)
