"""The emitter: the one place a stream record leaves the mission.

Order matters twice over. The run store gets a record *before* the sink
does, so anything a harness has seen is already on disk (a resumed or
replayed run never lacks a record its follower saw). And one lock spans both
writes, so records from parallel branches form one sequence whose order is
the same in events.jsonl and on the sink.
"""

from __future__ import annotations

import threading
from typing import Any

from evalkit.redact import redact_obj
from evalkit.store.runstore import RunWriter
from evalkit.store.sink import EventSink


class Emitter:
    """Scrubs each record, records it, then streams it; either end may be absent."""

    def __init__(self, sink: EventSink | None, writer: RunWriter | None) -> None:
        self.sink = sink
        self.writer = writer
        self.emitted = 0
        self._lock = threading.Lock()

    def emit(self, record: dict[str, Any]) -> dict[str, Any]:
        """Redact, append to the run store, write to the sink; returns the record as emitted."""
        scrubbed: dict[str, Any] = redact_obj(record)
        with self._lock:
            if self.writer is not None:
                self.writer.append(scrubbed, scrubbed=True)
            if self.sink is not None:
                self.sink.write(scrubbed)
            self.emitted += 1
        return scrubbed

    def stream(self, record: dict[str, Any]) -> dict[str, Any]:
        """Redact and write to the sink alone: the run store refused this record."""
        scrubbed: dict[str, Any] = redact_obj(record)
        with self._lock:
            if self.sink is not None:
                self.sink.write(scrubbed)
            self.emitted += 1
        return scrubbed
