"""Stagnation signals: a run going in circles, read off its stream records.

One fold, two users. The runtime's supervisor feeds it every record as it is
emitted and asks it at each step boundary whether a signal fired; the scorer
feeds it a recorded stream and reads where a run first went in circles (a
KPI). Same code both ways, so the offline answer is what the supervisor saw.
Standard library only; it imports nothing else of evalkit, so a consumer can
vendor this one file.

A *step* is one model turn: the records from one main-line ``step_started``
to the next (records with a ``branch`` other than ``direct`` are not
folded). A *fingerprint* is one call and its result: tool, arguments, ok,
exit code, output and error — not the handle. A step is *fresh* when it
produced a fingerprint never seen before in the run.

The four signals, checked in this order when a step closes (at the next
``step_started``), over the steps since the last settled firing:

- ``repeat`` — one fingerprint occurs 3 times (the same call and result);
- ``rejected`` — the last 3 steps each had a ``reply_rejected`` and no call;
- ``oscillation`` — the last 4 steps alternate between two different
  call-and-result sets: A-B-A-B;
- ``idle`` — the last 4 steps were not fresh (no new call or result).

A firing is *settled* by a review (its ``review`` record on the next
``step_started``): the window restarts, and a ``progressing`` verdict raises
that signal's threshold by its base value (or sets it to the review's
``threshold`` when the record carries one). A repetition judged progress is
also a run of stale steps, so when ``repeat`` or ``oscillation`` rises,
``idle`` rises by its base with it. A firing with no review (an agent without
a supervisor) just restarts the window.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

SIGNALS: tuple[str, ...] = ("repeat", "rejected", "oscillation", "idle")

#: Base thresholds: occurrences for ``repeat``, steps for the others.
THRESHOLDS: dict[str, int] = {"repeat": 3, "rejected": 3, "oscillation": 4, "idle": 4}

#: What each signal means, in words a person (or a reviewing model) reads.
MEANING: dict[str, str] = {
    "repeat": "the same tool call returned the same result {n} times",
    "rejected": "{n} steps in a row produced only replies that could not be acted on",
    "oscillation": "the last {n} steps alternated between the same two calls (A-B-A-B)",
    "idle": "{n} steps in a row produced no new call or result",
}

VERDICTS: tuple[str, ...] = ("progressing", "nudge", "stuck")

#: Signals whose steps are also stale steps: a false alarm on one of them raises
#: ``idle`` with it, or the same steps would fire again as ``idle`` a moment later.
IDLE_COVERS: frozenset[str] = frozenset({"repeat", "oscillation"})


def describe(signal: str, threshold: int) -> str:
    return MEANING.get(signal, signal).format(n=threshold)


#: Built once: ``json.dumps`` with these options would build a new encoder per call.
_CANONICAL = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"),
                              default=str)


def call_key(record: Mapping[str, Any]) -> list[Any]:
    """The parts of a tool result that make up its fingerprint, in order."""
    return [record.get("tool"), record.get("arguments"), record.get("ok"),
            record.get("exit_code"), record.get("output"), record.get("error")]


def canonical(record: Mapping[str, Any]) -> str:
    """The text a fingerprint hashes: ``call_key`` as sorted, compact JSON.

    Two records have equal fingerprints exactly when these texts are equal, so
    a reader that only compares results may use the text itself (or anything
    equal exactly when it is) and skip the hash.
    """
    return _CANONICAL.encode(call_key(record))


def fingerprint(record: Mapping[str, Any]) -> str:
    """One call and its result, as a short stable key (handles and ordinals left out)."""
    text = canonical(record)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def main_line(record: Mapping[str, Any]) -> bool:
    return record.get("branch") in (None, "direct")


@dataclass
class Step:
    """What one model turn did, as far as the signals care."""

    index: Any
    calls: int = 0
    rejected: int = 0
    results: list[str] = field(default_factory=list)
    fresh: bool = False


@dataclass(frozen=True)
class Firing:
    """A signal that fired when step ``step`` closed, at threshold ``threshold``."""

    signal: str
    step: Any
    threshold: int

    def as_dict(self) -> dict[str, Any]:
        return {"signal": self.signal, "step": self.step, "threshold": self.threshold}


class Watch:
    """The fold. ``feed`` every record in order; ``firings`` is what fired, in order.

    The supervisor drives the boundary itself (``boundary`` before it emits
    the next ``step_started``, then ``settle``); ``feed`` does both on its
    own when it meets a ``step_started`` while a step is still open, which is
    how a recorded stream is read.
    """

    def __init__(self, thresholds: Mapping[str, int] | None = None) -> None:
        self.thresholds = {**THRESHOLDS, **(thresholds or {})}
        self.open: Step | None = None
        self.seen: set[str] = set()
        self.firings: list[Firing] = []
        self._restart()

    def _restart(self) -> None:
        """Empty the window. What the signals read of it is kept up to date as steps
        close (counts, trailing runs), so a check costs the same however long it is."""
        self.window: list[Step] = []
        self._counts: dict[str, int] = {}  # fingerprint -> occurrences in the window
        self._most = 0  # the highest of those counts
        self._rejected_run = 0  # trailing steps with a rejected reply and no call
        self._stale_run = 0  # trailing steps that were not fresh

    def feed(self, record: Mapping[str, Any]) -> Firing | None:
        """Fold one record; returns the firing a ``step_started`` revealed, if any."""
        if type(record) is not dict and not isinstance(record, Mapping):
            return None
        if not main_line(record):
            return None
        event = record.get("event")
        if event == "step_started":
            return self.feed_parts(event, index=record.get("index"), review=record.get("review"))
        if event == "tool_result":
            return self.feed_parts(event, result=fingerprint(record))
        return self.feed_parts(event)

    def feed_parts(self, event: Any, *, index: Any = None, review: Any = None,
                   result: str | None = None) -> Firing | None:
        """``feed`` for a main-line record already reduced to what the fold reads:
        its event, a step's index and review, a tool result's fingerprint (any
        string that is equal exactly when the call and result are)."""
        if event == "step_started":
            fired = None
            if self.open is not None:
                fired = self.boundary()
                if review is not None and isinstance(review, Mapping):
                    self.apply_review(review)
                elif fired is not None:
                    self.settle(fired.signal)
            self.open = Step(index)
            return fired
        step = self.open
        if step is None:
            return None
        if event == "tool_call":
            step.calls += 1
        elif event == "tool_result":
            step.results.append(result if result is not None else "")
        elif event == "reply_rejected":
            step.rejected += 1
        return None

    def boundary(self) -> Firing | None:
        """Close the open step and check the signals; the first that fired, or None."""
        step, self.open = self.open, None
        if step is None:
            return None
        step.fresh = not self.seen.issuperset(step.results)  # some result never seen before
        self.seen.update(step.results)
        self._append(step)
        fired = self._check(step)
        if fired is not None:
            self.firings.append(fired)
        return fired

    def settle(self, signal: str, *, raise_threshold: bool = False,
               threshold: int | None = None) -> int:
        """A firing dealt with: the window restarts; returns the signal's threshold now."""
        if signal in self.thresholds:
            before = self.thresholds[signal]
            if threshold is not None:
                self.thresholds[signal] = threshold
            elif raise_threshold:
                self.thresholds[signal] += THRESHOLDS[signal]
            if signal in IDLE_COVERS and self.thresholds[signal] > before:
                self.thresholds["idle"] += THRESHOLDS["idle"]
        self._restart()
        return self.thresholds.get(signal, 0)

    def apply_review(self, review: Mapping[str, Any]) -> None:
        """Settle from a recorded ``review`` (what the supervisor decided)."""
        signal = review.get("signal")
        threshold = review.get("threshold")
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
            threshold = None
        self.settle(str(signal), threshold=threshold,
                    raise_threshold=review.get("verdict") == "progressing")

    def _append(self, step: Step) -> None:
        """Add a closed step to the window and bring its running tallies up to date."""
        self.window.append(step)
        counts = self._counts
        for fp in step.results:
            n = counts[fp] = counts.get(fp, 0) + 1
            if n > self._most:
                self._most = n
        self._rejected_run = self._rejected_run + 1 if step.rejected > 0 and step.calls == 0 else 0
        self._stale_run = 0 if step.fresh else self._stale_run + 1

    def _check(self, step: Step) -> Firing | None:
        t = self.thresholds
        if self._most and self._most >= t["repeat"]:
            return Firing("repeat", step.index, t["repeat"])
        if self._rejected_run >= t["rejected"]:
            return Firing("rejected", step.index, t["rejected"])
        if self._oscillates(t["oscillation"]):
            return Firing("oscillation", step.index, t["oscillation"])
        if self._stale_run >= t["idle"]:
            return Firing("idle", step.index, t["idle"])
        return None

    def _oscillates(self, n: int) -> bool:
        w = self.window
        if len(w) < 4 or w[-1].results != w[-3].results:
            return False  # the quick refusals: no pattern yet, or the last step breaks it
        tail = w[-n:]
        if len(tail) < max(n, 4):
            return False
        shapes = [tuple(s.results) for s in tail]
        if not all(shapes) or shapes[0] == shapes[1]:
            return False
        return all(shapes[i] == shapes[i - 2] for i in range(2, len(shapes)))


def stagnation(records: Iterable[Mapping[str, Any]]) -> list[Firing]:
    """Every firing in a recorded stream, in order (empty when the run never went in circles)."""
    watch = Watch()
    for record in records:
        watch.feed(record)
    return watch.firings
