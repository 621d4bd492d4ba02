"""Seals: a recording touched after it was closed is reported, and never scored as whole.

One real ``evalkit run`` of the stub suite's test half (the built-in runtime, the
stub MCP plane, the run store) is made once; each test alters a copy of it the
way an attacker would and reads what ``verify`` and ``score`` say (the commands
run in this process, through click's runner: exit code, stdout and stderr as a
spawn would give them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalkit.eval.score import score
from evalkit.eval.suite import load_suite
from evalkit.store import seal
from evalkit.store.signing import Signer, Trust
from tests._cli import in_process

REPO = Path(__file__).resolve().parents[1]
SUITE = REPO / "suites" / "stub"


def evalkit(*args: str) -> subprocess.CompletedProcess[str]:
    """``evalkit ARGS`` in this process: its exit code, stdout and stderr."""
    return in_process(args)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sealed") / "out"
    done = subprocess.run([sys.executable, "-m", "evalkit.cli", "run", "--suite", str(SUITE),
                           "--out", str(out), "--split", "test", "--jobs", "2", "--quiet"],
                          capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture
def out(recorded: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "out"
    shutil.copytree(recorded, copy, symlinks=True)
    return copy


def verdicts(folder: Path, **options: object) -> dict[str, dict]:
    report = score(load_suite(SUITE), runs=folder, split="test", **options)  # type: ignore[arg-type]
    return {v.key: v.as_dict() for v in report.verdicts}


def keys(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if (p / "command.json").is_file())


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


@pytest.mark.slow
def test_a_fresh_run_is_sealed_whole_and_verifies(out: Path) -> None:
    assert (out / "manifest.json").is_file()
    for key in keys(out):
        assert (out / key / "manifest.json").is_file()
        runs = list((out / key / "runs").iterdir())
        assert len(runs) == 1 and (runs[0] / "manifest.json").is_file()
        listed = json.loads((out / key / "manifest.json").read_text())["files"]
        assert {"events.jsonl", "command.json", "stdout.txt", "stderr.txt"} <= set(listed)
        assert not any(name.startswith("work/") for name in listed)
    done = evalkit("verify", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tampered" not in done.stdout and "unsigned" not in done.stdout
    assert done.stderr.strip().endswith("0 unsigned, 0 tampered")
    assert all(v["passed"] for v in verdicts(out).values())
    report = json.loads((out / "report.json").read_text())
    assert report["verified"] is True


@pytest.mark.slow
@pytest.mark.parametrize("how", ["byte", "removed", "appended", "replaced"])
def test_an_altered_stream_is_reported_and_scored_as_an_infrastructure_failure(
        out: Path, how: str) -> None:
    victim, other = keys(out)[:2]
    events = out / victim / "events.jsonl"
    rows = lines(events)
    if how == "byte":  # the outcome rewritten: the kind of edit that turns a fail to a pass
        rows[3] = rows[3].replace(b'"', b"'", 1)
        expected = "events.jsonl line 4 differs from what was recorded"
    elif how == "removed":
        del rows[2]
        expected = "events.jsonl line 3 differs from what was recorded"
    elif how == "appended":
        rows.append(rows[-1])
        expected = "1 line was appended after line"
    else:
        rows = lines(out / other / "events.jsonl")
        expected = "events.jsonl line 1 differs" if rows[0] != lines(events)[0] else "differs"
    events.write_bytes(b"".join(rows))

    done = evalkit("verify", str(out))
    assert done.returncode == 1
    assert f"tampered  {out / victim}: " in done.stdout or f"tampered  {victim}" in done.stdout
    assert expected in done.stdout

    found = verdicts(out)
    hit = found[victim]
    assert not hit["passed"] and hit["checks"] == ["tampered"]
    assert hit["reasons"][0].startswith("recording altered after it was closed: ")
    assert expected in hit["reasons"][0]
    assert all(v["passed"] for k, v in found.items() if k != victim)

    # the score command says so too, and fails the job
    scored = evalkit("score", "--suite", str(SUITE), "--runs", str(out), "--split", "test")
    assert scored.returncode == 1 and "TAMPERED" in scored.stdout


@pytest.mark.slow
def test_the_taxonomy_calls_a_tampered_run_an_infrastructure_error(out: Path) -> None:
    from evalkit.eval.taxonomy import categorize

    victim = keys(out)[0]
    (out / victim / "events.jsonl").write_bytes(b"")
    verdict = verdicts(out)[victim]
    category, detail = categorize(verdict)
    assert category == "infra" and detail.startswith("tampered: recording altered")


@pytest.mark.slow
def test_a_seal_re_signed_with_another_key_is_not_trusted(out: Path) -> None:
    victim = keys(out)[0]
    events = out / victim / "events.jsonl"
    events.write_bytes(events.read_bytes().replace(b'"answered"', b'"answered" ', 1))
    forger = Signer.generate()
    seal.seal_mission(out / victim, forger)
    seal.seal_folder(out, sorted(p for p in out.iterdir() if (p / "manifest.json").is_file()),
                     forger)
    done = evalkit("verify", str(out))
    assert done.returncode == 1
    assert f"signed by key {forger.key_id}, which is not trusted here" in done.stdout
    hit = verdicts(out)[victim]
    assert hit["checks"] == ["tampered"] and forger.key_id in hit["reasons"][0]
    # trusting the forger's key on purpose makes it whole again: trust is the operator's call
    pub = out.parent / "forger.pub"
    pub.write_bytes(forger.public_pem())
    assert evalkit("verify", str(out), "--trust", str(pub)).returncode == 0


@pytest.mark.slow
def test_a_removed_mission_seal_is_caught_by_the_folder_seal(out: Path) -> None:
    victim = keys(out)[0]
    (out / victim / "manifest.json").unlink()
    done = evalkit("verify", str(out))
    assert done.returncode == 1 and f"{victim}/manifest.json was removed" in done.stdout
    # the stream itself is as sealed, so its verdict stands
    assert verdicts(out)[victim]["passed"]


@pytest.mark.slow
def test_a_run_store_log_altered_is_named_by_file_and_line(out: Path) -> None:
    victim = keys(out)[0]
    run = next((out / victim / "runs").iterdir())
    model = run / "model.jsonl"
    rows = lines(model)
    rows[0] = rows[0].replace(b"{", b"{ ", 1)
    model.write_bytes(b"".join(rows))
    done = evalkit("verify", str(run))
    assert done.returncode == 1 and "model.jsonl line 1 differs" in done.stdout


@pytest.mark.slow
def test_a_foreign_unsigned_stream_still_scores(out: Path, tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    for key in keys(out):
        (foreign / key).mkdir(parents=True)
        shutil.copy(out / key / "events.jsonl", foreign / key / "events.jsonl")
    done = evalkit("verify", str(foreign))
    said = [line.split()[0] for line in done.stdout.splitlines()]
    assert done.returncode == 0 and said == ["unsigned"] * len(keys(out))
    # (a judged mission's judgments were left behind: it is not judged, and only that)
    assert all(v["passed"] or v["checks"] == ["not_judged"] for v in verdicts(foreign).values())
    # ... unless the scorer is told every stream must carry a seal
    strict = evalkit("score", "--suite", str(SUITE), "--runs", str(foreign), "--split", "test",
                     "--require-signed")
    assert strict.returncode == 1 and "TAMPERED" in strict.stdout
    assert evalkit("verify", str(foreign), "--require-signed").returncode == 1


@pytest.mark.slow
def test_no_verify_scores_as_recorded_and_says_so(out: Path, tmp_path: Path) -> None:
    victim = keys(out)[0]
    (out / victim / "events.jsonl").write_bytes(lines(out / victim / "events.jsonl")[0])
    assert verdicts(out, verify=False)[victim]["checks"] != ["tampered"]
    done = evalkit("score", "--suite", str(SUITE), "--runs", str(out), "--split", "test",
                   "--no-verify", "--report", str(tmp_path / "r"))
    assert "not checked" in done.stdout and "TAMPERED" not in done.stdout
    assert json.loads((tmp_path / "r" / "report.json").read_text())["verified"] is False
    page = tmp_path / "r" / "report.html"
    assert evalkit("report", str(tmp_path / "r"), "-o", str(page)).returncode == 0
    assert "NOT checked against their seals (--no-verify)" in page.read_text()


@pytest.mark.slow
def test_scoring_from_a_dataset_keeps_the_verdict_of_a_tampered_run(out: Path) -> None:
    victim = keys(out)[0]
    events = out / victim / "events.jsonl"
    events.write_bytes(events.read_bytes().replace(b"answered", b"answerer", 1))
    assert evalkit("ingest", str(out)).returncode == 0
    manifest = json.loads((out / "dataset.parquet" / "dataset.json").read_text())
    assert list(manifest["altered"]) == [f"{victim}/events.jsonl"]
    assert manifest["seals"]["tampered"] == 1
    from_dataset = score(load_suite(SUITE), dataset=out / "dataset.parquet", split="test")
    hit = {v.key: v for v in from_dataset.verdicts}[victim]
    assert hit.checks == ["tampered"] and hit.reasons == verdicts(out)[victim]["reasons"]


@pytest.mark.slow
def test_worker_processes_check_seals_as_one_process_does(
        out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evalkit.eval import score as scoring

    victim = keys(out)[0]
    events = out / victim / "events.jsonl"
    events.write_bytes(events.read_bytes() + b"\n")
    monkeypatch.setattr(scoring, "SHARE", 1)  # a share per mission
    suite = load_suite(SUITE)
    shared = score(suite, runs=out, split="test", workers=2)
    hit = {v.key: v for v in shared.verdicts}[victim]
    assert hit.checks == ["tampered"]
    assert shared.to_dict() == score(suite, runs=out, split="test", workers=1).to_dict()


@pytest.mark.slow
def test_a_sealed_run_altered_is_not_continued(out: Path) -> None:
    from evalkit.errors import EvalkitError
    from evalkit.store.runstore import RunWriter

    run = next((out / keys(out)[0] / "runs").iterdir())
    events = run / "events.jsonl"
    events.write_bytes(events.read_bytes()[:-10] + b"}\n")
    with pytest.raises(EvalkitError, match="cannot be continued: recording altered"):
        RunWriter(run)
    assert (run / "manifest.json").is_file()  # the evidence stays


def test_verify_refuses_a_path_that_is_not_there(tmp_path: Path) -> None:
    done = evalkit("verify", str(tmp_path / "nothing"))
    assert done.returncode == 2 and "does not exist" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_manifest_of_another_program_is_not_ours(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.jsonl").write_text('{"event": "mission_started"}\n')
    (run / "manifest.json").write_text('{"name": "some npm package"}\n')
    check = seal.Checker(Trust()).stream(run / "events.jsonl",
                                         (run / "events.jsonl").read_bytes())
    assert check.word == seal.UNSIGNED


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(manifest=st.one_of(
    st.binary(max_size=400),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                 lambda inner: st.lists(inner, max_size=4)
                 | st.dictionaries(st.text(max_size=10), inner, max_size=4),
                 max_leaves=20).map(lambda v: json.dumps(
                     {"format": "evalkit-manifest", "version": 1, "files": v}).encode()),
), stream=st.binary(max_size=200))
def test_a_damaged_manifest_never_breaks_the_checker(tmp_path_factory: pytest.TempPathFactory,
                                                      manifest: bytes, stream: bytes) -> None:
    """Whatever a manifest.json holds, checking gives a word, never an exception."""
    run = tmp_path_factory.mktemp("fuzz")
    (run / "manifest.json").write_bytes(manifest)
    (run / "events.jsonl").write_bytes(stream)
    checker = seal.Checker(Trust())
    assert checker.stream(run / "events.jsonl", stream).word in seal.WORDS
    assert checker.folder(run)[0].word in seal.WORDS
    assert all(f.word in seal.WORDS for f in seal.verify_paths([run], checker))


def test_the_signing_key_is_private_and_made_once(tmp_path: Path) -> None:
    from evalkit.store.signing import local_signer

    env = {"EVALKIT_HOME": str(tmp_path / "home")}
    first = local_signer(env)
    again = local_signer(env)
    assert first is not None and again is not None and first.key_id == again.key_id
    key = tmp_path / "home" / "keys" / "evalkit.key"
    assert oct(os.stat(key).st_mode & 0o777) == "0o600"
    assert b"PRIVATE KEY" in key.read_bytes()


def test_a_public_key_file_is_read_by_shape_and_anything_else_by_the_library(
        tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from evalkit.errors import EvalkitError
    from evalkit.store.signing import read_public_key

    key = Signer.generate()
    ours = tmp_path / "ours.pub"
    ours.write_bytes(key.public_pem())
    assert read_public_key(ours) == key.public_raw
    other = tmp_path / "ec.pub"
    other.write_bytes(ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    with pytest.raises(EvalkitError, match="not an Ed25519 public key"):
        read_public_key(other)
    junk = tmp_path / "junk.pub"
    junk.write_bytes(b"-----BEGIN PUBLIC KEY-----\nnot base64\n-----END PUBLIC KEY-----\n")
    with pytest.raises(EvalkitError, match="not a readable public key"):
        read_public_key(junk)


def _sealed_as_version_1(folder: Path, signer: Signer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seal ``folder`` as a run, the way an evalkit writing version 1 manifests (SHA-256) did."""
    with monkeypatch.context() as old:
        old.setattr(seal, "VERSION", 1)
        old.setattr(seal, "CURRENT", seal.DIGESTS[1])
        seal.seal_run(folder, signer, fsync=False)


