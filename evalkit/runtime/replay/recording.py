"""A run directory read back whole, for replay, resume and regrade — and never written.

``RUN`` on a command line is a run id in the store (``EVALKIT_RUNS``) or a
path to a run directory; ``resolve_run`` turns either into a directory or
one sentence saying why not. ``read_recording`` reads the four files a run
leaves (events, meta, model calls, tool calls) with plain reads: no lock is
taken and no torn tail is cut, so a recording being replayed keeps its bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from evalkit.errors import EvalkitError
from evalkit.store import layout
from evalkit.store.reader import file_bytes, not_json, read_events_file

#: Outcomes that end a mission for good: resuming one is refused.
CONCLUSIONS = ("answered", "answered_with_caveat", "budget_exhausted")


@dataclass
class Recording:
    """Everything one run directory holds, parsed."""

    path: Path
    #: meta.json whole (``run_id``, ``created_at``, ``meta`` …); empty when missing.
    meta_file: dict[str, Any]
    records: list[dict[str, Any]]
    model_calls: list[dict[str, Any]] = field(default_factory=list)
    tool_lines: list[dict[str, Any]] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return str(self.meta_file.get("run_id") or self.path.name)

    @property
    def meta(self) -> dict[str, Any]:
        inner = self.meta_file.get("meta")
        return inner if isinstance(inner, dict) else {}

    @property
    def flags(self) -> dict[str, Any]:
        flags = self.meta.get("flags")
        return flags if isinstance(flags, dict) else {}

    @property
    def started(self) -> dict[str, Any] | None:
        """The run's ``mission_started`` (the first; a resumed run has only one)."""
        return next((r for r in self.records if r.get("event") == "mission_started"), None)

    @property
    def finished(self) -> dict[str, Any] | None:
        """The last ``mission_finished``, if any."""
        return next((r for r in reversed(self.records)
                     if r.get("event") == "mission_finished"), None)

    @property
    def closed(self) -> bool:
        """True when the log ends with ``mission_finished`` (a resumed stretch may not)."""
        return bool(self.records) and self.records[-1].get("event") == "mission_finished"

    @property
    def objective(self) -> str:
        started = self.started or {}
        text = started.get("objective", self.meta.get("objective"))
        return text if isinstance(text, str) else ""

    @property
    def steps(self) -> int:
        """How many ``step_started`` records the log holds (steps taken, across resumes)."""
        return sum(1 for r in self.records if r.get("event") == "step_started")


def resolve_run(spec: str, store_root: Path | None) -> Path:
    """The run directory ``spec`` names: a run id in the store, else a directory path."""
    text = str(spec).strip()
    if not text:
        raise EvalkitError("no run given: name a run id or a run directory")
    if store_root is not None and layout.is_run_id(text):
        candidate = Path(store_root) / text
        if (candidate / layout.EVENTS_FILE).is_file():
            return candidate
    path = Path(text).expanduser()
    if path.is_dir() and (path / layout.EVENTS_FILE).is_file():
        _refuse_a_copied_stream(path)
        return path
    if path.is_dir():
        raise EvalkitError(f"{path} is not a run directory (no {layout.EVENTS_FILE} in it)")
    where = f" in {store_root}" if store_root is not None else ""
    raise EvalkitError(f"no such run: {text} (not a run id{where}, not a run directory)")


def _refuse_a_copied_stream(path: Path) -> None:
    """A mission folder of ``evalkit run`` holds the stream it captured, but the recording
    (model and tool calls) is in its run directory below: replayed, the copy would run off
    the end at the first model call. Name the directory to replay instead."""
    if (path / layout.META_FILE).exists():
        return
    below = sorted(str(run.parent) for run in path.glob(f"*/run_*/{layout.META_FILE}")
                   if layout.is_run_id(run.parent.name))
    if below:
        shown = ", ".join(below[:3]) + (f" and {len(below) - 3} more" if len(below) > 3 else "")
        raise EvalkitError(f"{path} holds a copy of a mission's stream, not its recording "
                           f"(no {layout.META_FILE}); replay its run directory: {shown}")


def read_recording(path: Path) -> Recording:
    """Read a run directory; a missing model or tools file is an empty one."""
    path = Path(path)
    records = read_events_file(path / layout.EVENTS_FILE).records
    data = file_bytes(path / layout.META_FILE)
    meta = {} if data is None else _exact(data)
    if meta is None:
        raise EvalkitError(f"{path / layout.META_FILE} is not valid JSON")
    if not isinstance(meta, dict):
        raise EvalkitError(f"{path / layout.META_FILE} is not a run's meta.json")
    return Recording(path=path, meta_file=meta, records=records,
                     model_calls=read_lines(path / layout.MODEL_FILE),
                     tool_lines=read_lines(path / layout.TOOLS_FILE))


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON-object lines of a recording file (a torn last line is left out)."""
    data = file_bytes(path)
    if data is None:
        return []
    out = []
    for line in data.splitlines():
        if not line.strip():
            continue
        value = _exact(line)
        if value is None:
            continue  # a crash mid-write leaves at most this; it was never acknowledged
        if isinstance(value, dict):
            out.append(value)
    return out


def _exact(data: bytes) -> Any:
    """JSON read exactly as it was written, or None when it is not JSON (torn).

    orjson first; what it refuses may be JSON all the same. The run store escapes a
    lone surrogate (``sink.json_bytes``: an endpoint cut an emoji in half) and orjson
    refuses the escape, where Python's reader gives the very string back: a replay
    serves what the model sent. (The stream reader makes such a character U+FFFD, as
    Parquet must; a replay owes the recording its exact text.) NaN is not JSON.
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(data, parse_constant=not_json)
    except ValueError:  # torn (UnicodeDecodeError is one too)
        return None
