"""The model side of replay: recorded replies served by ordinal, drift noted, nothing dialled.

``ReplayBackend`` is an ordinary ``ModelBackend``: the loop asks it exactly
as it asks a live endpoint. Replies come out of ``model.jsonl`` in call
order, counted per call kind (a loop turn is served the next recorded loop
turn, a side call the next recorded side call) and, in a swarm recording,
per branch (each plan step's lane gets its own turns back, whatever order
parallel lanes ask in), so two identical prompts in one run get the first
reply and then the second — never one twice. Before
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
import threading
from collections.abc import Sequence
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
    """Serves ``model.jsonl`` by ordinal; never opens a connection.

    Calls are counted per kind and, for a swarm recording, per branch: a
    recorded call whose ``request.extra.branch`` names a branch is served to
    that branch's lane (``for_branch``), so steps that ran in parallel get
    their own turns back whatever order the replay's threads ask in. A
    branch the recording never named is served the kind's next unserved
    call in call order — how every recording without branches replays.
    """

    provider = "replay"

    def __init__(self, calls: list[dict[str, Any]], *, model: str | None = None,
                 source: str | None = None) -> None:
        self.model = model or "recording"
        self.source = source
        #: (provider, model) its calls are priced as (``evalkit.runtime.budgets.priced_as``):
        #: the recorded provider, set by whoever knows it; None: as this backend.
        self.priced_as: tuple[str | None, str | None] | None = None
        #: Per kind, the recorded calls in call order.
        self._queues: dict[str, list[dict[str, Any]]] = {}
        #: Per (kind, branch), the positions of that branch's calls in ``_queues[kind]``.
        self._branches: dict[tuple[str, str | None], list[int]] = {}
        for line in calls:
            kind = str(line.get("kind") or "mission")
            lines = self._queues.setdefault(kind, [])
            self._branches.setdefault((kind, _branch_of(line)), []).append(len(lines))
            lines.append(line)
        self._served: dict[str, set[int]] = {}
        self._next: dict[Any, int] = {}
        self._lock = threading.Lock()
        self._cache = MessageCache()
        self.asked = 0
        self.served = 0
        self.first: dict[str, Any] | None = None
        self.ran_off: RecordingExhausted | None = None

    @property
    def recorded(self) -> int:
        return sum(len(lines) for lines in self._queues.values())

    def describe(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model, "replay_of": self.source}

    def for_branch(self, branch: str) -> _RecordedBranch:
        """The backend a branch lane of the run talks to (see ``evalkit.runtime.run.for_branch``)."""
        return _RecordedBranch(self, branch)

    def remaining(self, kind: str = "mission", branch: str | None = None) -> int:
        """Recorded calls of ``kind`` (for ``branch``) not served yet."""
        with self._lock:
            served = self._served.get(kind, set())
            return sum(1 for at in self._positions(kind, branch)[1] if at not in served)

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                 *, kind: str) -> Reply:
        return self.serve(messages, tools, kind=kind, branch=None)

    def serve(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
              *, kind: str, branch: str | None) -> Reply:
        """The next recorded reply of ``kind`` for ``branch``; drift noted on the way."""
        with self._lock:
            self.asked += 1
            key, positions = self._positions(kind, branch)
            served = self._served.setdefault(kind, set())
            at = self._next.get(key, 0)
            while at < len(positions) and positions[at] in served:
                at += 1
            if at >= len(positions):
                exhausted = RecordingExhausted(self.asked, kind, len(positions))
                if kind == "mission":  # a side call that cannot be served does not end the run
                    self.ran_off = exhausted
                raise exhausted
            self._next[key] = at + 1
            served.add(positions[at])
            line = self._queues[kind][positions[at]]
            if self.first is None:
                self.first = first_difference(line, self._cache.forms(messages), tools,
                                              call=self.asked, kind=kind)
            self.served += 1
        reply = line.get("reply") if isinstance(line.get("reply"), dict) else {}
        if "error" in reply:
            raise ReplayedFailure(str(reply["error"]))
        damage = _damage(reply)
        if damage is not None:
            raise ReplayedFailure(f"the recording of model call {self.asked} is damaged: {damage}")
        return Reply(content=reply.get("content"),
                     tool_calls=copy.deepcopy(reply.get("tool_calls") or []),
                     usage=copy.deepcopy(reply.get("usage")),
                     extras=copy.deepcopy(reply.get("extras") or {}))

    def _positions(self, kind: str, branch: str | None) -> tuple[Any, Sequence[int]]:
        """The queue a call of ``kind`` from ``branch`` is served from, and its key."""
        positions = self._branches.get((kind, branch))
        if positions is not None:
            return (kind, branch), positions
        return kind, range(len(self._queues.get(kind, ())))

    def drift(self) -> dict[str, Any]:
        """``meta.drift``: the first difference (or None) and the counts."""
        return {"first": self.first, "calls": self.asked, "served": self.served,
                "recorded": self.recorded}


#: What each part of a recorded reply must be, when it is there at all.
_REPLY_PARTS: tuple[tuple[str, type, str], ...] = (
    ("content", str, "text"), ("tool_calls", list, "a list"), ("usage", dict, "an object"),
    ("extras", dict, "an object"))


def _damage(reply: dict[str, Any]) -> str | None:
    """Why a recorded reply cannot be served (a hand-edited or damaged model.jsonl), or None:
    it fails as a recorded failure does, in one sentence, not deep in the loop."""
    for name, kind, said in _REPLY_PARTS:
        value = reply.get(name)
        if value is not None and not isinstance(value, kind):
            return f"its {name} is {type(value).__name__}, not {said}"
    if any(not isinstance(call, dict) for call in reply.get("tool_calls") or ()):
        return "a tool call in it is not an object"
    return None


class _BranchView:
    """One branch lane's window on a replaying backend: the calls it makes name the branch."""

    def __init__(self, backend: ReplayBackend | ForkBackend, branch: str) -> None:
        self.backend, self.branch = backend, branch
        self.provider, self.model = backend.provider, backend.model

    def describe(self) -> dict[str, Any]:
        return self.backend.describe()

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                 *, kind: str) -> Reply:
        return self.backend.serve(messages, tools, kind=kind, branch=self.branch)


