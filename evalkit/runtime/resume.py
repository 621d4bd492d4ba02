"""``--resume RUN``: continue an unfinished run against a live model.

A run whose last word is ``incomplete`` or ``awaiting_approval`` — or that
has no last word because its process died — can be picked up again. The
objective comes off the record; the conversation is rebuilt from the
recorded ``tool_call``/``tool_result`` pairs with the protocol's own message
builders; the result store is refilled so handles continue; usage so far is
summed from ``model.jsonl``. The loop then appends to the same run
directory: no second ``mission_started``, the first new ``step_started``
carries ``resumed: {from_seq, steps_replayed}`` (``from_seq`` = the last
seq on record when the stretch began), step indexes continue, and the step
ceiling counts the whole run. ``answered``, ``answered_with_caveat`` and
``budget_exhausted`` are conclusions and are refused by name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evalkit.errors import EvalkitError
from evalkit.runtime import prompts
from evalkit.runtime.backends import Reply
from evalkit.runtime.doors import Door, carried
from evalkit.runtime.protocol import Call, make_protocol
from evalkit.runtime.replay.recording import CONCLUSIONS, read_recording, resolve_run
from evalkit.runtime.usage import UsageLedger
from evalkit.store.runstore import RunWriter, now_iso

if TYPE_CHECKING:
    from evalkit.runtime.mission import MissionSettings
    from evalkit.store.runstore import RunStore


@dataclass
class ResumePoint:
    """Where a resumed run picks up; ``Run`` takes it instead of creating a run."""

    writer: RunWriter
    #: The rebuilt conversation after the system turn and the objective.
    messages: list[dict[str, Any]]
    #: Steps already taken (the next step's index).
    steps: int
    #: The last seq on record before this stretch.
    from_seq: int
    usage: UsageLedger
    #: The last catalogue on record (tools.jsonl), or None.
    catalogue: list[dict[str, Any]] | None = None
    #: Earlier resumes listed in meta.json (this one is added on ``begin``).
    resumes: list[Any] = field(default_factory=list)
    #: The records on file, shown to the run's watchers (grounding evidence, supervisor).
    history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def marker(self) -> dict[str, int]:
        return {"from_seq": self.from_seq, "steps_replayed": self.steps}

    def begin(self, catalogue: list[dict[str, Any]]) -> dict[str, Any]:
        """The new stretch starts: meta marked running; the fields of its first step_started."""
        fields: dict[str, Any] = {"resumed": self.marker}
        if catalogue != self.catalogue:
            self.writer.record_catalogue(catalogue)
            names = [t.get("name") for t in catalogue]
            if self.catalogue is not None and names != [t.get("name") for t in self.catalogue]:
                fields["catalogue"] = names
        self.writer.update_meta(outcome=None, reason=None,
                                resumes=[*self.resumes, {"at": now_iso(), **self.marker}])
        return fields


def open_resume(settings: MissionSettings, store: RunStore | None) -> Door:
    """Take the run's lock, check it may be resumed, and rebuild where it stood."""
    if store is None:
        raise EvalkitError("resume continues a recorded run, but recording is off "
                           "(EVALKIT_RUNS=off): point EVALKIT_RUNS at the run store")
    path = resolve_run(settings.resume or "", store.root)
    writer = RunWriter(path, signer=store.signer)  # refuses a run another live writer holds
    try:
        return _door(settings, writer)
    except BaseException:
        writer.close()
        raise


