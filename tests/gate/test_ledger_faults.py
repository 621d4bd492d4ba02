"""Fault injection: a process governing a call is SIGKILLed at each point between the
intent row and the terminal row. An independent counter of the side effect stays at
most one, recovery says outcome_unknown, a retry never runs it again, and the chain
verifies up to the last commit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.gate.ledger import Ledger

from ._fault_child import POLICY

CHILD = Path(__file__).with_name("_fault_child.py")
ROOT = Path(__file__).parents[2]


def _run(tmp_path: Path, point: str, tool: str = "noop") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(CHILD), str(tmp_path / "gov.sqlite"),
                           str(tmp_path / "counter"), "run1:1:0", tool, point],
                          env=env, capture_output=True, text=True, timeout=60)


def _count(tmp_path: Path) -> int:
    path = tmp_path / "counter"
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.slow
@pytest.mark.parametrize(("point", "effects"), [
    ("after_intent", 0), ("after_effect", 1), ("before_terminal", 1), ("mid_append", 1)])
def test_a_kill_at_each_point_is_outcome_unknown_and_never_runs_again(
        tmp_path: Path, point: str, effects: int) -> None:
    killed = _run(tmp_path, point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert _count(tmp_path) == effects
    book = Ledger(tmp_path / "gov.sqlite")
    assert book.get("run1:1:0").state == "started"  # the intent row was committed
    ok, last, problem = book.verify_chain()
    assert ok, problem
    assert [e.event for e in book.events()][-1] == "started" and last == 3
    recovered = book.recover()
    assert [(a.key, a.state) for a in recovered] == [("run1:1:0", "outcome_unknown")]
    assert book.verify_chain()[0]
    for _ in range(2):
        retry = _run(tmp_path, "none")
        assert retry.returncode == 0, retry.stderr
        assert retry.stdout.strip() == "outcome_unknown"
    assert _count(tmp_path) == effects <= 1
    assert book.get("run1:1:0").attempts == 1
    assert book.verify_chain()[0]


@pytest.mark.slow
def test_without_a_kill_the_call_runs_once_however_often_it_is_retried(tmp_path: Path) -> None:
    for _ in range(3):
        done = _run(tmp_path, "none")
        assert (done.returncode, done.stdout.strip()) == (0, "completed")
    assert _count(tmp_path) == 1
    assert Ledger(tmp_path / "gov.sqlite").recover() == []


@pytest.mark.slow
def test_an_idempotent_tool_returns_to_allowed_and_runs_again(tmp_path: Path) -> None:
    assert _run(tmp_path, "after_effect", tool="lookup").returncode == -signal.SIGKILL
    book = Ledger(tmp_path / "gov.sqlite")
    recovered = book.recover(policy=POLICY)
    assert [(a.state, a.kind) for a in recovered] == [("allowed", "recovered_idempotent")]
    again = _run(tmp_path, "none", tool="lookup")
    assert again.stdout.strip() == "completed"
    assert _count(tmp_path) == 2  # declared harmless to repeat, so repeated
    assert book.get("run1:1:0").attempts == 2 and book.verify_chain()[0]


def test_a_live_owner_is_left_alone_and_a_reconciler_settles(tmp_path: Path) -> None:
    from ._ledger_kit import governed

    book = Ledger(tmp_path / "gov.sqlite")
    governed(book, "k", "noop", {})
    book.start("k")  # this very process owns it and is alive
    assert book.recover() == []
    settled = book.recover(all_owners=True, reconciler=lambda a: ("completed", {"seen": 1}))
    assert [(a.state, a.result) for a in settled] == [("completed", {"seen": 1})]
    assert book.verify_chain()[0]
