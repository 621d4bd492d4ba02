"""``--control``: what a running mission can be told, one JSON object per line.

The source is ``fd:N`` (an inherited descriptor — what a platform uses),
``-`` (stdin, for a person typing at a run) or a path (a FIFO, or a regular
file that is followed as it grows). A background thread reads it; the loop
asks at its own boundaries. The vocabulary is closed to four words:

- ``{"control": "inject", "text": "..."}`` — a user turn added before the next
  model call; that step's ``step_started.injected`` carries it back.
- ``{"control": "cancel"}`` — the run winds up at its next check
  (``incomplete``, reason ``cancelled``).
- ``{"control": "cancel_step"}`` — the calls of the current step not yet made
  are skipped (a running tool is left alone); one that arrives after its step
  is over is a no-op, and the model is told so.
- ``{"control": "gate_decision", "approval_id": "ap_...", "approve": true,
  "decided_by": "NAME", "note": "..."}`` — answers a standing gate.

A line that is not JSON, an unknown word, a missing field or a decision
signed by nobody is dropped with one sentence on stderr (redacted), and the
run carries on.
"""

from __future__ import annotations

import json
import os
import select
import stat
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evalkit.contract import CONTROL
from evalkit.errors import EvalkitError

#: The closed vocabulary: the contract owns it (``CONTROL``).
WORDS = tuple(CONTROL)

#: What the model reads about an operator's cancel_step.
SKIPPED_CALL = ("the operator cancelled the rest of this step (cancel_step); {tool} was not "
                "called")
LATE_CANCEL_STEP = ("(operator) A request to cancel a step arrived after that step had "
                    "finished; nothing was undone.")

_CHUNK = 65536


@dataclass(frozen=True)
class Decision:
    """A person's answer to a standing gate."""

    approval_id: str
    approve: bool
    decided_by: str
    note: str | None = None


def _stderr(sentence: str) -> None:
    print(sentence, file=sys.stderr, flush=True)