class _RecordedBranch(_BranchView):
    """A branch's window on a ``ReplayBackend``, which also knows what is left of it."""

    def __init__(self, backend: ReplayBackend, branch: str) -> None:
        super().__init__(backend, branch)
        self.recording = backend

    def remaining(self, kind: str = "mission") -> int:
        return self.recording.remaining(kind, self.branch)


def _branch_of(line: dict[str, Any]) -> str | None:
    """The branch a recorded call was made for (``request.extra.branch``), or None."""
    request = line.get("request") if isinstance(line.get("request"), dict) else {}
    extra = request.get("extra") if isinstance(request.get("extra"), dict) else {}
    branch = extra.get("branch")
    return branch if isinstance(branch, str) else None


class ForkBackend:
    """The recording up to step ``live_from`` (0-based), then a live backend."""

    def __init__(self, recorded: ReplayBackend, live: ModelBackend, live_from: int) -> None:
        self.recorded, self.live, self.live_from = recorded, live, live_from
        self.provider, self.model = live.provider, live.model
        self.turns = 0
        #: The 1-based model call from which the live backend answered (None: not yet).
        self.forked_at: int | None = None
        self._lock = threading.Lock()

    def describe(self) -> dict[str, Any]:
        return self.live.describe()

    def for_branch(self, branch: str) -> _BranchView:
        """A branch lane's window: recorded turns of that branch until the fork, then live."""
        return _BranchView(self, branch)

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                 *, kind: str) -> Reply:
        return self.serve(messages, tools, kind=kind, branch=None)

    def serve(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
              *, kind: str, branch: str | None) -> Reply:
        with self._lock:
            if kind == "mission":
                self.turns += 1
            if self.forked_at is None and kind == "mission" and self.turns > self.live_from:
                self.forked_at = self.recorded.asked + 1
            forked = self.forked_at is not None
        if not forked:
            try:
                return self.recorded.serve(messages, tools, kind=kind, branch=branch)
            except RecordingExhausted:  # the prefix is shorter than asked: go live here
                with self._lock:
                    self.recorded.ran_off = None
                    if self.forked_at is None:
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
