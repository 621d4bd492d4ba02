"""The battery: every mission of a conformance suite spawned exactly as ``run`` spawns it.

Spawning, capture and the folders are ``evalkit.eval.runner``'s; this module adds only
what ``run`` never does: two missions are steered while they run. At the standing
gate of ``decision`` the kit approves the call over ``--control``; at the standing gate
of ``sigterm`` it sends SIGTERM and gives the agent ``SIGTERM_BOUND_S`` to write its
``mission_finished`` and exit before its process group is killed. A gate is where any
agent is sure to be waiting, so the signal lands mid-mission whatever its speed.

An agent with no gates (``--no-gates``: a recorder-wrapped one) is spared every mission
that needs one: ``decision`` is left out, and ``sigterm`` runs without its gate flags,
the signal sent at the first ``step_started`` instead — the agent is mid-mission then
only while its step is still working (a model call in flight), which ``behaviour``
allows for: an agent that had already answered is not judged on it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

from evalkit.contract import CONTROL
from evalkit.errors import EvalkitError
from evalkit.eval import runner
from evalkit.eval.harness_files import STDERR_FILE, STDOUT_FILE
from evalkit.eval.suite import Suite, load_suite
from evalkit.store.layout import EVENTS_FILE
from evalkit.store.reader import not_json

#: The suite ``evalkit conform`` runs when none is given (shipped in the package).
BUILTIN_SUITE = Path(__file__).parent / "suite" / "missions.yaml"
#: The mission keys the kit steers, and how.
DECISION, SIGTERM = "decision", "sigterm"
#: Seconds from SIGTERM to a written ``mission_finished`` and an exited process: the grace
#: ``run`` itself gives an agent at its timeout before it kills the group.
SIGTERM_BOUND_S = runner.TERM_GRACE_S
#: Seconds a whole mission may take before ``run``'s own timeout winds it up.
DEFAULT_TIMEOUT_S = 60.0
#: Who signs the kit's gate decisions.
DECIDED_BY = "evalkit conform"
#: Why the gate missions' rules are skipped for an agent that declares none.
NO_GATES = "the agent declares no gates (--no-gates)"
#: The flags that give a mission a gate (each takes a value).
GATE_FLAGS = ("--gate-tool", "--gate-wait")
#: The control word that answers a standing gate (the contract's vocabulary).
_GATE_DECISION = next(word for word in CONTROL if "approval_id" in CONTROL[word])


class Watch:
    """Sees one mission's stream as it lands (``runner.Steer``); notes the records the
    rules ask about, and answers the first standing gate in a subclass's way."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.control: BinaryIO | None = None
        self.lines = 0
        self.gate_line: int | None = None
        self.gate: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def started(self, pid: int, control: BinaryIO) -> None:
        self.pid, self.control = pid, control

    def line(self, raw: bytes) -> None:
        with self._lock:
            self.lines += 1
            try:
                record = json.loads(raw)
            except ValueError:
                return
            if not isinstance(record, dict):
                return
            self.seen(record)
            if record.get("event") == "gate_requested" and self.gate is None:
                self.gate, self.gate_line = record, self.lines
                self.at_gate(record)

    def seen(self, record: dict[str, Any]) -> None:
        """Every decoded record, in order (for subclasses)."""

    def at_gate(self, record: dict[str, Any]) -> None:
        """The first gate_requested (for subclasses)."""