class ControlChannel:
    """Reads control lines in a thread; the loop takes what arrived at its boundaries."""

    def __init__(self, fd: int, *, mode: str, owns_fd: bool, spec: str,
                 warn: Callable[[str], None] | None = None) -> None:
        #: "stream": EOF ends the channel; "follow": a file or FIFO, polled until close.
        self.mode = mode
        self.spec = spec
        self._fd = fd
        self._owns_fd = owns_fd
        self._warn = warn or _stderr
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._injected: list[str] = []
        self._cancel_step = False
        self._decisions: dict[str, Decision] = {}
        self._on_cancel: Callable[[], None] | None = None
        self._thread: threading.Thread | None = None
        self.dropped = 0

    @classmethod
    def open(cls, spec: str, *, warn: Callable[[str], None] | None = None) -> ControlChannel:
        """A channel on ``-``, ``fd:N`` or a path; a source that cannot be opened is refused."""
        if spec == "-":
            return cls(0, mode="stream", owns_fd=False, spec=spec, warn=warn)
        if spec.startswith("fd:"):
            number = spec[3:]
            if not (number.isascii() and number.isdigit()):
                raise EvalkitError(f"bad control source {spec!r}: after fd: comes a descriptor "
                                   "number, like fd:3")
            fd = int(number)
            try:
                os.fstat(fd)
            except OSError:
                raise EvalkitError(f"control source {spec}: descriptor {fd} is not open") from None
            return cls(fd, mode="stream", owns_fd=fd > 2, spec=spec, warn=warn)
        try:
            fd = os.open(spec, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise EvalkitError(f"cannot open control source {spec}: {exc.strerror or exc}"
                               ) from None
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            os.close(fd)
            raise EvalkitError(f"control source {spec} is a directory")
        return cls(fd, mode="follow", owns_fd=True, spec=spec, warn=warn)

    # -- life cycle ---------------------------------------------------------------------------

    def start(self, on_cancel: Callable[[], None]) -> ControlChannel:
        """Start reading; ``on_cancel`` is called (from the reader thread) on ``cancel``."""
        self._on_cancel = on_cancel
        self._thread = threading.Thread(target=self._read, name="evalkit-control", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop reading; decisions nobody asked for are reported as dropped."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._owns_fd:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._owns_fd = False
        with self._lock:
            left, self._decisions = list(self._decisions), {}
        for approval_id in left:
            self._drop(f"gate_decision for {approval_id}: no gate was standing there")

    def drained(self, timeout: float) -> bool:
        """Wait until a stream source (``-``, ``fd:N``) has been read to its end."""
        if self._thread is None:
            return False
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- what the loop asks -----------------------------------------------------------------

    def injections(self) -> list[str]:
        """The instructions that arrived since the last step (taken)."""
        with self._lock:
            taken, self._injected = self._injected, []
        return taken

    def late_cancel_step(self) -> bool:
        """At a step boundary: a cancel_step still pending arrived too late (taken)."""
        with self._lock:
            late, self._cancel_step = self._cancel_step, False
        return late

    def step_cancelled(self) -> bool:
        """Within a step, before a call: the operator asked to skip the rest (taken)."""
        return self.late_cancel_step()

    def take_decision(self, approval_id: str) -> Decision | None:
        """The decision for this standing gate, if one arrived (taken); others are dropped."""
        with self._lock:
            found = self._decisions.pop(approval_id, None)
            others, self._decisions = list(self._decisions), {}
        for other in others:
            self._drop(f"gate_decision for {other}: no gate is standing there "
                       f"(the run is waiting on {approval_id})")
        return found

    # -- the reader ----------------------------------------------------------------------------

    def _read(self) -> None:
        buffer = b""
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self._fd], [], [], 0.1)
            except (OSError, ValueError):
                break
            if not ready:
                continue
            try:
                chunk = os.read(self._fd, _CHUNK)
            except BlockingIOError:
                continue
            except OSError:
                break
            if not chunk:
                if self.mode == "stream":
                    break
                self._stop.wait(0.1)  # a file not grown yet, or a FIFO with no writer
                continue
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                self._handle(line)
        if buffer.strip() and self.mode == "stream":
            self._handle(buffer)

    def _handle(self, raw: bytes) -> None:
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            self._drop("a line that is not UTF-8")
            return
        if not text:
            return
        try:
            command = json.loads(text)
        except ValueError:
            self._drop(f"a line that is not JSON: {_preview(text)}")
            return
        if not isinstance(command, dict):
            self._drop(f"a line that is not a JSON object: {_preview(text)}")
            return
        word = command.get("control")
        if word == "inject":
            said = command.get("text")
            if not isinstance(said, str) or not said.strip():
                self._drop("inject without text (a non-empty string)")
                return
            with self._lock:
                self._injected.append(said)
        elif word == "cancel":
            if self._on_cancel is not None:
                self._on_cancel()
        elif word == "cancel_step":
            with self._lock:
                self._cancel_step = True
        elif word == "gate_decision":
            decision = _decision(command)
            if isinstance(decision, str):
                self._drop(decision)
                return
            with self._lock:
                self._decisions[decision.approval_id] = decision
        else:
            self._drop(f"unknown control word {word!r} (the words are {', '.join(WORDS)})")

    def _drop(self, what: str) -> None:
        from evalkit.redact import redact

        self.dropped += 1
        self._warn(redact(f"control: dropped {what}; the run carries on."))


def _preview(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _decision(command: dict[str, Any]) -> Decision | str:
    """A valid gate decision, or the reason it is dropped."""
    from evalkit.runtime.governance.approvals import is_approval_id

    approval_id = command.get("approval_id")
    if not is_approval_id(approval_id):
        return "gate_decision without a valid approval_id (ap_ and 16 hex digits)"
    approve = command.get("approve")
    if not isinstance(approve, bool):
        return f"gate_decision for {approval_id} without approve: true or false"
    decided_by = command.get("decided_by")
    if not isinstance(decided_by, str) or not decided_by.strip():
        return f"gate_decision for {approval_id} signed by nobody (decided_by is required)"
    note = command.get("note")
    if note is not None and not isinstance(note, str):
        return f"gate_decision for {approval_id} whose note is not a string"
    return Decision(approval_id, approve, decided_by.strip(), note)
