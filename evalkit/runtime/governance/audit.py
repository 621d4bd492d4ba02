"""The audit log: one fsync'd, redacted JSONL line per dispatch decision.

Every call the model makes ends in exactly one decision — ``allowed`` (the
tool ran; its exit code, duration and bytes out are kept), ``denied`` (a
scope, the closed set, a gate or a spent approval stopped it; the reason
says which) or ``error`` (the dispatch itself failed: unknown tool, invalid
arguments, a server down, a process killed before it exited). One file per
run, beside the run store by default (the state folder's ``audit/``; ``EVALKIT_AUDIT``
moves it, ``none``/``off`` silences it), named after the run id, or a
timestamp when nothing is recorded. Arguments are not copied here: the recording has them.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.redact import redact_obj
from evalkit.store.runstore import now_iso
from evalkit.store.sink import json_bytes
from evalkit.store.state import AUDIT

AUDIT_ENV = "EVALKIT_AUDIT"
OFF = ("none", "off")

#: The closed set of verdicts.
VERDICTS = ("allowed", "denied", "error")

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def beside_runs(environ: Mapping[str, str], name: str) -> Path:
    """The default home of a governance folder: beside the run store.

    ``$EVALKIT_HOME/runs`` -> ``$EVALKIT_HOME/<name>``; a harness that moves the
    run store (``EVALKIT_RUNS=out/m1/runs``) gets ``out/m1/<name>`` with it, so
    every mission's records stay together. With recording off, the state folder's.
    """
    from evalkit.store.layout import runs_root
    from evalkit.store.state import state_path

    runs = runs_root(environ)
    return state_path(name, environ) if runs is None else runs.parent / name


def audit_root(environ: Mapping[str, str] | None = None) -> Path | None:
    """Where audit files go, or None when ``EVALKIT_AUDIT`` silences them."""
    env = os.environ if environ is None else environ
    value = env.get(AUDIT_ENV)
    if value is None or value == "":
        return beside_runs(env, AUDIT)
    if value.strip().lower() in OFF:
        return None
    return Path(value)


class AuditLog:
    """The audit folder of one mission; ``open`` starts the run's file, ``write`` appends."""

    def __init__(self, folder: Path | str) -> None:
        self.folder = Path(folder).absolute()
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EvalkitError(f"cannot create the audit folder {self.folder}: "
                               f"{exc.strerror or exc} (EVALKIT_AUDIT moves it; off silences it)"
                               ) from None
        if not os.access(self.folder, os.W_OK):
            raise EvalkitError(f"the audit folder {self.folder} is not writable "
                               "(EVALKIT_AUDIT moves it; off silences it)")
        self.path: Path | None = None
        self._fd: int | None = None
        self._lock = threading.Lock()

    def open(self, run_id: str | None) -> Path:
        """Create (or continue) this run's file; returns its path."""
        name = run_id or time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(4)
        path = self.folder / f"{name}.jsonl"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _CLOEXEC, 0o644)
        except OSError as exc:
            raise EvalkitError(f"cannot open the audit file {path}: {exc.strerror or exc}") from None
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
            self._fd, self.path = fd, path
        return path

    def write(self, entry: dict[str, Any]) -> None:
        """Append one decision, redacted, and fsync it. Raises EvalkitError on a write error."""
        data = json_bytes(redact_obj(entry), separators=(",", ":"), default=str) + b"\n"
        with self._lock:
            if self._fd is None:
                raise EvalkitError("the audit log is not open")
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._fd, view):]
                os.fsync(self._fd)
            except OSError as exc:
                raise EvalkitError(f"cannot write the audit file {self.path}: "
                                   f"{exc.strerror or exc}") from None

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def entry(*, tool: str, scopes: Any, profile: str, verdict: str, reason: str | None,
          exit_code: int | None, duration_s: float, bytes_out: int, run_id: str | None,
          **extra: Any) -> dict[str, Any]:
    """One audit line, fields in their documented order (extras after, when set)."""
    line: dict[str, Any] = {
        "time": now_iso(), "tool": tool, "scopes": list(scopes), "profile": profile,
        "verdict": verdict, "reason": reason, "exit_code": exit_code,
        "duration_s": round(duration_s, 6), "bytes_out": bytes_out, "run_id": run_id,
    }
    line.update({k: v for k, v in extra.items() if v is not None})
    return line
