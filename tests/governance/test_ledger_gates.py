"""The built-in runtime's governor carries every call out through the action ledger:
each call is the action ``run:step:call``, proposed and decided as the governor's
verdict says, started (committed) before the dispatch and completed or failed after,
so a call already carried out — or whose outcome a crash left unknown — never runs again."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from evalkit.commands.approvals import approve
from evalkit.gate.ledger import Ledger, default_key
from evalkit.gate.policy import KINDS
from evalkit.runtime.governance import Governor
from evalkit.runtime.tools import ResultStore, ToolPlane
from evalkit.store.signing import digest
from tests.governance.conftest import RunGoverned, answer, call

WRITE = {"action": "write", "path": "out.txt", "content": "text"}


def test_every_carried_out_call_is_an_action_in_the_ledger(governed: RunGoverned) -> None:
    done = governed([call("run_shell_command", command="echo hi"), call("fs", **WRITE),
                     answer("done")], profile="dev", servers=0)
    book, run_id = done.ledger, done.outcome.run_id
    actions = book.actions(run_id=run_id)
    assert [(a.key, a.tool, a.state, a.kind) for a in actions] == [
        (default_key(run_id, 0, 0), "run_shell_command", "completed", "completed"),
        (default_key(run_id, 1, 0), "fs", "completed", "completed")]
    shell = actions[0]
    assert shell.policy_hash == done.governor.policy_hash and shell.attempts == 1
    assert shell.result["output"] == digest(done.results()[0]["output"])
    assert [e.event for e in book.events(shell.key)] == [
        "proposed", "decided", "started", "completed"]
    assert book.events(shell.key)[1].body["decision"]["kind"] == "allowed"
    assert book.verify_chain()[0]


def test_a_refused_call_is_recorded_denied_and_never_started(governed: RunGoverned) -> None:
    done = governed([call("fs", **WRITE), answer("done")], profile="safe", servers=0)
    [action] = done.ledger.actions(run_id=done.outcome.run_id)
    assert (action.state, action.kind) == ("denied", "scope_missing")
    assert KINDS[action.kind] == "denied" and action.attempts == 0
    assert not (done.root / "out.txt").exists()


def test_an_approved_gate_is_recorded_with_the_approval(governed: RunGoverned,
                                                       tmp_path: Path) -> None:
    first = governed([call("fs", **WRITE)], profile="dev", gate_tools=["fs"], servers=0)
    assert first.ledger.actions(run_id=first.outcome.run_id) == []  # nothing carried out yet
    approval_id = first.events("gate_requested")[0]["approval_id"]
    approve(first.approvals, approval_id, decided_by="dana")
    ran = governed([call("fs", **WRITE), answer("x")], profile="dev", gate_tools=["fs"],
                   servers=0, approval_id=approval_id)
    [action] = ran.ledger.actions(run_id=ran.outcome.run_id)
    assert (action.state, action.kind) == ("completed", "completed")
    decided = ran.ledger.events(action.key)[1].body["decision"]
    assert decided["kind"] == "approved" and approval_id in decided["reason"]


def _plane(root: Path) -> ToolPlane:
    return ToolPlane(root=root, results=ResultStore(), mcp_stdio=[])


def _carry(governor: Governor, plane: ToolPlane, command: str, index: int):
    arguments = {"command": command}
    verdict = governor.judge(plane.descriptor("run_shell_command"), "run_shell_command",
                             arguments)
    return governor.carry_out(plane, "run_shell_command", arguments, verdict, index=index)


def test_the_same_step_carried_out_again_does_not_run_again(tmp_path: Path) -> None:
    book = Ledger(tmp_path / "gov.sqlite")
    governor = Governor("dev", ledger=book)
    governor.begin("run_a", "count")
    with _plane(tmp_path) as plane:
        assert _carry(governor, plane, "echo x >> count.txt", 3).ok
        again = _carry(governor, plane, "echo x >> count.txt", 3)
        assert not again.ok and "not run again" in again.error and "completed" in again.error
        other = _carry(governor, plane, "echo y >> count.txt", 3)
        assert not other.ok and "already another call" in other.error
    assert (tmp_path / "count.txt").read_text() == "x\n"
    assert book.get("run_a:3:0").attempts == 1 and book.verify_chain()[0]


def test_a_call_left_started_by_a_dead_process_is_never_run_again(tmp_path: Path) -> None:
    book = Ledger(tmp_path / "gov.sqlite")
    governor = Governor("dev", ledger=book)
    governor.run_id = "run_b"
    arguments = {"command": "echo x >> count.txt"}
    key = default_key("run_b", 0, 0)
    book.propose(key, "run_shell_command", arguments, policy_hash=governor.policy_hash)
    from evalkit.gate.policy import Decision

    book.decide(key, Decision("allowed", "ok", "allowed", governor.policy_hash))
    book.start(key, owner={"host": socket.gethostname(), "pid": 2**22 + 9, "start": 1})
    governor.begin("run_b", "resume")  # recovery: its owner is dead
    assert book.get(key).state == "outcome_unknown"
    with _plane(tmp_path) as plane:
        result = _carry(governor, plane, arguments["command"], 0)
    assert not result.ok and "outcome unknown" in result.error
    assert not (tmp_path / "count.txt").exists()


# -- evalkit mission -----------------------------------------------------------------------------


def _mission(tmp_path: Path, *flags: str, **env: str):
    from tests.governance.conftest import clean_env, cli, write_script

    script = write_script(tmp_path / "s.json", [call("run_shell_command", command="echo hi"),
                                                answer("done")])
    return cli(tmp_path, "mission", "x", "--script", str(script), "--profile", "dev", *flags,
               env=clean_env(tmp_path, EVALKIT_HOME=str(tmp_path / "home"), **env))


@pytest.mark.slow
def test_a_gated_mission_uses_the_state_folders_ledger_and_others_may(tmp_path: Path) -> None:
    home_db = tmp_path / "home" / "governance.sqlite"
    plain = _mission(tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert not home_db.exists()  # no gates: no ledger unless asked
    gated = _mission(tmp_path, "--gate-tool", "fs")
    assert gated.returncode == 0, gated.stderr
    [action] = Ledger(home_db).actions()
    assert (action.tool, action.state, action.key.endswith(":0:0")) == (
        "run_shell_command", "completed", True)
    everywhere = _mission(tmp_path, EVALKIT_LEDGER="all")
    assert everywhere.returncode == 0 and len(Ledger(home_db).actions()) == 2
    elsewhere = tmp_path / "home" / "other.sqlite"  # inside the root, but in a hidden folder
    assert _mission(tmp_path, EVALKIT_LEDGER=str(elsewhere)).returncode == 0
    assert [a.state for a in Ledger(elsewhere).actions()] == ["completed"]
    off = _mission(tmp_path, "--gate-tool", "fs", EVALKIT_LEDGER="off")
    assert off.returncode == 0 and len(Ledger(home_db).actions()) == 2


@pytest.mark.slow
def test_a_ledger_that_cannot_be_opened_refuses_the_mission(tmp_path: Path) -> None:
    folder = tmp_path / "home" / "a-folder"
    folder.mkdir(parents=True)
    done = _mission(tmp_path, "--gate-tool", "fs", EVALKIT_LEDGER=str(folder))
    assert done.returncode == 2
    assert done.stderr.startswith("Error: cannot open the action ledger")
    assert "EVALKIT_LEDGER=off" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_ledger_inside_the_mission_root_refuses_the_mission(tmp_path: Path) -> None:
    done = _mission(tmp_path, "--gate-tool", "fs", EVALKIT_LEDGER=str(tmp_path / "g.sqlite"))
    assert done.returncode == 2 and "inside the mission root" in done.stderr
    assert not (tmp_path / "g.sqlite").exists()
