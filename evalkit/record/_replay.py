"""Replaying a recorded agent: its own code runs again, the model's replies come from the recording.

A recorded run can be re-scored with no model; a replay goes further and runs the
agent again with no model: ``wrap_openai``'s ``create`` asks the built-in runtime's
``ReplayBackend`` instead of the endpoint (replies by ordinal, never dialled; the
first place the agent's request differs from the recorded one kept as ``drift``,
never refused; a run that asks for more than was recorded ends ``incomplete``), and
hands the agent the reply as the SDK's own types, whole or as a stream, as it asked.
The replay is a new run with ``replay_of`` and ``drift`` in its meta, as a built-in
replay's is; the recording is only read. Tools run as the agent runs them.

What is replayed is named by ``EVALKIT_REPLAY`` (or ``mission(replay=...)``): a run
directory, or any folder above recordings (an ``evalkit run`` output, a run store),
where the run whose objective is this mission's is taken — so one variable replays a
whole suite under ``evalkit run``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.runtime.backends import Reply
from evalkit.runtime.replay.model import ReplayBackend
from evalkit.runtime.replay.recording import read_recording
from evalkit.store import layout

#: The recording to replay, when ``mission(replay=...)`` is not given.
REPLAY_ENV = "EVALKIT_REPLAY"
#: How far below the named folder a run directory is looked for (an ``evalkit run``
#: output holds ``<key>/runs/<run_id>/``).
_DEPTH = 4


class Replay:
    """The recorded replies of one run, served to the agent's client."""

    def __init__(self, run_dir: Path) -> None:
        recording = read_recording(run_dir)
        self.run_id, self.path = recording.run_id, run_dir
        self.backend = ReplayBackend(recording.model_calls, source=recording.run_id)

    def serve(self, messages: Any, tools: Any) -> Reply:
        """The next recorded reply (``RecordingExhausted`` / ``ReplayedFailure`` as the
        built-in replay raises them)."""
        return self.backend.serve(messages, tools or None, kind="mission", branch=None)

    def meta(self) -> dict[str, Any]:
        return {"replay_of": self.run_id, "replay_source": str(self.path)}

    def closing(self) -> dict[str, Any]:
        ran_off = self.backend.ran_off
        return {"drift": self.backend.drift(),
                "ran_off_end": ran_off.as_dict() if ran_off else None}


def find_run(spec: str | Path, objective: str) -> Path:
    """The run directory ``spec`` names, or the one below it that recorded ``objective``."""
    path = Path(spec).expanduser()
    if _is_run(path):
        return path
    if not path.is_dir():
        raise EvalkitError(f"{REPLAY_ENV}={spec}: no such folder; name a run directory or a "
                           "folder of recordings")
    found = sorted(run for run in _runs_below(path) if _objective(run) == objective)
    if not found:
        raise EvalkitError(f"{REPLAY_ENV}={spec}: no recorded run below it has the objective "
                           f"{objective!r}")
    return found[-1]  # run ids sort by creation: the newest recording


def _is_run(path: Path) -> bool:
    return layout.is_run_id(path.name) and (path / layout.META_FILE).is_file() and \
        (path / layout.EVENTS_FILE).is_file()


def _runs_below(folder: Path) -> list[Path]:
    found: list[Path] = []
    level = [folder]
    for _ in range(_DEPTH):
        level = [child for parent in level for child in _folders(parent)]
        found += [p for p in level if _is_run(p)]
    return found


def _folders(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_dir() and not p.name.startswith(".")]
    except OSError:
        return []


def _objective(run: Path) -> str | None:
    try:
        meta = json.loads((run / layout.META_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    inner = meta.get("meta") if isinstance(meta, dict) else None
    return inner.get("objective") if isinstance(inner, dict) else None


# -- the reply as the openai SDK's types ------------------------------------------------------

#: Reply extras that are facts about the recording, not parts of the message.
_NOT_MESSAGE = frozenset({"finish_reason", "latency_s"})


def completion(reply: Reply, model: str) -> dict[str, Any]:
    """A chat completion body holding ``reply``."""
    body: dict[str, Any] = {
        "id": "chatcmpl-replay", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": _message(reply),
                     "finish_reason": _finish(reply)}]}
    if reply.usage:
        body["usage"] = reply.usage
    return body


def chunks(reply: Reply, model: str, *, usage: bool) -> list[dict[str, Any]]:
    """``reply`` as stream chunks: the whole message in one delta, then its finish reason,
    then the usage chunk when the request asked for one."""
    def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        return {"id": "chatcmpl-replay", "object": "chat.completion.chunk", "created": 0,
                "model": model, "choices": [{"index": 0, "delta": delta,
                                             "finish_reason": finish}]}

    delta = _message(reply)
    delta["tool_calls"] = [{"index": i, **call} for i, call in
                           enumerate(delta.get("tool_calls") or [])] or None
    out = [chunk({k: v for k, v in delta.items() if v is not None}, None),
           chunk({}, _finish(reply))]
    if usage and reply.usage:
        out.append({"id": "chatcmpl-replay", "object": "chat.completion.chunk", "created": 0,
                    "model": model, "choices": [], "usage": reply.usage})
    return out


def _message(reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    calls = []
    for call in reply.tool_calls:
        arguments = call.get("arguments")
        calls.append({"id": call.get("id") or f"call_{len(calls) + 1}", "type": "function",
                      "function": {"name": call.get("name", ""),
                                   "arguments": arguments if isinstance(arguments, str)
                                   else json.dumps(arguments)}})
    if calls:
        message["tool_calls"] = calls
    message.update({k: v for k, v in reply.extras.items() if k not in _NOT_MESSAGE})
    return message


def _finish(reply: Reply) -> str:
    said = reply.extras.get("finish_reason")
    return said if isinstance(said, str) else ("tool_calls" if reply.tool_calls else "stop")


__all__ = ["REPLAY_ENV", "Replay", "chunks", "completion", "find_run"]
