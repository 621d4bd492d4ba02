"""``--replay RUN``: the door that runs a recording again through the real loop.

The replay is a new run in the store with ``replay_of`` in its meta; the
recording is only read. Its settings are the recorded ones (objective,
protocol, bounds, profile, skills, …) except where this command line says
otherwise — a different ``--skill`` is the grounding-grammar experiment, a
different objective a drift experiment. The model is the recording (or,
with ``live_from``, the recording up to a step and then a live backend);
the tools are the recording unless ``--tools live``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from evalkit.errors import EvalkitError
from evalkit.runtime.doors import MODEL_SETTINGS, Door, carried
from evalkit.runtime.replay.model import ForkBackend, ReplayBackend, recorded_model_name
from evalkit.runtime.replay.plane import RecordedPlane
from evalkit.runtime.replay.recording import Recording, read_recording, resolve_run
from evalkit.store.runstore import lock_held

if TYPE_CHECKING:
    from evalkit.runtime.backends import ModelBackend
    from evalkit.runtime.mission import MissionSettings
    from evalkit.runtime.tools import ResultStore
    from evalkit.store.runstore import RunStore

TOOL_MODES = ("recorded", "live")


def open_replay(settings: MissionSettings, store: RunStore | None) -> Door:
    """Read the recording and decide everything the replay needs; refuse in one sentence."""
    if store is None:
        raise EvalkitError("a replay is recorded as a new run, but recording is off "
                           "(EVALKIT_RUNS=off): point EVALKIT_RUNS at a folder")
    tools = settings.tools or "recorded"
    if tools not in TOOL_MODES:
        raise EvalkitError(f"--tools takes recorded or live, not {tools!r}")
    if settings.live_from is not None and settings.live_from < 0:
        raise EvalkitError("--live-from takes a step index: 0 or more")
    path = resolve_run(settings.replay or "", store.root)
    if lock_held(path):
        raise EvalkitError(f"run {path.name} is still being written; replay it once it "
                           "has finished")
    recording = read_recording(path)
    if recording.started is None:
        raise EvalkitError(f"run {recording.run_id} has no mission_started: there is "
                           "nothing to replay")
    forked = settings.live_from is not None
    effective = carried(settings, recording.flags,
                        skip=frozenset() if forked else MODEL_SETTINGS)
    effective.objective = settings.objective.strip() or recording.objective
    effective.tools = tools
    if not forked:
        effective.provider = "replay"
    return _ReplayDoor(recording, effective, tools, store).door()


class _ReplayDoor:
    """Holds the replay's parts so the closing meta can read them after the run."""

    def __init__(self, recording: Recording, settings: MissionSettings, tools: str,
                 store: RunStore) -> None:
        self.recording, self.settings, self.tools = recording, settings, tools
        self.backend = ReplayBackend(recording.model_calls, source=recording.run_id,
                                     model=recorded_model_name(recording.model_calls,
                                                               recording.meta))
        # Priced as the provider and model it recorded, not as "replay" (evalkit.pricing).
        provider = recording.meta.get("provider")
        self.backend.priced_as = (provider if isinstance(provider, str) else None,
                                  self.backend.model)
        self.fork: ForkBackend | None = None
        self.plane: RecordedPlane | None = None
        inside = recording.path.parent.resolve() == store.root.resolve()
        self.keep = frozenset({recording.run_id}) if inside else frozenset()

    def door(self) -> Door:
        meta: dict[str, Any] = {"replay_of": self.recording.run_id,
                                "replay_source": str(self.recording.path),
                                "replay_tools": self.tools}
        if self.settings.live_from is not None:
            meta["live_from"] = self.settings.live_from
        recorded_sandbox = (self.recording.started or {}).get("sandbox")
        # Nobody is asked to decide a gate on a re-run: a gated call ends the replay
        # awaiting_approval at once. Recorded tools act on nothing, so there is nothing to audit.
        env = {"EVALKIT_APPROVALS": "off"}
        if self.tools == "recorded":
            env["EVALKIT_AUDIT"] = "off"
            env["EVALKIT_LEDGER"] = "off"  # nor anything to carry out at most once
        return Door(
            settings=self.settings, model=self.model,
            plane=self.make_plane if self.tools == "recorded" else None,
            sandbox=str(recorded_sandbox or "none") if self.tools == "recorded" else None,
            meta=meta, keep=self.keep, closing=self.closing, env=env)

    def model(self, live: ModelBackend | None) -> ModelBackend:
        if self.settings.live_from is None:
            return self.backend
        if live is None:
            raise EvalkitError("--live-from continues against a live model: give --provider "
                               "openai (with --model) or --provider scripted --script FILE")
        self.fork = ForkBackend(self.backend, live, self.settings.live_from)
        return self.fork

    def make_plane(self, results: ResultStore) -> RecordedPlane:
        self.plane = RecordedPlane(self.recording.tool_lines, results,
                                   sandbox=str((self.recording.started or {}).get("sandbox")
                                               or "none"),
                                   root=self.settings.root)
        return self.plane

    def closing(self) -> dict[str, Any]:
        ran_off = self.backend.ran_off
        out: dict[str, Any] = {"drift": self.backend.drift(),
                               "ran_off_end": ran_off.as_dict() if ran_off else None}
        if self.plane is not None:
            out["replay_tool_calls"] = self.plane.stats()
        if self.fork is not None:
            out["forked_at_call"] = self.fork.forked_at
        return out


def summary_lines(notes: dict[str, Any]) -> list[str]:
    """What a person reads after a replay: drift and running off the end, one line each."""
    lines = []
    drift = notes.get("drift") or {}
    first = drift.get("first")
    if first:
        where = f", message {first['message']}" if first.get("message") is not None else ""
        lines.append(f"drift: first at model call {first['call']} ({first['kind']}{where}): "
                     f"{first['detail']}")
    elif drift:
        lines.append(f"drift: none ({drift.get('served', 0)} of {drift.get('recorded', 0)} "
                     "recorded model call(s) served)")
    ran_off = notes.get("ran_off_end")
    if ran_off:
        lines.append(f"the replay ran off the end of its recording at model call "
                     f"{ran_off['call']} ({ran_off['recorded']} {ran_off['kind']} call(s) "
                     "recorded)")
    tools = notes.get("replay_tool_calls") or {}
    if tools.get("not_in_recording"):
        lines.append(f"tools: {tools['not_in_recording']} call(s) were not in the recording "
                     "and were refused (not_in_recording)")
    if notes.get("forked_at_call"):
        lines.append(f"fork: the live model answered from model call {notes['forked_at_call']}")
    return lines
