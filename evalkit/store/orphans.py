"""Orphans: runs whose process died before writing ``mission_finished``.

A follower of such a run would wait forever, so the next mission to start
in the same store closes it: ``mission_finished`` ``incomplete`` appended
(``steps`` counted from its ``step_started`` records, ``reason: "orphaned"``)
and ``orphaned_at`` noted in its meta.

Liveness is a lock, not a clock. A run is an orphan only when all three
hold: its log does not end with ``mission_finished``, nobody holds its lock,
and its meta.json has not been touched for ``STALE_AFTER_S`` (which covers the
instant between a run directory being made and its lock being taken). The
reconciler takes the run's lock itself before writing, so a run that comes
alive meanwhile, or two reconcilers at once, can never produce a second
``mission_finished``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson

from evalkit.errors import EvalkitError
from evalkit.store import layout
from evalkit.store.reader import read_events_file
from evalkit.store.runstore import RunStore, RunWriter, lock_held, now_iso
from evalkit.store.signing import Signer

#: Seconds meta.json must have gone untouched before a lock-free unfinished run is an orphan.
STALE_AFTER_S = 60.0
#: The ``reason`` on the ``mission_finished`` an orphan is closed with.
ORPHANED = "orphaned"


def close_orphans(store: RunStore, *, keep: Iterable[str] = (),
                  close: Callable[[RunWriter], None] = RunWriter.close,
                  stale_after_s: float = STALE_AFTER_S, now: float | None = None) -> list[str]:
    """Close every orphan in ``store`` (except ids in ``keep``); returns the ids closed.

    ``close`` closes each orphan's writer: the runtime, the gate and the recorder pass
    ``evalkit.gate.certificates.close_certified``, the way they close their own runs, so
    an orphan's folder holds the certificates any closed run of theirs holds."""
    spared = set(keep)
    clock = time.time() if now is None else now
    closed = []
    for run_id in store.run_ids():
        if run_id in spared:
            continue
        path = store.root / run_id
        if not _stale(path, clock, stale_after_s) or _meta_says_closed(path) or lock_held(path):
            continue
        if close_orphan(path, signer=store.signer, close=close):
            closed.append(run_id)
    return closed


def close_orphan(path: Path, *, signer: Signer | None = None,
                 close: Callable[[RunWriter], None] = RunWriter.close) -> bool:
    """Close one run if it is still unfinished once its lock is ours; True when closed
    (with ``close``, and sealed by ``signer``, when given)."""
    if _finished(path):
        return False  # decided without taking the lock: a closed run is not touched at all
    try:
        writer = RunWriter(path, signer=signer)
    except EvalkitError:
        return False  # alive after all, or unreadable: never guess
    try:
        records = read_events_file(path / layout.EVENTS_FILE).records
        if records and records[-1].get("event") == "mission_finished":
            return False  # closed meanwhile
        steps = sum(1 for r in records if r.get("event") == "step_started")
        started = next((r for r in records if r.get("event") == "mission_started"), {})
        max_steps = started.get("max_steps", 0)
        writer.append({"event": "mission_finished", "outcome": "incomplete", "steps": steps,
                       "max_steps": max_steps if isinstance(max_steps, int) else 0,
                       "reason": ORPHANED})
        writer.update_meta(outcome="incomplete", reason=ORPHANED, steps=steps,
                           orphaned_at=now_iso())
    finally:
        close(writer)
    return True


def _finished(path: Path) -> bool:
    try:
        records = read_events_file(path / layout.EVENTS_FILE).records
    except EvalkitError:
        return False
    return bool(records) and records[-1].get("event") == "mission_finished"


def _stale(path: Path, now: float, after: float) -> bool:
    for name in (layout.META_FILE, ""):
        try:
            return now - os.stat(path / name).st_mtime >= after
        except FileNotFoundError:
            continue
    return False


def _meta_says_closed(path: Path) -> bool:
    """A run closed by its own loop says so in meta.json (``outcome`` set): no log read."""
    try:
        meta: Any = orjson.loads((path / layout.META_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return False
    inner = meta.get("meta") if isinstance(meta, dict) else None
    return isinstance(inner, dict) and inner.get("outcome") is not None
