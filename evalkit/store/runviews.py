"""The run store as a host reads it: ``RunRecord``, ``RunEvent``, ``TerminalSummary``.

A host that files agent runs (an audit log, a dashboard, ``evalkit runs``) wants
three small records per run, not the stream itself: who the run was (id, suite,
mission, status, times), what happened in order, and how it ended. These views
are read from the recording — ``meta.json`` and ``events.jsonl`` — and never
written: the stream stays the one truth, and a view can always be made again.

The boundary is the view's whole point: refs and bounded metadata only. An
objective, a tool's arguments and output, an answer's text never appear; the
view says how big they were and where they are (``content_ref``). What text a
view does carry (a refusal's sentence, a reason, a model name) is cut to
``TEXT_LIMIT`` characters and scrubbed of credentials once more, although the
writer scrubbed it already, because a stream may come from any agent.

A run that was cut short — torn last line, no ``mission_finished``, an
unreadable ``meta.json`` — is listed with status ``incomplete`` (the contract's
default word), never an error; a run whose writer still holds its lock is
``running``. The KPIs a verdict is made of stay in the scorer's fold
(``evalkit.eval.summary``): this module only reads what the stream says.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, time, timezone
from pathlib import Path
from typing import Any

from evalkit.contract import OUTCOMES
from evalkit.errors import EvalkitError
from evalkit.redact import redact
from evalkit.store import layout
from evalkit.store.reader import StreamRead, file_bytes, read_events_file
from evalkit.store.runstore import lock_held
from evalkit.store.values import number

#: The status of a run whose writer is alive (not an outcome: it has none yet).
RUNNING = "running"
#: The status of a run that ended without a known outcome (the contract's default word).
INCOMPLETE = "incomplete"
#: Every status a RunRecord can carry.
STATUSES: tuple[str, ...] = (*OUTCOMES, RUNNING)
#: The longest text a view carries; longer text is cut and ends with an ellipsis.
TEXT_LIMIT = 160
#: The most names a list in a view carries (tool names in a catalogue, say).
NAMES_LIMIT = 24
#: Fields that hold payload — what the model, a tool or a person said: only their size shows.
PAYLOAD = frozenset({"objective", "arguments", "output", "text", "plan", "checks", "detail",
                     "artifacts", "review", "injected", "unsupported", "silent", "uncited",
                     "catalogue_detail"})
#: List fields that hold names (tools, scopes), shown as names.
NAMES = frozenset({"catalogue", "gated", "granted", "scopes"})
#: How a refusal by governance starts its sentence (evalkit.runtime.governance.governor).
REFUSED = ("denied", "gated")


@dataclass(frozen=True)
class RunRecord:
    """One run: runkit's RunRecord (run id, workflow id, task id, status, metadata, times).

    ``workflow_id`` is the suite, ``task_id`` the mission key, when the run says or
    sits where the harness files them; None when nothing says."""

    run_id: str
    workflow_id: str | None
    task_id: str | None
    status: str
    created_at: str | None
    updated_at: str | None
    finished_at: str | None
    path: str
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # metadata is a plain dict: copied, nested values too


@dataclass(frozen=True)
class RunEvent:
    """One record of the stream, in order: its seq, time, event name, step, bounded metadata."""

    run_id: str
    seq: int
    at: str | None
    type: str
    index: int | float | None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # metadata is a plain dict: copied, nested values too


@dataclass(frozen=True)
class TerminalSummary:
    """How a run ended: runkit's TerminalSummary (content ref, tokens, call counts, tools,
    abort reason), read from ``mission_finished`` and the tool records."""

    run_id: str
    status: str
    finished: bool
    #: Where the answer is (``RUN_ID/events.jsonl#seq=N``), never the answer itself.
    content_ref: str | None
    answer_chars: int | None
    input_tokens: int | float | None
    output_tokens: int | float | None
    total_tokens: int | float | None
    llm_calls: int | float | None
    tool_calls: int
    used_tools: tuple[str, ...]
    gated_tools: tuple[str, ...]
    denied_calls: int
    failed_calls: int
    steps: int | float | None
    elapsed_s: int | float | None
    abort_reason: str | None
    events: int
    skipped_lines: int

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("used_tools", "gated_tools"):
            out[key] = list(out[key])
        return out


# -- where runs are -----------------------------------------------------------------------


def find_run_dirs(root: Path) -> list[Path]:
    """Every run directory at or under ``root`` (a folder named as a run id holding an
    events file or meta.json), sorted; hidden folders are not looked in."""
    root = Path(root)
    if _is_run_dir(root):
        return [root]
    found = []
    for here, dirs, _files in os.walk(root):
        keep = []
        for name in sorted(dirs):
            if name.startswith("."):
                continue
            path = Path(here) / name
            if _is_run_dir(path):
                found.append(path)
            else:
                keep.append(name)
        dirs[:] = keep
    return sorted(found)


def _is_run_dir(path: Path) -> bool:
    return layout.is_run_id(path.name) and (
        (path / layout.EVENTS_FILE).is_file() or (path / layout.META_FILE).is_file())


def find_run(spec: str, root: Path | None) -> Path:
    """The run directory ``spec`` names: a path to one, a folder holding exactly one, or a
    run id under ``root``."""
    given = Path(spec)
    if given.is_dir() and _is_run_dir(given):
        return given
    if layout.is_run_id(given.name) and given.is_dir() and os.sep in spec:
        return given  # a run directory with neither file yet: listed as incomplete
    if given.is_dir():  # a mission's folder (``<key>/runs/<run id>``): its one run
        below = find_run_dirs(given)
        if len(below) == 1:
            return below[0]
        if below:
            raise EvalkitError(f"{spec} holds {len(below)} runs: name one of them "
                               "(evalkit runs list shows them)")
    if root is not None and layout.is_run_id(spec):
        direct = root / spec
        if direct.is_dir():
            return direct
        for path in find_run_dirs(root) if root.is_dir() else []:
            if path.name == spec:
                return path
    where = f" under {root}" if root is not None else ""
    raise EvalkitError(f"no such run: {spec} (give a run id{where} or a run directory)")


# -- the views ----------------------------------------------------------------------------


def run_record(run_dir: Path, *, root: Path | None = None) -> RunRecord:
    """The RunRecord of one run directory; a torn or partial run is ``incomplete``."""
    return _Run(Path(run_dir), root).record()


def run_events(run_dir: Path, *, limit: int | None = None) -> list[RunEvent]:
    """The run's records in order (the first ``limit``), each with bounded metadata."""
    run = _Run(Path(run_dir), None)
    out = []
    for i, record in enumerate(run.stream.records):
        if limit is not None and len(out) >= limit:
            break
        envelope = run.stream.envelopes.get(i, {})
        seq = number(envelope.get("seq"))
        event = record.get("event")
        out.append(RunEvent(
            run_id=run.run_id, seq=seq if isinstance(seq, int) else run.stream.lines[i],
            at=_short(envelope.get("at")), type=_short(event) if event is not None else "?",
            index=number(record.get("index")), metadata=bounded_metadata(record)))
    return out


