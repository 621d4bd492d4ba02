"""The supervisor: a run going in circles is caught by what it does, not by a step count.

It watches every emitted record through ``evalkit.signals.Watch`` (the same
fold the scorer runs offline) and, at each step boundary, asks the watch
whether a signal fired. When one did, the same model is asked in one plain
call (``kind="plain"``, recorded and metered by the run) what the pattern
means:

- ``progressing`` — a false alarm: that signal's threshold rises;
- ``nudge`` — its note is injected as the next user turn;
- ``stuck`` — the run winds up: one final answer turn, then
  ``mission_finished.reason: "stuck"``.

At most ``reviews`` (3) reviews per run. The last one is not offered
``progressing``; if it says so anyway it counts as ``stuck``. A reply that
cannot be read counts as ``progressing`` without raising a threshold (and as
``stuck`` on the last review). A signal firing when no review is left ends
the run as ``stuck`` without a model call. Every settled firing restarts the
watch's window.

The review rides the next ``step_started`` as ``review``: ``{signal,
verdict, reviews_left, threshold}`` plus ``note`` when there is one
(``threshold`` is the signal's threshold after the review, so an offline
reader settles exactly as the supervisor did).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from evalkit import signals
from evalkit.runtime import prompts
from evalkit.runtime.backends import Reply
from evalkit.runtime.json_protocol import embedded_objects

#: Reviews a run may have.
MAX_REVIEWS = 3
#: Steps of recent history a review is shown.
REVIEW_STEPS = 8
_SHOWN = 240


#: Asks the model once with these messages (a plain call); None when the call failed.
Ask = Callable[[list[dict[str, Any]]], Reply | None]


@dataclass
class Review:
    """One settled firing: what rides the next ``step_started``, and what the model is told."""

    signal: str
    verdict: str
    reviews_left: int
    threshold: int
    note: str | None = None
    #: The user turn appended before the next step (a nudge's note, the stuck instruction).
    message: str | None = None

    def record(self) -> dict[str, Any]:
        """The ``review`` field of the next ``step_started``."""
        out: dict[str, Any] = {"signal": self.signal, "verdict": self.verdict,
                               "reviews_left": self.reviews_left, "threshold": self.threshold}
        if self.note:
            out["note"] = self.note
        return out

    @property
    def injected(self) -> list[str] | None:
        """What ``step_started.injected`` carries: a nudge's delivered note."""
        return [self.message] if self.verdict == "nudge" and self.message else None


class Supervisor:
    """Watches one run; ``see`` every emitted record, ``boundary`` before each new step."""

    def __init__(self, *, reviews: int = MAX_REVIEWS,
                 thresholds: Mapping[str, int] | None = None) -> None:
        self.watch = signals.Watch(thresholds)
        self.reviews_left = reviews
        self.objective = ""
        self._recent: deque[Mapping[str, Any]] = deque(maxlen=20 * REVIEW_STEPS)

    def see(self, record: Mapping[str, Any]) -> None:
        """Fold one emitted record (as written: after scrubbing)."""
        if record.get("event") == "mission_started":
            self.objective = str(record.get("objective") or "")
        self.watch.feed(record)
        if signals.main_line(record) and record.get("event") in (
                "step_started", "tool_result", "reply_rejected", "grounding"):
            self._recent.append(record)

    def prime(self, records: list[Mapping[str, Any]]) -> None:
        """Fold the records of an earlier stretch of this run (a resume), settling as recorded."""
        for record in records:
            self.see(record)

    def boundary(self, ask: Ask) -> Review | None:
        """Close the step that just ended; when a signal fired, review it and settle it."""
        fired = self.watch.boundary()
        if fired is None:
            return None
        pattern = signals.describe(fired.signal, fired.threshold)
        if self.reviews_left <= 0:
            threshold = self.watch.settle(fired.signal)
            return Review(fired.signal, "stuck", 0, threshold,
                          note="no reviews left: the supervisor ended the run without asking",
                          message=prompts.stuck_note(pattern))
        last = self.reviews_left == 1
        verdicts = ("nudge", "stuck") if last else signals.VERDICTS
        reply = ask(prompts.review_messages(self.objective, pattern, self._transcript(),
                                            verdicts=verdicts))
        verdict, note = read_verdict(reply.content if reply is not None else None)
        self.reviews_left -= 1
        readable = verdict is not None
        if verdict is None:
            verdict = "progressing"
            note = "the review reply could not be read; counted as progressing"
        if last and verdict == "progressing":
            verdict = "stuck"
            note = (note or "") + ("; " if note else "") + \
                "the last review cannot say progressing: the run is wound up"
        threshold = self.watch.settle(
            fired.signal, raise_threshold=readable and verdict == "progressing")
        message = None
        if verdict == "nudge":
            note = note or prompts.default_nudge(pattern)
            message = prompts.nudge_note(note)
        elif verdict == "stuck":
            message = prompts.stuck_note(pattern)
        return Review(fired.signal, verdict, self.reviews_left, threshold, note=note,
                      message=message)

    def _transcript(self) -> str:
        """The last few steps as plain lines for the reviewer."""
        lines: list[str] = []
        steps = 0
        for record in reversed(self._recent):
            event = record.get("event")
            if event == "step_started":
                lines.append(f"step {record.get('index')}:")
                steps += 1
                if steps >= REVIEW_STEPS:
                    break
            elif event == "tool_result":
                status = "ok" if record.get("ok") else f"failed ({record.get('error')})"
                arguments = json.dumps(record.get("arguments"), ensure_ascii=False,
                                       sort_keys=True, default=str)
                lines.append(f"  called {record.get('tool')} {_cut(arguments)} -> {status}: "
                             f"{_cut(str(record.get('output') or ''))}")
            elif event == "reply_rejected":
                lines.append(f"  reply not accepted: {_cut(str(record.get('problem')))}")
            elif event == "grounding" and record.get("repairing"):
                lines.append("  answer sent back for repair: unsupported "
                             + ", ".join(map(str, record.get("unsupported") or [])))
        return "\n".join(reversed(lines))


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "…"


def read_verdict(content: str | None) -> tuple[str | None, str | None]:
    """(verdict, note) from a review reply, or (None, None) when it cannot be read.

    The reply must hold a JSON object with ``verdict`` one of progressing,
    nudge, stuck (case and surrounding prose ignored); ``note`` is optional.
    """
    for value in embedded_objects(content)[0]:
        if isinstance(value, dict) and isinstance(value.get("verdict"), str):
            verdict = value["verdict"].strip().lower()
            if verdict in signals.VERDICTS:
                note = value.get("note")
                note = note.strip() if isinstance(note, str) and note.strip() else None
                return verdict, note
    return None, None
