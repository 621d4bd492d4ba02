"""Failure taxonomy: every verdict is a pass, a fail, missing, or an infrastructure error.

A failed verdict says the mission was not done; it does not say whose fault
that was. A rate that mixes "the agent answered wrongly" with "the endpoint
was down" or "the process never started" measures the machine room, not the
agent, so each non-passing verdict is put in exactly one category:

``pass``
    the verdict passed (whatever else happened: the record shows the job done).
``infra``
    an infrastructure error, first match wins:
    ``tampered`` (the recording was altered after it was closed: its seal says so),
    ``spawn_failure`` (the agent process could not be started),
    ``timeout`` (the harness killed it at ``--timeout``),
    ``zero_events`` (it ran and wrote no record: the run failed before it began),
    ``endpoint_failure`` (the last ``model_state`` is ``failed`` or ``absent`` and
    no answer follows it: the model never came back; or the run ended on a transport
    fault of the wire, its ``mission_finished.reason`` beginning ``transport fault:``
    as CONTRACT.md's ``WIRE_FAULTS`` words it),
    ``configuration_fault`` (the endpoint refused what it was asked — 400, 401, 403,
    404 — its reason beginning ``configuration fault:``: the setup's to fix, not the
    wire's and not the agent's),
    ``recording_failure`` (the run ended because the disk refused its recording:
    its reason begins ``recording failed:``, CONTRACT.md's exit contract).
``missing``
    no stream at all for a declared mission (never run).
``fail``
    everything else: the agent ran, the machinery worked, the checks failed.

What the harness saw of each spawn (``command.json``: exit code, timed out,
spawn error) feeds the first two kinds; the rest is read from the stream, so
``annotate`` categorises recordings offline too. Counts and rates are computed
by ``evalkit.eval.stats``; this module only sorts verdicts into boxes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.eval import stats
from evalkit.eval.harness_files import CAPTURE_FILE, REPORT_FILE, STDERR_FILE
from evalkit.eval.verdict import TAMPERED
from evalkit.store.reader import read_events_file

PASS, FAIL, MISSING, INFRA = stats.PASS, stats.FAIL, stats.MISSING, stats.INFRA
CATEGORIES: tuple[str, ...] = stats.OUTCOME_WORDS
INFRA_KINDS: tuple[str, ...] = ("tampered", "spawn_failure", "timeout", "zero_events",
                                 "endpoint_failure", "configuration_fault", "recording_failure")

_DOWN = ("failed", "absent")
#: How a run ended on a fault of the wire begins its reason (``contract.WIRE_FAULTS``).
_TRANSPORT_ENDS = "transport fault: "
_CONFIGURATION_ENDS = "configuration fault: "
#: How a run the disk ended begins its reason (``evalkit.runtime.run``, exit 5).
_DISK_ENDS = "recording failed: "


def categorize(verdict: Mapping[str, Any], capture: Mapping[str, Any] | None = None,
               events: Path | None = None) -> tuple[str, str | None]:
    """(category, infra detail or None) for one verdict (a ``Verdict.as_dict()``)."""
    if verdict.get("passed"):
        return PASS, None
    if TAMPERED in (verdict.get("checks") or ()):
        return INFRA, f"{TAMPERED}: {verdict['reasons'][0]}"
    if capture is not None:
        if capture.get("spawn_error"):
            return INFRA, f"spawn_failure: {capture['spawn_error']}"
        if capture.get("timed_out"):
            return INFRA, f"timeout: killed after {capture.get('timeout_s')} s"
    if verdict.get("missing"):
        if capture is not None:  # it was spawned, yet left no stream at all
            return INFRA, "zero_events: the agent wrote no stream"
        return MISSING, None
    if not (verdict.get("kpis") or {}).get("records"):
        exit_code = None if capture is None else capture.get("exit_code")
        said = "" if exit_code is None else f" (exit code {exit_code})"
        return INFRA, f"zero_events: the agent wrote no record{said}"
    down, unrecorded = _ended_by(events) if events is not None else (None, None)
    if down is not None and down.startswith(_CONFIGURATION_ENDS):
        return INFRA, f"configuration_fault: {down.removeprefix(_CONFIGURATION_ENDS)}"
    if down is not None:
        return INFRA, f"endpoint_failure: {down}"
    if unrecorded is not None:
        return INFRA, f"recording_failure: {unrecorded}"
    return FAIL, None


def endpoint_down(events: Path) -> str | None:
    """What the endpoint last said when the run ended with it down, else None.

    Down = the last ``model_state`` record is ``failed`` or ``absent`` and no
    ``answer`` record follows it (a failure the loop recovered from is not one),
    or the last ``mission_finished`` says the run ended on a fault of the wire: a
    429 or 503 that never cleared leaves ``queued``/``loading`` as the last state,
    and was filed as the agent's failure.
    """
    return _ended_by(events)[0]


def _ended_by(events: Path) -> tuple[str | None, str | None]:
    """(``endpoint_down``'s answer, the reason of a run the disk ended, else None)."""
    try:
        records = read_events_file(events).records
    except EvalkitError:
        return None, None
    last: Mapping[str, Any] | None = None
    wire_end: str | None = None
    unrecorded: str | None = None
    for record in records:
        event = record.get("event")
        if event == "model_state":
            last = record if record.get("state") in _DOWN else None
        elif event == "answer":
            last = None
        elif event == "mission_finished":
            reason = record.get("reason")
            said = reason if isinstance(reason, str) else ""
            wire_end = said if said.startswith((_TRANSPORT_ENDS, _CONFIGURATION_ENDS)) else None
            unrecorded = said if said.startswith(_DISK_ENDS) else None
    if last is None or (wire_end or "").startswith(_CONFIGURATION_ENDS):
        return wire_end, unrecorded  # a refusal is the setup's, whatever state came before
    detail = last.get("detail")
    where = f"{last.get('provider')}/{last.get('model')}"
    return f"model {where} {last.get('state')}" + (f": {detail}" if detail else ""), unrecorded


def load_capture(folder: Path) -> dict[str, Any] | None:
    """A mission folder's ``command.json``, or None when it has none (or it is unreadable)."""
    try:
        data = json.loads((folder / CAPTURE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def annotate(report: dict[str, Any], base: Path | None,
             captures: Mapping[str, Mapping[str, Any] | None] | None = None) -> dict[str, Any]:
    """Add the taxonomy to a score report (``ScoreReport.to_dict()``), in place; return it.

    Every verdict gains ``category`` and ``infra`` (the kind and detail, or null).
    Every half gains ``categories``: the count of each category and the pass
    rate with and without infrastructure errors (from ``stats.rate``). Nothing
    is renamed or removed. ``base`` is the folder the verdict sources are
    relative to (``--runs``); ``captures`` maps mission keys to what the harness
    saw, else each mission's ``command.json`` under ``base`` is read.
    """
    for verdict in report["verdicts"]:
        key = verdict["key"]
        if captures is not None:
            capture = captures.get(key)
        else:
            capture = load_capture(base / key) if base is not None else None
        events = _events_of(verdict, base)
        category, detail = categorize(verdict, capture, events)
        if category == INFRA and base is not None and detail and \
                not detail.startswith("tampered"):
            # What the agent last said is the cause an operator can act on ("bwrap: No
            # permissions to create new namespace"); the kind alone is only the symptom.
            said = _last_line(base / key / STDERR_FILE)
            if said and said not in detail:
                detail = f"{detail}; the agent's last words on stderr: {said}"
        verdict["category"] = category
        verdict["infra"] = detail
    for half, data in report["halves"].items():
        words = [v["category"] for v in report["verdicts"] if v["split"] == half]
        data["categories"] = counts(words)
    return report


def counts(words: list[str]) -> dict[str, Any]:
    """Each category's count, and the pass rate with and without infrastructure errors."""
    out: dict[str, Any] = {word: words.count(word) for word in CATEGORIES}
    out["rate"] = stats.rate(out[PASS], len(words))
    out["rate_without_infra"] = stats.rate(out[PASS], len(words) - out[INFRA])
    return out


def all_infra(folder: Path, *, limit: int = 3) -> tuple[int, list[str]] | None:
    """(how many tries, their first distinct causes) when every scored try under ``folder``
    was an infrastructure failure; None when any was not, or nothing was scored.

    A run or a matrix in which nothing reached the agent measured nothing, and
    saying "no detectable difference" or "0 passed" over it would read as a
    finding. The cause of each try is the last line its agent wrote on
    stderr (``stderr.txt``, already scrubbed) — what an operator needs to fix
    it — else the taxonomy's own detail.
    """
    tries, causes = 0, []
    for report in sorted(Path(folder).rglob(REPORT_FILE)):
        try:
            data = json.loads(report.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for verdict in data.get("verdicts") or [] if isinstance(data, dict) else []:
            if verdict.get("category") == MISSING:
                continue
            if verdict.get("category") != INFRA:
                return None
            tries += 1
            cause = _last_line(report.parent / str(verdict.get("key")) / STDERR_FILE) \
                or str(verdict.get("infra") or "an infrastructure error")
            if cause not in causes:
                causes.append(cause)
    return (tries, causes[:limit]) if tries else None


def _last_line(path: Path) -> str | None:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    said = [line.strip() for line in lines if line.strip()]
    return said[-1][:300] if said else None


def _events_of(verdict: Mapping[str, Any], base: Path | None) -> Path | None:
    source = verdict.get("source")
    if not source or verdict.get("missing"):
        return None
    path = Path(source)
    if not path.is_absolute() and base is not None:
        path = base / path
    return path if path.is_file() else None


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def _interval(bounds: list[float] | None) -> str:
    return "" if not bounds else f" [{bounds[0] * 100:.0f}–{bounds[1] * 100:.0f}%]"


def to_markdown(report: Mapping[str, Any]) -> str:
    """The taxonomy section appended to ``report.md``: counts per half, then the infra errors."""
    lines = ["## Failure taxonomy", "",
             "| half | pass | fail | missing | infra | rate | rate without infra |",
             "|---|---|---|---|---|---|---|"]
    for half, data in report["halves"].items():
        c = data.get("categories")
        if c is None:
            continue
        with_infra, without = c["rate"], c["rate_without_infra"]
        lines.append(f"| {half} | {c[PASS]} | {c[FAIL]} | {c[MISSING]} | {c[INFRA]} | "
                     f"{_pct(with_infra['value'])}{_interval(with_infra['wilson'])} | "
                     f"{_pct(without['value'])}{_interval(without['wilson'])} |")
    infra = [v for v in report["verdicts"] if v.get("category") == INFRA]
    lines += ["", "Rates carry 95% Wilson intervals. Infrastructure errors:", ""]
    lines += [f"- **{v['key']}** — {v['infra']}" for v in infra] or ["- none"]
    return "\n".join(lines) + "\n"


__all__ = ["CATEGORIES", "INFRA_KINDS", "all_infra", "annotate", "categorize", "counts", "endpoint_down",
           "load_capture", "to_markdown"]