def terminal_summary(run_dir: Path) -> TerminalSummary:
    """How the run ended, from its last ``mission_finished`` and its tool records."""
    return _Run(Path(run_dir), None).summary()


def list_runs(root: Path, *, suite: str | None = None, outcome: str | None = None,
              since: str | datetime | None = None, until: str | datetime | None = None
              ) -> list[RunRecord]:
    """The runs under ``root``, oldest first, filtered by suite, outcome and creation time.

    ``since``/``until`` are ISO dates or times (UTC when no zone is given); a date alone
    as ``until`` takes in that whole day. A bad word or date is one sentence."""
    if outcome is not None:
        check_outcome(outcome)
    low = parse_when(since, "--since") if since is not None else None
    high = parse_when(until, "--until", end=True) if until is not None else None
    root = Path(root)
    if not root.exists():
        raise EvalkitError(f"no run store at {root}")
    if not root.is_dir():
        raise EvalkitError(f"{root} is not a folder of runs")
    suites: dict[Path, str | None] = {}
    found = []
    for path in find_run_dirs(root):
        record = _Run(path, root, suites).record()
        if suite is not None and record.workflow_id != suite:
            continue
        if outcome is not None and record.status != outcome:
            continue
        if low is not None or high is not None:
            when = _parse_stamp(record.created_at)
            if when is None or (low is not None and when < low) or (
                    high is not None and when > high):
                continue
        found.append(record)
    found.sort(key=lambda r: (r.created_at or "", r.run_id))
    return found


