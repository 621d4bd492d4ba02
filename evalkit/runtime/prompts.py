"""Everything the model is told, in one place.

Prompts are not part of the contract (a change here is not a schema change),
but every sentence a model reads lives in this module so that a prompt change
is one diff, and replay drift points at one file.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

#: How many characters of one tool result the model sees; the stream and the
#: recording keep the whole output, and ``mission_result`` reads past the cut.
RESULT_VIEW_CHARS = 4000

GROUNDING_RULE = (
    "If a number or identifier is not in a tool result, it is not in the answer: "
    "read before you claim."
)

JSON_RULES = (
    "Reply with exactly one JSON object and nothing else, either\n"
    '  {"tool": "<tool name>", "arguments": {...}}   to call one tool, or\n'
    '  {"answer": "<your final answer>"}             to finish the mission.\n'
    "One tool call per reply; you will be shown its result."
)

NATIVE_RULES = (
    "Call the offered functions to work; you may call several at once. "
    "When you are done, call mission_answer(text) alone with your final answer."
)


def system_prompt(catalogue: Sequence[dict[str, Any]], *, protocol: str) -> str:
    """The system turn: the job, the grounding rule, the tools, the reply format."""
    parts = [
        "You are an agent on a mission. Work towards the user's objective with the tools "
        "offered, then give a final answer.",
        GROUNDING_RULE,
        f"Long tool results are cut at {RESULT_VIEW_CHARS} characters; the whole result is "
        "kept under its handle and the mission_result tool (when offered) reads it.",
    ]
    if protocol == "json":
        parts += ["Tools:\n" + describe_tools(catalogue), JSON_RULES]
    else:
        parts.append(NATIVE_RULES)
    return "\n\n".join(parts)


def describe_tools(catalogue: Sequence[dict[str, Any]]) -> str:
    """One paragraph per tool: name, description and its JSON-schema arguments."""
    if not catalogue:
        return "(no tools are offered)"
    lines = []
    for tool in catalogue:
        schema = json.dumps(tool.get("parameters") or {}, ensure_ascii=False, sort_keys=True)
        lines.append(f"- {tool['name']}: {tool.get('description') or ''}\n  arguments: {schema}")
    return "\n".join(lines)


def catalogue_note(catalogue: Sequence[dict[str, Any]], added: Sequence[str],
                   removed: Sequence[str], *, protocol: str) -> str:
    """What the model is told when the plane's tools change between steps."""
    says = ["The tool catalogue changed."]
    if added:
        says.append("New: " + ", ".join(added) + ".")
    if removed:
        says.append("Gone: " + ", ".join(removed) + ".")
    text = " ".join(says)
    if protocol == "json":
        text += "\nThe tools now offered:\n" + describe_tools(catalogue)
    return text


def rejection_note(problem: str, *, protocol: str) -> str:
    """What the model is told when a reply could not be acted on (it cost a turn)."""
    rules = JSON_RULES if protocol == "json" else NATIVE_RULES
    return f"Your reply was not accepted: {problem}\n{rules}"


def result_view(output: str, error: str | None, ok: bool, handle: str, *,
                limit: int = RESULT_VIEW_CHARS) -> tuple[str, bool]:
    """The part of a result the model sees, and whether it was cut."""
    truncated = len(output) > limit
    shown = output[:limit]
    if truncated:
        shown += (f"\n[cut: {limit} of {len(output)} characters shown; call mission_result "
                  f'with {{"handle": "{handle}"}} to read the rest]')
    if not ok:
        head = f"error: {error or 'the tool failed'}"
        shown = f"{head}\n{shown}" if shown else head
    return shown, truncated


def result_note(tool: str, handle: str, ok: bool, exit_code: int | None, view: str) -> str:
    """The json protocol's user turn carrying one tool result."""
    status = "ok" if ok else "failed"
    if exit_code is not None:
        status += f", exit code {exit_code}"
    return f"Result of {tool} (handle {handle}, {status}):\n{view}"


# --- grounding repair ----------------------------------------------------------------------

def repair_problem(unsupported: Sequence[str], short: Sequence[str]) -> str:
    """Why an answer goes back for repair: the exact tokens, and the checks short of citations."""
    says = []
    if unsupported:
        says.append("your answer states things no tool result of this run holds: "
                    + ", ".join(unsupported)
                    + ". Read them from a tool, or leave them out")
    if short:
        says.append("your answer cites too little for " + ", ".join(short)
                    + "; name what the tool results show")
    return "; ".join(says) + ". Then give your final answer again."


# --- the supervisor ------------------------------------------------------------------------

REVIEW_SYSTEM = (
    "You supervise an agent working on a mission. A watchdog noticed a pattern that often "
    "means an agent is going in circles. Judge from the objective and the recent steps "
    "whether the agent is still making progress."
)

_VERDICT_HELP = {
    "progressing": '"progressing" - a false alarm: the agent is getting somewhere',
    "nudge": '"nudge" - the agent should change course; your note is shown to it as its '
             "next instruction",
    "stuck": '"stuck" - the agent will not get further; it must write its best answer now',
}


def review_messages(objective: str, pattern: str, transcript: str, *,
                    verdicts: Sequence[str]) -> list[dict[str, Any]]:
    """The one plain call a supervisor review makes."""
    choices = "\n".join(f"- {_VERDICT_HELP[v]}" for v in verdicts)
    last = "" if "progressing" in verdicts else (
        "\nThis is the last review of this run: progressing is not an option.")
    user = (f"Objective: {objective}\n\nWhat the watchdog saw: {pattern}.\n\n"
            f"The recent steps:\n{transcript or '(none recorded)'}\n\n"
            f"Reply with exactly one JSON object, "
            f'{{"verdict": "...", "note": "..."}}, where verdict is one of:\n{choices}{last}')
    return [{"role": "system", "content": REVIEW_SYSTEM}, {"role": "user", "content": user}]


def nudge_note(note: str) -> str:
    """A supervisor's nudge as the agent reads it."""
    return f"Supervisor's note: {note}"


def default_nudge(pattern: str) -> str:
    return f"{pattern[:1].upper()}{pattern[1:]}. Try a different approach, or answer with what " \
           "you have."


def stuck_note(pattern: str) -> str:
    """The last instruction a stuck run's agent gets."""
    return (f"The supervisor judged this run stuck ({pattern}). Write your best final answer "
            "now from what the tool results have shown; no more tools will be run.")


STUCK_CALL = ("the run was judged stuck and only a final answer is accepted now; "
              "the call was not made")