class Decide(Watch):
    """Approves the first standing gate over the control channel."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: str | None = None

    def at_gate(self, record: dict[str, Any]) -> None:
        approval_id = record.get("approval_id")
        if not isinstance(approval_id, str) or self.control is None:
            return
        line = {"control": _GATE_DECISION, "approval_id": approval_id, "approve": True,
                "decided_by": DECIDED_BY, "note": "approved by the conformance kit"}
        try:
            self.control.write((json.dumps(line) + "\n").encode())
            self.sent = approval_id
        except OSError:  # the agent closed its end: it did not take the decision
            pass


class Terminate(Watch):
    """Sends SIGTERM at the first standing gate (with ``at_first_step``, at the first
    ``step_started``: an agent without gates); kills the group if the bound passes."""

    def __init__(self, *, at_first_step: bool = False) -> None:
        super().__init__()
        self.at_first_step = at_first_step
        #: The file line of the record the signal was sent at.
        self.sent_line: int | None = None
        self.sent_at: float | None = None
        self.finished_after: float | None = None
        self.killed = False

    def at_gate(self, record: dict[str, Any]) -> None:
        if not self.at_first_step:
            self._send()

    def _send(self) -> None:
        if self.pid is None or self.sent_at is not None:
            return
        self.sent_line = self.lines
        self.sent_at = time.monotonic()
        _signal_group(self.pid, signal.SIGTERM)
        timer = threading.Timer(SIGTERM_BOUND_S, self._overdue, args=(self.pid,))
        timer.daemon = True
        timer.start()

    def seen(self, record: dict[str, Any]) -> None:
        if self.at_first_step and record.get("event") == "step_started":
            self._send()
        if record.get("event") == "mission_finished" and self.sent_at is not None \
                and self.finished_after is None:
            self.finished_after = time.monotonic() - self.sent_at

    def _overdue(self, pid: int) -> None:
        if not _alive(pid):
            return  # the agent ended in time (a straggling child is run's to reap)
        self.killed = True
        _signal_group(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Whether the agent itself still runs: present, and not a zombie waiting to be reaped."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass
class Ran:
    """What one mission left: its decoded stream (by file line), capture and watch."""

    key: str
    folder: Path
    #: (file line, decoded value) for every line that is JSON; ``undecoded`` the others.
    records: list[tuple[int, Any]]
    undecoded: list[tuple[int, str]]
    capture: dict[str, Any]
    watch: Watch
    stdout: str = ""
    stderr: str = ""
    flags: tuple[str, ...] = field(default=())

    def where(self, line: int | None = None) -> str:
        """``key/events.jsonl:LINE``: where a finding points."""
        return f"{self.key}/{EVENTS_FILE}" + (f":{line}" if line is not None else "")


def load(suite_path: str | Path | None) -> Suite:
    """The conformance suite: the shipped one, or ``--suite``'s (refused in one sentence
    when it cannot be read)."""
    return load_suite(BUILTIN_SUITE if suite_path is None else suite_path)


def check_program(spawn: tuple[str, ...]) -> None:
    """Refuse a spawn line whose program does not exist, before any folder is made."""
    if not spawn:
        return
    program = spawn[0]
    found = os.path.exists(program) if os.sep in program else shutil.which(program) is not None
    if not found:
        raise EvalkitError(f"cannot start the agent: {program!r} is not a file here nor a "
                           "program on PATH")


def _gated(flags: tuple[str, ...]) -> bool:
    return any(flag.split("=", 1)[0] in GATE_FLAGS for flag in flags)


def _without_gates(flags: tuple[str, ...]) -> tuple[str, ...]:
    """``flags`` less every gate flag and its value."""
    kept: list[str] = []
    skip_value = False
    for flag in flags:
        if skip_value:
            skip_value = False
        elif flag in GATE_FLAGS:
            skip_value = True
        elif flag.split("=", 1)[0] not in GATE_FLAGS:
            kept.append(flag)
    return tuple(kept)


def run_battery(suite: Suite, spawn: tuple[str, ...], out: Path, *,
                timeout_s: float = DEFAULT_TIMEOUT_S, gates: bool = True) -> list[Ran]:
    """Spawn every mission (one at a time: the kit measures a bound, so it does not share
    the machine with itself) and read back what each wrote. Without ``gates`` the missions
    that need one are left out, and ``sigterm`` runs without its gate flags."""
    agent = runner.agent_for(suite, spawn or None)
    # The built-in runtime keeps approvals and audit under EVALKIT_HOME: the kit's stay in
    # its own folder, never the user's state.
    env = {"EVALKIT_HOME": str((out / "state").resolve())}
    jobs, skipped = runner.make_jobs(suite, suite.missions, agent, out, timeout_s=timeout_s,
                                     env=env)
    if skipped:
        key, why = next(iter(skipped.items()))
        raise EvalkitError(f"conformance mission {key!r} cannot run: {why}")
    if not gates:
        jobs = [replace(job, flags=_without_gates(job.flags)) if job.key == SIGTERM else job
                for job in jobs if job.key == SIGTERM or not _gated(job.flags)]
    ran: list[Ran] = []
    with runner.executor_session("local"):
        for job in jobs:
            watch = (Decide() if job.key == DECISION
                     else Terminate(at_first_step=not gates) if job.key == SIGTERM else Watch())
            capture = runner.run_mission(job, watch)
            ran.append(_read(job, capture, watch))
    if ran and all(r.capture.get("spawn_error") for r in ran):
        raise EvalkitError(f"the agent never started: {ran[0].capture['spawn_error']}")
    return ran


def _read(job: runner.Job, capture: dict[str, Any], watch: Watch) -> Ran:
    folder = Path(job.out)
    records: list[tuple[int, Any]] = []
    undecoded: list[tuple[int, str]] = []
    raw = (folder / EVENTS_FILE).read_bytes()
    for number, line in enumerate(raw.splitlines(), start=1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            undecoded.append((number, line.decode("utf-8", errors="replace")))
            continue
        if not text.strip():
            continue
        try:
            records.append((number, json.loads(text, parse_constant=not_json)))
        except ValueError:
            undecoded.append((number, text))
    return Ran(key=job.key, folder=folder, records=records, undecoded=undecoded,
               capture=capture, watch=watch, flags=job.flags,
               stdout=_text(folder / STDOUT_FILE), stderr=_text(folder / STDERR_FILE))



def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