def check_outcome(word: str) -> None:
    """Refuse a word that is not an outcome, naming the ones that are."""
    if word not in OUTCOMES:
        raise EvalkitError(f"{word!r} is not an outcome; the outcomes are "
                           f"{', '.join(OUTCOMES)}")


def parse_when(value: str | datetime, flag: str = "the date", *, end: bool = False) -> datetime:
    """An ISO date or date-time as an aware UTC datetime; ``end``: a bare date means its last
    instant. Anything else is one sentence naming the flag and the forms it takes."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    text = value.strip()
    try:
        if len(text) == 10:
            day = datetime.strptime(text, "%Y-%m-%d").date()
            return datetime.combine(day, time.max if end else time.min, tzinfo=timezone.utc)
        stamp = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        raise EvalkitError(f"{flag} {value!r} is not a date: give YYYY-MM-DD or an ISO time "
                           "such as 2026-12-05T10:30:00Z") from None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)


def _parse_stamp(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    try:
        return parse_when(stamp)
    except EvalkitError:
        return None


def is_refusal(record: Mapping[str, Any]) -> bool:
    """Whether a ``tool_result`` is the built-in runtime's governance refusing the call, not
    the tool failing: a failed result that never ran (no exit code) whose error is the
    refusal's sentence, which starts with "denied"."""
    error = record.get("error")
    return (record.get("event") == "tool_result" and record.get("ok") is False
            and record.get("exit_code") is None and isinstance(error, str)
            and error.startswith("denied"))


def refusals(records: Sequence[Mapping[str, Any]]) -> set[int]:
    """The positions of the ``tool_result`` records that are governance refusing a call.

    Two writers say it two ways: the built-in runtime as ``is_refusal`` reads; the gate
    sidecar with a ``governance`` record (``what: result``, ``phase: rejected``) written
    just before the failed ``tool_call``/``tool_result`` pair that ends the call."""
    found = set()
    rejected = False
    for i, record in enumerate(records):
        event = record.get("event")
        if event == "governance" and record.get("what") == "result":
            rejected = record.get("phase") == "rejected"
        elif event == "tool_result":
            if is_refusal(record) or (rejected and record.get("ok") is False):
                found.add(i)
            rejected = False
    return found


# -- bounded metadata ---------------------------------------------------------------------


def bounded_text(value: Any, limit: int = TEXT_LIMIT) -> str:
    """Text cut to ``limit`` characters (an ellipsis says so) and scrubbed of credentials."""
    said = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                           default=str)
    said = " ".join(redact(said).split())
    return said if len(said) <= limit else said[: limit - 1] + "…"


def _short(value: Any) -> str | None:
    return None if value is None else bounded_text(value, 64)