def test_a_version_1_seal_still_verifies_and_still_catches_an_altered_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seals written before manifests moved to BLAKE3 (version 2) name SHA-256 digests:
    they are read with their own hash, so an older recording is neither lost nor
    reported as tampered, and an edit to one is still found, at its line."""
    signer = Signer.generate()
    run = tmp_path / "run"
    run.mkdir()
    stream = run / "events.jsonl"
    stream.write_bytes(b'{"event": "mission_started"}\n{"event": "mission_finished"}\n')
    _sealed_as_version_1(run, signer, monkeypatch)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["version"] == 1 and "sha256" in manifest["files"]["events.jsonl"]
    trust = Trust()
    trust.add(signer.public_raw, "test")
    assert seal.Checker(trust).stream(stream, stream.read_bytes()).word == seal.VERIFIED
    assert seal.Checker(trust).folder(run)[0].word == seal.VERIFIED
    stream.write_bytes(b'{"event": "mission_started"}\n{"event": "mission_failed"}\n')
    check = seal.Checker(trust).stream(stream, stream.read_bytes())
    assert check.tampered and "events.jsonl line 2 differs" in (check.problem or "")


def test_a_new_seal_names_blake3_digests_and_an_unknown_version_is_refused(
        tmp_path: Path) -> None:
    signer = Signer.generate()
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.jsonl").write_bytes(b'{"event": "mission_started"}\n')
    seal.seal_run(run, signer, fsync=False)
    manifest = json.loads((run / "manifest.json").read_text())
    from blake3 import blake3

    assert manifest["version"] == 2
    assert manifest["files"]["events.jsonl"]["blake3"] == \
        blake3((run / "events.jsonl").read_bytes()).hexdigest()
    text = (run / "manifest.json").read_text().replace('"version": 2', '"version": 3')
    (run / "manifest.json").write_text(text)
    trust = Trust()
    trust.add(signer.public_raw, "test")
    check, problems = seal.Checker(trust).folder(run)
    assert check.tampered and "has version 3; this evalkit reads 1 and 2" in problems[0]
