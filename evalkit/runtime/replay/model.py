"""The model side of replay: recorded replies served by ordinal, drift noted, nothing dialled.

``ReplayBackend`` is an ordinary ``ModelBackend``: the loop asks it exactly
as it asks a live endpoint. Replies come out of ``model.jsonl`` in call
order, counted per call kind (a loop turn is served the next recorded loop
turn, a side call the next recorded side call), so two identical prompts in
one run get the first reply and then the second — never one twice. Before
serving call n the live request is compared with the recorded one and the
first difference is kept (``drift``); it is never refused.

A run that asks for more than was recorded gets ``RecordingExhausted``,
which ends the mission ``incomplete`` with a reason naming the call. A
recorded call that had failed fails again the same way.

``ForkBackend`` serves the recording up to a step and then hands every call
to a live (or scripted) backend: a counterfactual from the same prefix.
"""

from __future__ import annotations

import copy
from typing import Any

from evalkit.runtime.backends import ModelBackend, Reply, ScriptExhausted
from evalkit.runtime.replay.drift import MessageCache, as_recorded, first_difference


class RecordingExhausted(ScriptExhausted):
    """The replay asked for a model call the recording does not hold."""

    def __init__(self, call: int, kind: str, recorded: int) -> None:
        super().__init__(recorded)
        self.call, self.kind, self.recorded = call, kind, recorded
        self.args = (f"the replay ran off the end of its recording at model call {call} "
                     f"(the recording holds {recorded} {kind} call(s))",)

    def as_dict(self) -> dict[str, Any]:
        return {"call": self.call, "kind": self.kind, "recorded": self.recorded}


class ReplayedFailure(ScriptExhausted):
    """A recorded call that failed: it fails again, with the recorded words as the reason."""

    def __init__(self, error: str) -> None:
        super().__init__(0)
        self.args = (error,)


class ReplayBackend:
    """Serves ``model.jsonl`` by ordinal; never opens a connection."""

    provider = "replay"

    def __init__(self, calls: list[dict[str, Any]], *, model: str | None = None,
                 source: str | None = None) -> None:
        self.model = model or "recording"
        self.source = source
        self._queues: dict[str, list[dict[str, Any]]] = {}
        for line in calls:
            self._queues.setdefault(str(line.get("kind") or "mission"), []).append(line)
        self._next: dict[str, int] = {}
        self._cache = MessageCache()
        self.asked = 0
        self.served = 0
        self.first: dict[str, Any] | None = None
        self.ran_off: RecordingExhausted | None = None

    @property
    def recorded(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def describe(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model, "replay_of": self.source}

    def remaining(self, kind: str = "mission") -> int:
        """Recorded calls of ``kind`` not served yet."""
        return len(self._queues.get(kind, ())) - self._next.get(kind, 0)

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                 *, kind: str) -> Reply:
        self.asked += 1
        queue = self._queues.get(kind, [])
        at = self._next.get(kind, 0)
        if at >= len(queue):
            exhausted = RecordingExhausted(self.asked, kind, len(queue))
            if kind == "mission":  # a side call that cannot be served does not end the run
                self.ran_off = exhausted
            raise exhausted
        self._next[kind] = at + 1
        line = queue[at]
        if self.first is None:
            self.first = first_difference(line, self._cache.forms(messages), tools,
                                          call=self.asked, kind=kind)
        self.served += 1
        reply = line.get("reply") if isinstance(line.get("reply"), dict) else {}
        if "error" in reply:
            raise ReplayedFailure(str(reply["error"]))
        return Reply(content=reply.get("content"),
                     tool_calls=copy.deepcopy(reply.get("tool_calls") or []),
                     usage=copy.deepcopy(reply.get("usage")),
                     extras=copy.deepcopy(reply.get("extras") or {}))

    def drift(self) -> dict[str, Any]:
        """``meta.drift``: the first difference (or None) and the counts."""
        return {"first": self.first, "calls": self.asked, "served": self.served,
                "recorded": self.recorded}


class ForkBackend:
    """The recording up to step ``live_from`` (0-based), then a live backend."""

    def __init__(self, recorded: ReplayBackend, live: ModelBackend, live_from: int) -> None:
        self.recorded, self.live, self.live_from = recorded, live, live_from
        self.provider, self.model = live.provider, live.model
        self.turns = 0
        #: The 1-based model call from which the live backend answered (None: not yet).
        self.forked_at: int | None = None

    def describe(self) -> dict[str, Any]:
        return self.live.describe()

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                 *, kind: str) -> Reply:
        if kind == "mission":
            self.turns += 1
        if self.forked_at is None and kind == "mission" and self.turns > self.live_from:
            self.forked_at = self.recorded.asked + 1
        if self.forked_at is None:
            try:
                return self.recorded.complete(messages, tools, kind=kind)
            except RecordingExhausted:  # the prefix is shorter than asked: go live here
                self.recorded.ran_off = None
                self.forked_at = self.recorded.asked
        return self.live.complete(messages, tools, kind=kind)


def recorded_model_name(calls: list[dict[str, Any]], meta: dict[str, Any]) -> str | None:
    """The model the recording talked to (what a replay reports as its model)."""
    if isinstance(meta.get("model"), str):
        return meta["model"]
    for line in calls:
        extra = ((line.get("request") or {}).get("extra") or {})
        if isinstance(extra.get("model"), str):
            return extra["model"]
    return None


__all__ = ["ForkBackend", "RecordingExhausted", "ReplayBackend", "ReplayedFailure",
           "as_recorded", "recorded_model_name"]
