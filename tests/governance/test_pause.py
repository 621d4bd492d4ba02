"""A paused mission kept as a leased approval checkpoint: saved, leased once, consumed or refused.

The mission that pauses at the gate is the same in every test here but one (the ledger
off): it runs once per module, and each test starts from a copy of the folder it left
(``paused``), restored at the same path, as the recordings, the approval and the sealed
checkpoint name that folder.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from evalkit.gate.checkpoints import CheckpointStore
from evalkit.runtime.pause import PAUSE_SECONDS
from tests import _forked as forked
from tests.governance.conftest import STUB, answer, call, clean_env, cli, read_jsonl, write_script

SUBMIT = {"asset_id": "asset.7f3a", "value": 3}
GATED = ("--mcp-stdio", STUB, "--gate-tool", "mcp.submit", "--grant", "mcp.write")

pytestmark = [
    pytest.mark.slow,  # every test here runs several evalkit processes
    pytest.mark.xdist_group("pause"),  # one worker: the paused mission runs once (``paused``)
]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return clean_env(tmp_path, EVALKIT_HOME=str(tmp_path / "home"), **extra)


def _checkpoints(tmp_path: Path, **options: object) -> CheckpointStore:
    return CheckpointStore(tmp_path / "home" / "governance.sqlite",
                           environ=_env(tmp_path), **options)  # type: ignore[arg-type]


def _pause(tmp_path: Path, env: dict[str, str]) -> tuple[str, str]:
    """A mission that stops at the gate on mcp.submit: its run id and approval id."""
    script = write_script(tmp_path / "first.json", [call("mcp.submit", **SUBMIT)])
    done = cli(tmp_path, "mission", "submit it", "--script", str(script), *GATED,
               "--events", "paused.jsonl", env=env)
    assert done.returncode == 0, done.stderr
    records = read_jsonl(tmp_path / "paused.jsonl")
    assert records[-1]["outcome"] == "awaiting_approval"
    return records[0]["run_id"], records[-2]["approval_id"]


class Paused(NamedTuple):
    """A folder as ``_pause`` left it (with ``_env``), and the run and approval it paused on."""

    folder: Path
    env: dict[str, str]
    run_id: str
    approval_id: str


@pytest.fixture(scope="module")
def _paused_once(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str, str]:
    """One ``_pause``, in a folder the tests here take turns in, and a copy of what it left."""
    folder = tmp_path_factory.mktemp("paused")
    run_id, approval_id = _pause(folder, _env(folder))
    snapshot = tmp_path_factory.mktemp("paused-snapshot") / "folder"
    shutil.copytree(folder, snapshot, symlinks=True)
    return folder, snapshot, run_id, approval_id


@pytest.fixture
def paused(_paused_once: tuple[Path, Path, str, str]) -> Paused:
    """The folder of a mission just paused at the gate on mcp.submit (as ``_pause``), the
    test's own: restored from the module's snapshot at the path the mission ran in."""
    folder, snapshot, run_id, approval_id = _paused_once
    shutil.rmtree(folder)
    shutil.copytree(snapshot, folder, symlinks=True)
    return Paused(folder, _env(folder), run_id, approval_id)


def _resume(tmp_path: Path, run_id: str, approval_id: str | None, items: list, name: str,
            env: dict[str, str]) -> list[str]:
    script = write_script(tmp_path / f"{name}.json", items)
    approval = ["--approval", approval_id] if approval_id else []
    return [sys.executable, "-m", "evalkit.cli", "mission", "--resume", run_id, *approval,
            "--script", str(script), "--events", f"{name}.jsonl"]


def _run(tmp_path: Path, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return forked.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                      timeout=120)


def _approve(tmp_path: Path, approval_id: str, env: dict[str, str]) -> None:
    done = cli(tmp_path, "approvals", "approve", approval_id, "--decided-by", "dana", env=env)
    assert done.returncode == 0, done.stderr


def test_two_resumes_race_one_runs_the_approved_call_and_pauses_again(paused: Paused) -> None:
    folder, env, run_id, approval_id = paused
    saved = _checkpoints(folder).get(approval_id)
    assert saved is not None and (saved.state, saved.run_id, saved.sealed) == (
        "pending", run_id, True)
    assert saved.expires_at - saved.created_at == pytest.approx(PAUSE_SECONDS)
    _approve(folder, approval_id, env)
    # the resumed model makes the approved call, then stops at the gate again (another value)
    items = [call("mcp.submit", **SUBMIT), call("mcp.submit", asset_id="asset.7f3a", value=4)]
    procs = [subprocess.Popen(_resume(folder, run_id, approval_id, items, f"r{n}", env),
                              cwd=folder, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for n in range(2)]
    ended = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in procs]
    codes = sorted(code for code, _ in ended)
    assert codes == [0, 2], ended
    refused = next(err for code, err in ended if code == 2)
    assert len(refused.strip().splitlines()) == 1 and "Traceback" not in refused
    winner = next(n for n, (code, _) in enumerate(ended) if code == 0)
    records = read_jsonl(folder / f"r{winner}.jsonl")
    submitted = [r for r in records if r["event"] == "tool_result" and r["tool"] == "mcp.submit"]
    assert len(submitted) == 1 and submitted[0]["arguments"] == SUBMIT
    assert records[-1]["outcome"] == "awaiting_approval"
    successor_id = records[-2]["approval_id"]
    store = _checkpoints(folder)
    first, successor = store.get(approval_id), store.get(successor_id)
    assert first is not None and successor is not None
    assert (first.state, first.successor, first.sealed) == ("consumed", successor_id, False)
    assert (successor.state, successor.predecessor, successor.run_id) == (
        "pending", approval_id, run_id)
    assert successor.definition_hash == first.definition_hash
    # a third resume of the consumed pause is refused before anything runs
    again = _run(folder, _resume(folder, run_id, approval_id, items, "r3", env), env)
    assert again.returncode == 2 and len(again.stderr.strip().splitlines()) == 1


def test_a_resume_after_the_checkpoint_expired_is_refused(paused: Paused) -> None:
    folder, env, run_id, approval_id = paused
    _approve(folder, approval_id, env)
    later = _checkpoints(folder, clock=lambda: time.time() + PAUSE_SECONDS + 1)
    assert later.expire_due() == [approval_id]
    items = [call("mcp.submit", **SUBMIT), answer("done")]
    run_dir = folder / "runs" / run_id
    recorded = {f.name: f.read_bytes() for f in run_dir.iterdir() if f.name != "lock"}
    assert "certificates.jsonl" in recorded
    done = _run(folder, _resume(folder, run_id, approval_id, items, "late", env), env)
    assert done.returncode == 2
    # refused: the paused run keeps every file as it was, its certificates and seal included
    assert {f.name: f.read_bytes() for f in run_dir.iterdir() if f.name != "lock"} == recorded
    assert (f"run {run_id} is not resumed: its checkpoint for approval {approval_id} cannot "
            "be used: it expired before it was resumed") in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (folder / "late.jsonl").exists() or not read_jsonl(folder / "late.jsonl")
    record = cli(folder, "approvals", "show", approval_id, env=env)
    assert '"state": "approved"' in record.stdout  # the approval was not spent


def test_deny_rejects_the_checkpoint_without_opening_it(paused: Paused) -> None:
    folder, env, run_id, approval_id = paused
    # with the data keys gone the checkpoint cannot be opened; rejecting it does not need to
    for key in (folder / "home" / "keys" / "checkpoint").glob("*.key"):
        key.unlink()
    denied = cli(folder, "approvals", "deny", approval_id, "--decided-by", "bob", env=env)
    assert denied.returncode == 0, denied.stderr
    assert "the paused run's checkpoint is rejected" in denied.stdout
    found = _checkpoints(folder).get(approval_id)
    assert found is not None
    assert (found.state, found.reject_code, found.operator, found.sealed) == (
        "rejected", "operator_denied", "bob", False)
    items = [call("mcp.submit", **SUBMIT), answer("done")]
    done = _run(folder, _resume(folder, run_id, approval_id, items, "after", env), env)
    assert done.returncode == 2 and "refused by bob" in done.stderr


def test_a_withdrawn_checkpoint_refuses_an_approved_resume(paused: Paused) -> None:
    folder, env, run_id, approval_id = paused
    _approve(folder, approval_id, env)
    _checkpoints(folder).reject(approval_id, operator="ops", reason_code="withdrawn")
    items = [call("mcp.submit", **SUBMIT), answer("done")]
    done = _run(folder, _resume(folder, run_id, approval_id, items, "w", env), env)
    assert done.returncode == 2
    assert "cannot be used: it is rejected (the request was refused or withdrawn)" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_run_that_moved_on_since_its_pause_fails_the_lease_state_invalid(
        paused: Paused) -> None:
    folder, env, run_id, approval_id = paused
    _approve(folder, approval_id, env)
    # resumed without the approval, the model asks again: a second pause, a second checkpoint
    again = _run(folder, _resume(folder, run_id, None, [call("mcp.submit", **SUBMIT)],
                                 "moved", env), env)
    assert again.returncode == 0, again.stderr
    second = read_jsonl(folder / "moved.jsonl")[-2]["approval_id"]
    assert second != approval_id
    items = [call("mcp.submit", **SUBMIT), answer("done")]
    stale = _run(folder, _resume(folder, run_id, approval_id, items, "stale", env), env)
    assert stale.returncode == 2 and "the run moved on since it paused" in stale.stderr
    assert len(stale.stderr.strip().splitlines()) == 1
    store = _checkpoints(folder)
    failed = store.get(approval_id)
    assert failed is not None and (failed.state, failed.failure_code, failed.sealed) == (
        "failed", "state_invalid", False)
    # the latest pause is resumed with its own approval, once
    _approve(folder, second, env)
    done = _run(folder, _resume(folder, run_id, second, items, "latest", env), env)
    assert done.returncode == 0, done.stderr
    assert read_jsonl(folder / "latest.jsonl")[-1]["outcome"] == "answered"
    consumed = store.get(second)
    assert consumed is not None and (consumed.state, consumed.successor) == ("consumed", None)


def test_with_the_ledger_off_no_checkpoint_is_kept_and_resume_works_as_before(
        tmp_path: Path) -> None:
    env = _env(tmp_path, EVALKIT_LEDGER="off")
    run_id, approval_id = _pause(tmp_path, env)
    assert not (tmp_path / "home" / "governance.sqlite").exists()
    _approve(tmp_path, approval_id, env)
    items = [call("mcp.submit", **SUBMIT), answer("done")]
    done = _run(tmp_path, _resume(tmp_path, run_id, approval_id, items, "off", env), env)
    assert done.returncode == 0, done.stderr
    assert read_jsonl(tmp_path / "off.jsonl")[-1]["outcome"] == "answered"


def test_resumers_racing_through_take_get_one_lease(paused: Paused,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight threads through the resume's own code path: one lease, seven one-sentence refusals."""
    import threading

    from evalkit.commands.approvals import approve
    from evalkit.errors import EvalkitError
    from evalkit.runtime.governance import ApprovalStore
    from evalkit.runtime.mission import MissionSettings
    from evalkit.runtime.pause import Pauses
    from evalkit.runtime.resume import open_resume
    from evalkit.store.runstore import RunStore

    folder, env, run_id, approval_id = paused
    monkeypatch.setenv("EVALKIT_HOME", env["EVALKIT_HOME"])  # the key the run was signed with
    record = approve(ApprovalStore(folder / "approvals"), approval_id, decided_by="dana")
    settings = MissionSettings(objective="", resume=run_id, provider="scripted", script="x")
    door = open_resume(settings, RunStore(folder / "runs"))
    try:
        barrier, won, refused = threading.Barrier(8), [], []

        def resumer() -> None:
            pauses = Pauses(folder / "home" / "governance.sqlite", env)
            barrier.wait()
            try:
                won.append(pauses.take(door.settings, door.resume, record))
            except EvalkitError as exc:
                refused.append(str(exc))
            finally:
                pauses.close()

        threads = [threading.Thread(target=resumer) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    finally:
        door.close()
    assert len(won) == 1 and won[0].checkpoint_id == approval_id and won[0].operator == "dana"
    assert len(refused) == 7
    assert set(refused) == {f"run {run_id} is not resumed: its checkpoint for approval "
                            f"{approval_id} cannot be used: another resume of it is running "
                            "(a paused run is resumed once)"}


def test_a_refused_resume_starts_no_tool_server(tmp_path: Path) -> None:
    """What refuses a resume without the tool plane (an approval not decided yes, a checkpoint
    that cannot be leased) is said before any MCP server starts: the paused run's server, a
    wrapper that notes each start, is started by the pause and by nothing refused after."""
    env = _env(tmp_path)
    starts = tmp_path / "starts.log"
    server = shlex.join(["sh", "-c", f'echo started >> {shlex.quote(str(starts))}; exec "$@"',
                         "sh", *shlex.split(STUB)])
    script = write_script(tmp_path / "first.json", [call("mcp.submit", **SUBMIT)])
    done = cli(tmp_path, "mission", "submit it", "--script", str(script), "--mcp-stdio", server,
               "--gate-tool", "mcp.submit", "--grant", "mcp.write", "--events", "paused.jsonl",
               env=env)
    assert done.returncode == 0, done.stderr
    records = read_jsonl(tmp_path / "paused.jsonl")
    run_id, approval_id = records[0]["run_id"], records[-2]["approval_id"]
    started = starts.read_text()
    assert started.count("started") >= 1
    items = [call("mcp.submit", **SUBMIT), answer("done")]
    undecided = _run(tmp_path, _resume(tmp_path, run_id, approval_id, items, "u", env), env)
    assert undecided.returncode == 2 and "has not been decided yet" in undecided.stderr
    _approve(tmp_path, approval_id, env)
    _checkpoints(tmp_path).reject(approval_id, operator="ops", reason_code="withdrawn")
    withdrawn = _run(tmp_path, _resume(tmp_path, run_id, approval_id, items, "w", env), env)
    assert withdrawn.returncode == 2
    assert (f"run {run_id} is not resumed: its checkpoint for approval {approval_id} cannot be "
            "used: it is rejected") in withdrawn.stderr
    assert len(withdrawn.stderr.strip().splitlines()) == 1
    assert starts.read_text() == started
