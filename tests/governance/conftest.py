"""Governed missions for the tests: real loop, real plane, real stores; only the model scripted.

``governed(script, ...)`` builds a mission the way ``evalkit mission`` does —
the plane started, the governor made at the door against its live
catalogue, the run store, the audit folder and the approvals folder under
the test's tmp directory — and returns everything the run left behind.
``cli(...)`` runs ``evalkit`` itself as a subprocess in the same folders.
``mcp=[CMD, ...]`` starts those servers instead of the stub.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from evalkit.contract import conforms
from evalkit.gate.ledger import Ledger
from evalkit.runtime import Bounds, CancelToken, Run, RunOutcome, ScriptedBackend
from evalkit.runtime.governance import ApprovalStore, AuditLog, Governor, Manifest
from evalkit.runtime.tools import Bwrap, Declared, NoSandbox, ResultStore, ToolPlane
from evalkit.store.runstore import RunStore
from evalkit.store.sink import EventSink
from tests import _forked as forked
from tests._agent import (  # noqa: F401 (re-exported)
    STUB,
    LeftBehind,
    answer,
    call,
    read_jsonl,
    write_script,
)
from tests._env import without_settings

needs_bwrap = pytest.mark.skipif(not Bwrap.available(), reason=Bwrap.unavailable() or "")


@dataclass
class Governed(LeftBehind):
    """One finished governed mission and what it left behind."""

    outcome: RunOutcome
    records: list[dict[str, Any]]
    run_dir: Path | None
    root: Path
    governor: Governor
    approvals: ApprovalStore | None
    audit_dir: Path | None
    stderr: list[str] = field(default_factory=list)
    #: The action ledger the governor carried every call out through (None: none).
    ledger: Ledger | None = None

    @property
    def started(self) -> dict[str, Any]:
        return self.records[0]

    @property
    def audit(self) -> list[dict[str, Any]]:
        ref = self.started.get("audit_ref")
        return read_jsonl(Path(ref)) if ref else []

    @property
    def model_calls(self) -> list[dict[str, Any]]:
        return read_jsonl(self.run_dir / "model.jsonl") if self.run_dir else []

    def results(self) -> list[dict[str, Any]]:
        return self.events("tool_result")


RunGoverned = Callable[..., Governed]


@pytest.fixture
def governed(tmp_path: Path) -> RunGoverned:
    counter = iter(range(1, 1000))

    def run(script: Sequence[Any], *, objective: str = "do the thing", profile: str = "safe",
            grants: Sequence[str] = (), manifest: Manifest | None = None,
            gate_tools: Sequence[str] = (), approval_id: str | None = None,
            gate_wait: float | None = None, sandbox: str = "none", servers: int = 1,
            protocol: str = "json", control: Any = None,
            observer: Callable[[dict[str, Any]], None] | None = None,
            root: Path | None = None, bounds: Bounds | None = None,
            audit: bool = True, approvals: bool = True, settle: bool = False,
            mcp: Sequence[str] | None = None,
            mcp_scopes: Mapping[str, Declared] | None = None, ledger: bool = True) -> Governed:
        n = next(counter)
        path = write_script(tmp_path / f"script{n}.json", script)
        work = root or tmp_path / f"root{n}"
        work.mkdir(exist_ok=True)
        store = RunStore(tmp_path / "runs")
        approval_store = ApprovalStore(tmp_path / "approvals") if approvals else None
        audit_dir = tmp_path / "audit" if audit else None
        results = ResultStore()
        box = Bwrap() if sandbox == "bwrap" else NoSandbox()
        events = tmp_path / f"events{n}.jsonl"
        with ToolPlane(root=work, results=results,
                       mcp_stdio=[STUB] * servers if mcp is None else list(mcp),
                       sandbox=box, mcp_scopes=mcp_scopes) as plane, \
                EventSink.open(str(events)) as sink:
            governor = Governor.at_door(
                plane.catalogue(), profile=profile, grants=grants, manifest=manifest,
                gate_tools=gate_tools, approval_id=approval_id, approvals=approval_store,
                audit=AuditLog(audit_dir) if audit_dir else None, sandbox=box.name,
                gate_wait=gate_wait, runs_root=tmp_path / "runs",
                ledger=Ledger(tmp_path / "governance.sqlite") if ledger else None)
            token = CancelToken()
            if control is not None:
                control.start(on_cancel=token.cancel)
                if settle:  # every line written beforehand is read before the first step
                    assert control.drained(5)
            outcome = Run(ScriptedBackend.from_file(path), plane, bounds=bounds, store=store,
                          sink=sink, protocol=protocol, results=results, governor=governor,
                          control=control, observer=observer, cancel_token=token).run(objective)
        if control is not None:
            control.close()
        records = read_jsonl(events)
        for record in records:
            assert conforms(record) == [], record
        assert records[-1]["event"] == "mission_finished"
        run_dir = store.path_of(outcome.run_id) if outcome.run_id else None
        return Governed(outcome, records, run_dir, work, governor, approval_store, audit_dir,
                        ledger=governor.ledger)

    return run


# -- the command line ------------------------------------------------------------------------


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This environment minus EVALKIT_* (the session's state folder and fork server aside:
    ``tests/conftest.py``), with every governed folder under ``tmp_path``."""
    governed = {"EVALKIT_RUNS": str(tmp_path / "runs"), "EVALKIT_AUDIT": str(tmp_path / "audit"),
                "EVALKIT_APPROVALS": str(tmp_path / "approvals")}
    return without_settings(**{**governed, **extra})


def cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
        timeout: float = 120, **options: Any) -> subprocess.CompletedProcess[str]:
    """``evalkit ARGS`` in ``tmp_path`` (the mission root) with the governed folders there."""
    return forked.run([sys.executable, "-m", "evalkit.cli", *args], cwd=tmp_path,
                      env=env or clean_env(tmp_path), capture_output=True, text=True,
                      timeout=timeout, **options)