def _size(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    try:
        return len(json.dumps(value, ensure_ascii=False, default=str))
    except (TypeError, ValueError):
        return 0


def bounded_metadata(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record's fields a host may keep: scalars (text bounded), name lists, number maps;
    payload fields only as their size, a refusal's sentence (evalkit's own words) bounded."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if key in ("event", "index") or not isinstance(key, str) or len(out) >= 32:
            continue
        name = _short(key) or "?"
        if key == "error" and isinstance(value, str):
            if value.startswith(REFUSED):
                out["refusal"] = bounded_text(value)
            out["error_chars"] = len(value)
        elif key in PAYLOAD:
            if value not in (None, "", [], {}):
                out[f"{name}_chars"] = _size(value)
        elif key in NAMES and isinstance(value, list):
            out[name] = [bounded_text(v, 64) for v in value[:NAMES_LIMIT]]
            if len(value) > NAMES_LIMIT:
                out[f"{name}_more"] = len(value) - NAMES_LIMIT
        elif isinstance(value, dict):
            kept = {_short(k) or "?": number(v) for k, v in list(value.items())[:12]
                    if number(v) is not None}
            if key == "budget" and isinstance(value.get("which"), str):
                kept["which"] = bounded_text(value["which"], 32)  # type: ignore[assignment]
            out[name] = kept
        elif isinstance(value, list):
            out[f"{name}_count"] = len(value)
        elif isinstance(value, str):
            out[name] = bounded_text(value)
        elif value is None or isinstance(value, bool):
            out[name] = value
        elif isinstance(value, (int, float)):
            out[name] = number(value)
    return out


# -- reading one run ----------------------------------------------------------------------


class _Run:
    """One run directory read once: its meta.json and its stream, whatever state they are in."""

    def __init__(self, path: Path, root: Path | None,
                 suites: dict[Path, str | None] | None = None) -> None:
        self.path = path
        self.root = root
        self._suites = suites if suites is not None else {}
        self.meta, self.meta_readable = _read_meta(path)
        self.run_id = path.name  # what the store and ``runs show`` know the run by
        events = path / layout.EVENTS_FILE
        try:
            self.stream = read_events_file(events)
        except EvalkitError:
            self.stream = StreamRead(source=events)
        self.finished_at: str | None = None
        self.finish: dict[str, Any] | None = None
        for i, record in enumerate(self.stream.records):
            if record.get("event") == "mission_finished":
                self.finish = record
                self.finished_at = _short(self.stream.envelopes.get(i, {}).get("at"))

    @property
    def inner(self) -> dict[str, Any]:
        found = self.meta.get("meta")
        return found if isinstance(found, dict) else {}

    def status(self) -> str:
        if lock_held(self.path):
            return RUNNING
        said = self.finish.get("outcome") if self.finish else None
        return said if isinstance(said, str) and said in OUTCOMES else INCOMPLETE

    def record(self) -> RunRecord:
        task, suite = self._placement()
        inner = self.inner
        meta: dict[str, Any] = {}
        for key in ("provider", "model", "protocol", "recorder", "source", "policy_hash"):
            if isinstance(inner.get(key), str):
                meta[key] = bounded_text(inner[key], 80)
        flags = inner.get("flags") if isinstance(inner.get("flags"), dict) else {}
        if isinstance(flags.get("profile"), str):
            meta["profile"] = bounded_text(flags["profile"], 32)
        objective = inner.get("objective")
        if isinstance(objective, str):
            meta["objective_chars"] = len(objective)
            meta["objective_ref"] = "sha256:" + hashlib.sha256(
                objective.encode("utf-8", "surrogatepass")).hexdigest()
        if self.finish is not None:
            for key in ("steps", "elapsed_s"):
                if number(self.finish.get(key)) is not None:
                    meta[key] = number(self.finish.get(key))
            if self.finish.get("reason") is not None:
                meta["reason"] = bounded_text(self.finish["reason"])
            said = self.finish.get("outcome")
            if not (isinstance(said, str) and said in OUTCOMES):
                meta["recorded_outcome"] = bounded_text(said, 64)
        else:
            meta["reason"] = "the stream ends without mission_finished"
        if self.stream.skipped:
            meta["skipped_lines"] = self.stream.skipped
        if not self.meta_readable:
            meta["meta_unreadable"] = True
        meta["sealed"] = (self.path / layout.MANIFEST_FILE).is_file()
        if meta["sealed"]:
            problem = self._seal_problem()
            if problem is not None:  # what the stream says is not what was sealed
                meta["tampered"] = bounded_text(problem)
        return RunRecord(
            run_id=self.run_id, workflow_id=suite, task_id=task, status=self.status(),
            created_at=_short(self.meta.get("created_at")) or self._envelope_at(0)
            or _id_time(self.run_id),
            updated_at=_short(self.meta.get("updated_at")) or self._envelope_at(-1),
            finished_at=self.finished_at, path=layout.as_text(str(self.path)), metadata=meta)

    def _seal_problem(self) -> str | None:
        """Why the stream fails its seal, as ``evalkit verify`` and ``score`` say it (None:
        it verifies). A view shows what a run says; this says whether to believe it."""
        from evalkit.store.seal import Checker

        events = self.path / layout.EVENTS_FILE
        try:
            data = file_bytes(events)
        except EvalkitError as exc:
            return exc.message
        if data is None:
            return f"{layout.EVENTS_FILE} is gone from a sealed run"
        return Checker.for_scoring([self.path]).altered(events, data)

    def summary(self) -> TerminalSummary:
        finish = self.finish or {}
        usage = finish.get("usage") if isinstance(finish.get("usage"), dict) else {}
        used: list[str] = []
        gated: list[str] = []
        calls = denied = failed = 0
        answer_at: int | None = None
        answer_chars: int | None = None
        refused = refusals(self.stream.records)
        for i, record in enumerate(self.stream.records):
            event = record.get("event")
            if event == "tool_call":
                calls += 1
                used.append(bounded_text(record.get("tool"), 64))
            elif event == "tool_result" and record.get("ok") is False:
                if i in refused:
                    denied += 1
                else:
                    failed += 1
            elif event == "gate_requested":
                gated.append(bounded_text(record.get("tool"), 64))
            elif event == "answer":
                answer_at = i
                answer_chars = _size(record.get("text"))
        status = self.status()
        ref = None
        if answer_at is not None:
            seq = self.stream.envelopes.get(answer_at, {}).get("seq")
            where = f"seq={seq}" if isinstance(seq, int) else \
                f"line={self.stream.lines[answer_at]}"
            ref = f"{self.run_id}/{layout.EVENTS_FILE}#{where}"
        return TerminalSummary(
            run_id=self.run_id, status=status, finished=self.finish is not None,
            content_ref=ref, answer_chars=answer_chars,
            input_tokens=number(usage.get("prompt_tokens")),
            output_tokens=number(usage.get("completion_tokens")),
            total_tokens=number(usage.get("total_tokens")), llm_calls=number(usage.get("calls")),
            tool_calls=calls, used_tools=tuple(sorted(set(used)))[:NAMES_LIMIT],
            gated_tools=tuple(sorted(set(gated)))[:NAMES_LIMIT], denied_calls=denied,
            failed_calls=failed, steps=number(finish.get("steps")),
            elapsed_s=number(finish.get("elapsed_s")), abort_reason=self._abort(status, gated),
            events=len(self.stream.records), skipped_lines=self.stream.skipped)

    def _abort(self, status: str, gated: list[str]) -> str | None:
        if status == RUNNING:
            return None
        if self.finish is None:
            return "the stream ends without mission_finished (crashed, killed or cut short)"
        if status in ("answered", "answered_with_caveat"):
            return None
        if self.finish.get("reason") is not None:
            return bounded_text(self.finish["reason"])
        budget = self.finish.get("budget")
        if isinstance(budget, dict) and isinstance(budget.get("which"), str):
            return f"the {bounded_text(budget['which'], 32)} budget ran out"
        if status == "awaiting_approval" and gated:
            return f"awaiting approval of {gated[-1]}"
        return status

    def _envelope_at(self, i: int) -> str | None:
        if not self.stream.records:
            return None
        where = i % len(self.stream.records)
        return _short(self.stream.envelopes.get(where, {}).get("at"))

    def _placement(self) -> tuple[str | None, str | None]:
        """(task, suite): meta.json's own words first, else where the harness files a
        run: ``<suite folder>/<key>/runs/<run id>``, the suite named by the folder's
        ``report.json`` and the key by the mission's ``command.json``."""
        inner = self.inner
        task = inner.get("task") if isinstance(inner.get("task"), str) else None
        task = task or (inner.get("suite_key") if isinstance(inner.get("suite_key"), str)
                        else None)
        suite = inner.get("suite") if isinstance(inner.get("suite"), str) else None
        if self.path.parent.name == "runs":
            mission = self.path.parent.parent
            if task is None:
                capture = _json_file(mission / layout.CAPTURE_FILE)
                said = capture.get("key") if isinstance(capture, dict) else None
                task = said if isinstance(said, str) else mission.name
            if suite is None:
                suite = self._suite_above(mission)
        return (_short(task), _short(suite))

    def _suite_above(self, mission: Path) -> str | None:
        for folder in list(mission.parents)[:3]:
            if folder not in self._suites:
                report = _json_file(folder / "report.json")
                said = report.get("suite") if isinstance(report, dict) else None
                self._suites[folder] = said if isinstance(said, str) else None
            if self._suites[folder] is not None:
                return self._suites[folder]
            if self.root is not None and folder == self.root:
                break
        return None


def _json_file(path: Path) -> Any:
    try:
        data = file_bytes(path)
        return None if data is None else json.loads(data)
    except (EvalkitError, ValueError):
        return None


def _read_meta(path: Path) -> tuple[dict[str, Any], bool]:
    found = _json_file(path / layout.META_FILE)
    if isinstance(found, dict):
        return found, True
    return {}, not (path / layout.META_FILE).exists()


def _id_time(run_id: str) -> str | None:
    """A run id's creation time (``run_YYYYMMDD-HHMMSS-…``), for a run with no other."""
    try:
        stamp = datetime.strptime(run_id[4:19], "%Y%m%d-%H%M%S")
    except ValueError:
        return None
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