def _door(settings: MissionSettings, writer: RunWriter) -> Door:
    recording = read_recording(writer.path)
    run_id = writer.run_id
    finished = recording.finished
    if recording.closed and finished is not None and finished.get("outcome") in CONCLUSIONS:
        word = finished.get("outcome")
        raise EvalkitError(f"run {run_id} ended {word}: that is a conclusion, and a concluded "
                           f"run is not resumed (evalkit replay {run_id} re-runs it)")
    if recording.started is None:
        raise EvalkitError(f"run {run_id} has no mission_started: there is nothing to resume; "
                           "start the mission again")
    objective = recording.objective
    if settings.objective.strip() and settings.objective.strip() != objective.strip():
        raise EvalkitError(f"--resume takes the objective from the record ({objective!r}); "
                           "leave the objective out")
    effective = carried(settings, recording.flags)
    effective.objective = objective
    catalogue = _last_catalogue(recording.tool_lines)
    usage = UsageLedger()
    for line in recording.model_calls:
        reply = line.get("reply") or {}
        if "error" not in reply:
            usage.add(reply.get("usage"))
    point = ResumePoint(
        writer=writer,
        messages=rebuild(recording.records, effective.protocol, catalogue or []),
        steps=recording.steps, from_seq=writer.last_seq, usage=usage, catalogue=catalogue,
        resumes=list(recording.meta.get("resumes") or []), history=recording.records)
    outputs = tuple(str(r.get("output") or "") for r in recording.records
                    if r.get("event") == "tool_result")
    return Door(settings=effective, resume=point, keep=frozenset({run_id}), outputs=outputs,
                meta={}, release=writer.close)


def rebuild(records: list[dict[str, Any]], protocol_name: str,
            catalogue: list[dict[str, Any]], *,
            limit: int = prompts.RESULT_VIEW_CHARS) -> list[dict[str, Any]]:
    """The conversation after the objective, from the recorded tool_call/tool_result pairs.

    Each step's completed calls become the model's turn (one JSON object per
    turn under the json protocol, one turn with every call under native)
    followed by the results as the model saw them. A call with no recorded
    result (the process died during it) is left out: the model decides again.
    """
    protocol = make_protocol(protocol_name)
    wire = {tool["name"]: fn["function"]["name"]
            for tool, fn in zip(catalogue, protocol.tools(catalogue) or [], strict=False)}
    steps: dict[Any, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    waiting: list[dict[str, Any]] = []
    for record in records:
        event = record.get("event")
        if event == "tool_call":
            waiting.append(record)
        elif event == "tool_result":
            match = next((c for c in waiting if _same_call(c, record)), None)
            if match is not None:
                waiting.remove(match)
                steps.setdefault(record.get("index"), []).append((match, record))
    messages: list[dict[str, Any]] = []
    number = 0
    for pairs in steps.values():
        turns = [pairs] if protocol.name == "native" else [[pair] for pair in pairs]
        for turn in turns:
            calls, raw = [], []
            for call, _ in turn:
                number += 1
                arguments = call.get("arguments") if isinstance(call.get("arguments"), dict) else {}
                calls.append(Call(str(call.get("tool")), arguments, id=f"call_resumed_{number}"))
                raw.append({"id": f"call_resumed_{number}",
                            "name": wire.get(str(call.get("tool")), str(call.get("tool"))),
                            "arguments": json.dumps(arguments, ensure_ascii=False)})
            content = None if protocol.name == "native" else json.dumps(
                {"tool": calls[0].tool, "arguments": calls[0].arguments}, ensure_ascii=False)
            reply = Reply(content=content, tool_calls=raw if protocol.name == "native" else [])
            messages.append(protocol.assistant_message(reply, calls))
            for item, (_, result) in zip(calls, turn, strict=True):
                messages.append(protocol.result_message(item, _note(result, limit)))
    return messages


def _same_call(call: dict[str, Any], result: dict[str, Any]) -> bool:
    return all(call.get(k) == result.get(k) for k in ("index", "tool", "arguments", "call"))


def _note(result: dict[str, Any], limit: int) -> str:
    ok = bool(result.get("ok"))
    handle = str(result.get("handle") or "")
    view, _ = prompts.result_view(str(result.get("output") or ""), result.get("error"), ok,
                                  handle, limit=limit)
    return prompts.result_note(str(result.get("tool")), handle, ok, result.get("exit_code"), view)


def _last_catalogue(lines: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    found = None
    for line in lines:
        if line.get("call") == 0 and isinstance(line.get("catalogue"), list):
            found = line["catalogue"]
    return found
