"""What a new policy would have done: every recorded tool call, decided again, as a diff.

``evalkit regrade RUNS --policy NEW.yaml`` answers "what would this policy have
allowed, held or denied" without running anything: each call a recording made
is read back with the decision governance made then, and ``decide`` is asked
about the same tool and arguments under the new policy. Nothing is replayed,
no tool and no model is called, the recordings are only read.

What a call's *before* was, read from the stream (the runtime records each):

- ``held``: a ``gate_requested`` stood in front of it; its ``resolution`` says what
  a person did (``approved``: the call then ran, ``refused``: it was denied,
  ``pending``: nobody decided and the run ended ``awaiting_approval``);
- ``denied``: its ``tool_result`` is a governance refusal (``runviews.refusals``);
- ``allowed``: it ran, whether the tool then succeeded or failed;
- ``unknown``: a ``tool_call`` with no result (the run was cut short): never
  counted as a change, counted as undetermined.

A run of the gate sidecar (``evalkit gate serve``) records each decision itself,
as a ``governance`` record (``what: decided``) with the decision's kind and the
hash of the policy that made it: there *before* is that decision, one call per
idempotency key, whatever retries followed. Otherwise, when the recording names
the policy (a ``policy_hash`` on a call's records, else on ``mission_started`` or
in ``meta.json``), the row says which; recordings of the built-in runtime's flag
governance carry none. Arguments are read only to decide: the report names
tools, decisions and the policy's reasons, never what a call was given.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.gate.policy import KINDS, Policy, decide
from evalkit.store import layout
from evalkit.store.reader import StreamRead, file_bytes, read_events_file
from evalkit.store.runviews import bounded_text, find_run_dirs, refusals

REPORT_FORMAT = "evalkit-policy-regrade"
REPORT_VERSION = 1
HELD, DENIED, ALLOWED, UNKNOWN = "held", "denied", "allowed", "unknown"


@dataclass
class RecordedCall:
    """One call as the recording shows it (``arguments`` are read to decide, never shown)."""

    seq: int | None
    index: Any
    branch: Any
    tool: Any
    arguments: Any
    before: str
    resolution: str | None = None
    policy_hash: str | None = None
    _open: bool = True  # still waiting for its tool_call / tool_result


def recorded_calls(stream: StreamRead) -> list[RecordedCall]:
    """Every tool call of a stream in order, with the decision the recording shows for it.

    A stream with ``governance`` records (the gate sidecar's) is read by its decisions,
    one call per idempotency key; any other (the built-in runtime's), by its gates and
    results."""
    if any(r.get("event") == "governance" and r.get("what") == "decided"
           for r in stream.records):
        return _governed_calls(stream)
    return _runtime_calls(stream)


def _runtime_calls(stream: StreamRead) -> list[RecordedCall]:
    calls: list[RecordedCall] = []
    refused = refusals(stream.records)
    for i, record in enumerate(stream.records):
        event = record.get("event")
        if event not in ("gate_requested", "tool_call", "tool_result"):
            continue
        seq = stream.envelopes.get(i, {}).get("seq")
        key = (record.get("branch"), _hashable(record.get("index")), _hashable(record.get("tool")))
        said = record.get("policy_hash") if isinstance(record.get("policy_hash"), str) else None
        if event == "gate_requested":
            calls.append(RecordedCall(seq, record.get("index"), record.get("branch"),
                                      record.get("tool"), record.get("arguments"), HELD,
                                      resolution="pending", policy_hash=said))
            continue
        call = _open_call(calls, key, held=event == "tool_call")
        if event == "tool_call":
            if call is None:
                calls.append(RecordedCall(seq, record.get("index"), record.get("branch"),
                                          record.get("tool"), record.get("arguments"), UNKNOWN,
                                          policy_hash=said))
            else:  # a held call someone decided: it went on to its dispatch
                call.resolution = "decided"
                call.policy_hash = call.policy_hash or said
            continue
        if call is None:  # a result with no call recorded: take it as the call
            call = RecordedCall(seq, record.get("index"), record.get("branch"),
                                record.get("tool"), record.get("arguments"), UNKNOWN)
            calls.append(call)
        call.policy_hash = call.policy_hash or said
        call._open = False
        if call.before == HELD:
            call.resolution = "refused" if i in refused else "approved"
        else:
            call.before = DENIED if i in refused else ALLOWED
    for call in calls:
        if call.before == HELD and call.resolution == "decided":
            call.resolution = "unknown"  # decided, dispatched, and the result never recorded
    return calls


#: A held call's end, by the sidecar's kind of its ``governance`` result.
_RESOLVED = {"approved": "approved", "allowed": "approved", "refused": "refused",
             "expired": "expired", "tool_error": "approved", "outcome_unknown": "approved"}


def _governed_calls(stream: StreamRead) -> list[RecordedCall]:
    """The sidecar's stream: ``governance`` ``decided`` opens a call per key (its kind is
    the decision, its ``policy_hash`` the policy that made it); the arguments come from
    the ``gate_requested`` of a hold, else from the ``tool_call`` that follows the key's
    ``result``. A retried request adds nothing (its key is decided already)."""
    calls: dict[Any, RecordedCall] = {}
    last_gate: dict[str, Any] | None = None
    ending: RecordedCall | None = None  # the call whose tool_call comes next
    for i, record in enumerate(stream.records):
        event = record.get("event")
        if event == "gate_requested":
            last_gate = record
        elif event == "tool_call" and ending is not None:
            if ending.arguments is None and record.get("tool") == ending.tool:
                ending.arguments = record.get("arguments")
            ending = None
        if event != "governance":
            continue
        what, key, kind = record.get("what"), _hashable(record.get("key")), record.get("kind")
        call = calls.get(key)
        if what == "decided" and call is None and record.get("key") is not None:
            before = KINDS.get(kind) if isinstance(kind, str) else None
            said = record.get("policy_hash")
            calls[key] = RecordedCall(
                stream.envelopes.get(i, {}).get("seq"), record.get("index"),
                record.get("branch"), record.get("tool"), None, before or UNKNOWN,
                resolution="pending" if before == HELD else None,
                policy_hash=said if isinstance(said, str) else None)
        elif call is None:
            continue
        elif what == "held" and last_gate is not None and last_gate.get("tool") == call.tool \
                and call.arguments is None:
            call.arguments = last_gate.get("arguments")
        elif what == "result" and kind != "conflict" and call._open \
                and record.get("phase") != "pending_approval":
            call._open = False
            ending = call
            if call.before == HELD:
                call.resolution = _RESOLVED.get(kind, "unknown") if isinstance(kind, str) \
                    else "unknown"
    for call in calls.values():
        if call.arguments is None:
            call.arguments = {}  # never ended nor held: decided on the tool alone
    return list(calls.values())


def _open_call(calls: list[RecordedCall], key: tuple[Any, Any, Any],
               held: bool) -> RecordedCall | None:
    """The earliest call still open under ``key`` (a tool_call looks only for a held one
    that has not reached its dispatch; a result, for any call waiting for its result)."""
    for call in calls:
        if not call._open or (call.branch, _hashable(call.index), _hashable(call.tool)) != key:
            continue
        if held and not (call.before == HELD and call.resolution == "pending"):
            continue
        return call
    return None


def _hashable(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool, type(None))) else json.dumps(
        value, sort_keys=True, default=str)


def run_policy_hash(stream: StreamRead, run_dir: Path) -> str | None:
    """The policy a run says it was governed under: ``mission_started`` or ``meta.json``."""
    for record in stream.records:
        if record.get("event") == "mission_started" and isinstance(
                record.get("policy_hash"), str):
            return record["policy_hash"]
    try:
        meta = json.loads(file_bytes(run_dir / layout.META_FILE) or b"{}")
    except (EvalkitError, ValueError):
        return None
    inner = meta.get("meta") if isinstance(meta, dict) else None
    said = inner.get("policy_hash") if isinstance(inner, dict) else None
    return said if isinstance(said, str) else None


def regrade_run(run_dir: Path, policy: Policy, *,
                granted_scopes: Iterable[str] | None = None) -> dict[str, Any]:
    """One run's calls, each with its recorded decision and the new policy's."""
    events = run_dir / layout.EVENTS_FILE
    try:
        stream = read_events_file(events)
    except EvalkitError:
        stream = StreamRead(source=events)
    scopes = None if granted_scopes is None else tuple(granted_scopes)
    before_policy = run_policy_hash(stream, run_dir)
    rows = []
    for call in recorded_calls(stream):
        decision = decide(policy, call.tool, call.arguments, granted_scopes=scopes)
        changed = call.before != UNKNOWN and call.before != decision.outcome
        rows.append({
            "seq": call.seq, "index": call.index, "branch": call.branch,
            "tool": bounded_text(call.tool, 64), "before": call.before,
            "resolution": call.resolution,
            "before_policy": call.policy_hash or before_policy,
            "after": decision.outcome, "kind": decision.kind,
            "reason": bounded_text(decision.reason), "changed": changed})
    return {"run_id": run_dir.name, "policy_hash_before": before_policy, "calls": rows,
            "changed": sum(1 for r in rows if r["changed"])}


def regrade_policy(source: Path, policy_path: str | Path, *,
                   granted_scopes: Sequence[str] | None = None) -> dict[str, Any]:
    """Every run under ``source`` re-decided under the policy at ``policy_path``: the report."""
    source = Path(source)
    policy = Policy.load(policy_path)  # a bad file is one sentence, before any run is read
    if not source.exists():
        raise EvalkitError(f"{source} does not exist: give a run directory or a folder of runs")
    runs = find_run_dirs(source) if source.is_dir() else []
    if not runs:
        raise EvalkitError(f"no run directories under {source} (a folder named as a run id "
                           "holding events.jsonl)")
    rows = []
    for run in runs:
        row = regrade_run(run, policy, granted_scopes=granted_scopes)
        rel = run.relative_to(source).as_posix() if run != source else "."
        rows.append({"run": layout.as_text(rel), **row})
    return {"format": REPORT_FORMAT, "version": REPORT_VERSION,
            "source": layout.as_text(str(source)), "policy": layout.as_text(str(policy_path)),
            "policy_hash": policy.hash,
            "granted_scopes": None if granted_scopes is None else list(granted_scopes),
            "totals": totals(rows), "runs": rows}


def totals(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """How many calls kept their decision, and how many moved, by ``before->after``."""
    calls = [c for run in runs for c in run["calls"]]
    moved = Counter(f"{c['before']}->{c['after']}" for c in calls if c["changed"])
    undetermined = sum(1 for c in calls if c["before"] == UNKNOWN)
    return {"runs": len(runs), "calls": len(calls),
            "same": sum(1 for c in calls if not c["changed"] and c["before"] != UNKNOWN),
            "changed": sum(moved.values()), "undetermined": undetermined,
            "transitions": dict(sorted(moved.items()))}


def summary_line(report: Mapping[str, Any]) -> str:
    """``12 calls: 9 same, 2 allowed->held, 1 allowed->denied`` (and undetermined ones)."""
    t = report["totals"]
    parts = [f"{t['same']} same"]
    parts += [f"{n} {move}" for move, n in t["transitions"].items()]
    if t["undetermined"]:
        parts.append(f"{t['undetermined']} undetermined (no recorded result)")
    return (f"{t['calls']} call(s) in {t['runs']} run(s) under {report['policy_hash']}: "
            + ", ".join(parts))


def report_lines(report: Mapping[str, Any], *, changed_only: bool = False) -> list[str]:
    """What a person reads: each run, each call (or only the changed ones), the summary."""
    lines = []
    for run in report["runs"]:
        calls = [c for c in run["calls"] if c["changed"] or not changed_only]
        if changed_only and not calls:
            continue
        under = (f"recorded under {run['policy_hash_before']}" if run["policy_hash_before"]
                 else "no policy hash recorded")
        lines.append(f"{run['run']}  ({len(run['calls'])} call(s), {run['changed']} changed; "
                     f"{under})")
        for c in calls:
            step = f"[{c['index']}]" if c["index"] is not None else "[-]"
            was = c["before"] + (f" ({c['resolution']})" if c["resolution"] else "")
            mark = "CHANGED" if c["changed"] else "same"
            lines.append(f"  {step:<5} {c['tool']:<24} {was:<20} -> {c['after']:<8} {mark}"
                         + (f"  {c['kind']}: {c['reason']}" if c["changed"] else ""))
    lines.append(summary_line(report))
    return lines
