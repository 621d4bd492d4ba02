"""What a person watching a mission reads: prose, never parsed.

The event sink is the machine channel; this is the narration beside it. It
is an observer of the emitted (already scrubbed) records, so the console can
never show something the stream did not say, and never a credential.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from evalkit.redact import redact

#: How much of a tool's arguments or output one console line shows.
PREVIEW_CHARS = 160


def _preview(value: Any, limit: int = PREVIEW_CHARS) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Console:
    """Prints one line (or the answer) per record worth a person's attention."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def __call__(self, record: dict[str, Any]) -> None:
        line = self.line(record)
        if line is not None:
            print(line, file=self.out, flush=True)

    def line(self, record: dict[str, Any]) -> str | None:
        event = record.get("event")
        if event == "mission_started":
            run = record.get("run_id") or "not recorded (EVALKIT_RUNS is off)"
            tools = ", ".join(record.get("catalogue") or []) or "none"
            return (f"run: {run}\nsandbox: {record.get('sandbox', 'none')}\n"
                    f"tools: {tools}\nobjective: {record.get('objective')}")
        if event == "step_started" and isinstance(record.get("review"), dict):
            review = record["review"]
            note = f": {review['note']}" if review.get("note") else ""
            return (f"[step {record['index']}] supervisor saw {review.get('signal')}: "
                    f"{review.get('verdict')} ({review.get('reviews_left')} review(s) left){note}")
        if event == "step_started" and "catalogue" in record:
            return "tools now: " + (", ".join(record["catalogue"]) or "none")
        if event == "grounding":
            return _grounding_line(record)
        if event == "reply_rejected":
            return f"[step {record['index']}] reply rejected: {record['problem']}"
        if event == "tool_call":
            return (f"[step {record['index']}] -> {record['tool']} "
                    f"{_preview(record.get('arguments') or {})}")
        if event == "tool_result":
            status = "ok" if record.get("ok") else f"failed ({record.get('error')})"
            cut = ", model saw a cut" if record.get("truncated") else ""
            return (f"[step {record['index']}] <- {record['tool']} {status} "
                    f"[{record.get('handle')}{cut}]: {_preview(record.get('output') or '')}")
        if event == "model_state":
            detail = f": {record['detail']}" if record.get("detail") else ""
            return f"model {record.get('model')} is {record['state']}{detail}"
        if event == "answer":
            return f"\nanswer:\n{record['text']}\n"
        if event == "mission_finished":
            said = f"mission {record['outcome']} after {record['steps']} step(s)"
            if record.get("reason"):
                said += f": {record['reason']}"
            if record.get("budget"):
                budget = record["budget"]
                said += f" ({budget['which']}: {budget['spent']} of {budget['limit']})"
            return said + f" in {record.get('elapsed_s', 0)} s"
        return None


def _grounding_line(record: dict[str, Any]) -> str:
    unsupported = ", ".join(map(str, record.get("unsupported") or []))
    if record.get("repairing"):
        return f"grounding: not grounded ({unsupported or 'too few citations'}); repair turn"
    if not record.get("grounded"):
        return f"grounding: NOT grounded ({unsupported or 'too few citations'}); caveat appended"
    if not record.get("verified"):
        return "grounding: grounded, NOTHING CHECKED (no claim was considered)"
    return "grounding: grounded and verified"


def diagnostic(message: str) -> str:
    """A stderr line, scrubbed: diagnostics may quote endpoint errors and arguments."""
    return redact(message)
