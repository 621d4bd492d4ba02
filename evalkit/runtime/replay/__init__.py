"""Hermetic replay: a recorded run again, through the real loop, with nothing dialled.

- ``recording`` — ``resolve_run``, ``read_recording``: a run directory read back whole.
- ``model`` — ``ReplayBackend`` (replies by ordinal, drift noted), ``ForkBackend``.
- ``plane`` — ``RecordedPlane`` (results by canonical call, ``not_in_recording``).
- ``drift`` — the first difference between a recorded request and the live one.
- ``session`` — the ``--replay`` door ``launch`` goes through.

See docs/REPLAY.md for the user's view.
"""

from __future__ import annotations

from evalkit.runtime.replay.model import (
    ForkBackend,
    RecordingExhausted,
    ReplayBackend,
    ReplayedFailure,
)
from evalkit.runtime.replay.plane import NOT_IN_RECORDING, RecordedPlane, call_key
from evalkit.runtime.replay.recording import (
    CONCLUSIONS,
    Recording,
    read_recording,
    resolve_run,
)

__all__ = [
    "CONCLUSIONS",
    "NOT_IN_RECORDING",
    "ForkBackend",
    "RecordedPlane",
    "Recording",
    "RecordingExhausted",
    "ReplayBackend",
    "ReplayedFailure",
    "call_key",
    "read_recording",
    "resolve_run",
]
