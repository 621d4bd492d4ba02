"""How a mission comes in: fresh, replaying a recording, or resuming an unfinished run.

``launch`` asks ``open_door(settings, store)`` first. A fresh mission gets a
door that changes nothing. ``--replay`` and ``--resume`` get one that
carries what the recording decides — the effective settings (the recorded
flags, overridden by what this command line gave), a model or plane to use
instead of the live ones, the sandbox name to report, meta to add, the run
to continue — so the mission itself is built by the same code either way
and governance, grounding and bounds apply to replays and resumes exactly
as to fresh runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.errors import EvalkitError

if TYPE_CHECKING:
    from evalkit.runtime.backends import ModelBackend
    from evalkit.runtime.mission import MissionSettings
    from evalkit.runtime.resume import ResumePoint
    from evalkit.runtime.tools import ResultStore
    from evalkit.store.runstore import RunStore

#: Settings that never carry over from a recording: this process's own plumbing.
NEVER_CARRIED = frozenset({"objective", "events", "control", "approval", "api_key", "root",
                           "replay", "resume", "tools", "live_from", "cassette",
                           "record_mode"})
#: The live model's settings (not carried into a replay, whose model is the recording).
MODEL_SETTINGS = frozenset({"provider", "model", "api_base", "script", "stream"})


@dataclass
class Door:
    """What the way in decided; a fresh mission's door is all defaults."""

    settings: MissionSettings
    #: Given the live backend (None for a pure replay), the model the run talks to.
    model: Callable[[ModelBackend | None], ModelBackend] | None = None
    #: Builds the plane instead of the live ``ToolPlane``.
    plane: Callable[[ResultStore], Any] | None = None
    #: The sandbox name the run reports (a replay reports the recorded one).
    sandbox: str | None = None
    #: Added to meta.json's ``meta`` when the run is created.
    meta: dict[str, Any] = field(default_factory=dict)
    #: The unfinished run a resume continues.
    resume: ResumePoint | None = None
    #: Run ids the orphan reconciler must leave alone (the recording being read or resumed).
    keep: frozenset[str] = frozenset()
    #: Whole tool outputs to put in the result store first, so handles continue.
    outputs: tuple[str, ...] = ()
    #: Meta written when the run closes (``drift``…), also handed back to the command.
    closing: Callable[[], dict[str, Any]] | None = None
    #: Release what the door holds (a resumed run's lock) if the run never took it over.
    release: Callable[[], None] | None = None
    #: Environment the mission is built with on top of the caller's (a replay's folders).
    env: dict[str, str] = field(default_factory=dict)

    def close(self) -> None:
        if self.release is not None:
            self.release()


def open_door(settings: MissionSettings, store: RunStore | None) -> Door:
    """The door for these settings; refusals are one ``EvalkitError`` sentence."""
    if settings.replay and settings.resume:
        raise EvalkitError("--replay and --resume do not go together: replay re-runs a "
                           "finished recording, resume continues an unfinished run")
    if settings.live_from is not None and not settings.replay:
        raise EvalkitError("--live-from forks a replay: give --replay RUN (or use evalkit replay)")
    if settings.replay:
        from evalkit.runtime.replay.session import open_replay

        return open_replay(settings, store)
    if settings.resume:
        from evalkit.runtime.resume import open_resume

        return open_resume(settings, store)
    if settings.tools is not None:
        raise EvalkitError("--tools chooses how a replay dispatches: give --replay RUN too")
    return Door(settings)


def carried(given: MissionSettings, flags: dict[str, Any], *,
            skip: frozenset[str] = frozenset()) -> MissionSettings:
    """``given`` with every setting it left at its default taken from recorded ``flags``.

    A setting counts as given when it differs from the default: the command
    line (or caller) decides it; otherwise the recording does. Settings in
    ``NEVER_CARRIED`` and ``skip`` always stay as given.
    """
    from evalkit.runtime.mission import MissionSettings

    defaults = MissionSettings(objective="")
    out = dataclasses.replace(given)
    for spec in dataclasses.fields(MissionSettings):
        name = spec.name
        if name in NEVER_CARRIED or name in skip or name not in flags:
            continue
        default = getattr(defaults, name)
        if getattr(given, name) != default:
            continue
        value = flags[name]
        if isinstance(default, tuple) and isinstance(value, list):
            value = tuple(value)
        elif isinstance(default, Path) and isinstance(value, str):
            value = Path(value)
        setattr(out, name, value)
    return out
