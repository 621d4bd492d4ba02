"""From settings to a finished mission: what ``evalkit mission`` does, as a library call.

The command parses flags into ``MissionSettings`` and calls ``launch``; this
module builds the same objects a library caller would (backend, plane, store,
sink, ``Run``), owns their lifecycles, and turns SIGTERM into a wound-up run.
Anything that stops a mission before it starts is an ``EvalkitError`` with one
sentence, raised before any event is written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evalkit.contract import PROFILES, SANDBOXES
from evalkit.errors import EvalkitError
from evalkit.runtime.cancel import Cancelled, CancelToken, sigterm_cancels
from evalkit.runtime.run import Bounds, Observer, Run, RunOutcome


@dataclass
class MissionSettings:
    """One mission's configuration, as the command line (or a caller) gave it."""

    objective: str
    events: str | None = None
    provider: str = "openai"
    model: str | None = None
    api_base: str | None = None
    api_key: str | None = None
    script: str | None = None
    stream: bool = True
    protocol: str = "json"
    mcp_stdio: tuple[str, ...] = ()
    steps: int = 0
    seconds: float | None = None
    profile: str | None = None
    #: "bwrap", "none", or None for "bwrap when it is installed".
    sandbox: str | None = None
    root: Path = field(default_factory=Path.cwd)

    def recorded_flags(self) -> dict[str, Any]:
        """The settings worth keeping in meta.json (never the key)."""
        flags = asdict(self)
        flags.pop("api_key")
        flags.pop("objective")
        flags["root"] = str(self.root)
        flags["mcp_stdio"] = list(self.mcp_stdio)
        return flags


@dataclass
class Launched:
    """A finished mission plus what the command needs to report on it."""

    outcome: RunOutcome
    sink_errors: int
    recorded: bool


def check(settings: MissionSettings) -> None:
    """Refuse settings a mission cannot start with, one sentence each."""
    if not settings.objective.strip():
        raise EvalkitError("an objective is required: evalkit mission \"what to do\"")
    if settings.provider not in ("openai", "scripted"):
        hint = " (replay comes with --replay, which is not available yet)" \
            if settings.provider == "replay" else ""
        raise EvalkitError(f"unknown provider {settings.provider!r}: use openai or scripted{hint}")
    if settings.provider == "scripted" and not settings.script:
        raise EvalkitError("--provider scripted needs --script FILE")
    if settings.provider == "openai" and not settings.model:
        raise EvalkitError("--provider openai needs --model NAME (or EVALKIT_MODEL)")
    if settings.protocol not in ("json", "native"):
        raise EvalkitError(f"unknown protocol {settings.protocol!r}: use json or native")
    if settings.steps < 0:
        raise EvalkitError("--mission-steps must be 0 (no ceiling) or more")
    if settings.seconds is not None and settings.seconds <= 0:
        raise EvalkitError("--mission-seconds must be more than 0")
    if settings.profile is not None and settings.profile not in PROFILES:
        raise EvalkitError(f"unknown profile {settings.profile!r}: use one of "
                           f"{', '.join(PROFILES)}")
    if settings.sandbox is not None and settings.sandbox not in SANDBOXES:
        raise EvalkitError(f"EVALKIT_SANDBOX={settings.sandbox!r} is not bwrap or none")


def launch(settings: MissionSettings, *, observer: Observer | None = None,
           environ: Mapping[str, str] | None = None) -> Launched:
    """Build everything, run the mission, close everything; SIGTERM winds the run up."""
    from evalkit.runtime.backends import make_backend
    from evalkit.runtime.tools import ResultStore, ToolPlane
    from evalkit.store.layout import runs_root
    from evalkit.store.runstore import RunStore
    from evalkit.store.sink import EventSink

    check(settings)
    model = make_backend(settings.provider, script=settings.script, model=settings.model,
                         base_url=settings.api_base, api_key=settings.api_key,
                         stream=settings.stream)
    sandbox = _sandbox(settings.sandbox)
    root = runs_root(os.environ if environ is None else environ)
    store = RunStore(root) if root is not None else None
    results = ResultStore()
    plane = ToolPlane(root=settings.root, results=results, mcp_stdio=list(settings.mcp_stdio),
                      sandbox=sandbox)
    token = CancelToken()
    sink: EventSink | None = None
    try:
        sink = EventSink.open(settings.events) if settings.events else None
        with sigterm_cancels(token):
            try:
                plane.start()
            except EvalkitError:
                raise
            except Cancelled:
                raise EvalkitError("cancelled before the mission started") from None
            except Exception as exc:
                raise EvalkitError(f"the tool plane did not start: {exc}") from None
            run = Run(model, plane, bounds=Bounds(steps=settings.steps, seconds=settings.seconds),
                      store=store, sink=sink, protocol=settings.protocol, observer=observer,
                      results=results, meta={"flags": settings.recorded_flags()},
                      sandbox=sandbox.name, profile=settings.profile, cancel_token=token)
            outcome = run.run(settings.objective)
    finally:
        token.close()
        plane.close()
        if sink is not None:
            sink.close()
    return Launched(outcome=outcome, sink_errors=sink.errors if sink else 0,
                    recorded=store is not None)


def _sandbox(choice: str | None) -> Any:
    """The sandbox tool subprocesses run in: bwrap where installed, unless opted out."""
    from evalkit.runtime.tools.sandbox import Bwrap, NoSandbox

    if choice == "none":
        return NoSandbox()
    if Bwrap.available():
        return Bwrap()
    if choice == "bwrap":
        raise EvalkitError("EVALKIT_SANDBOX=bwrap but bubblewrap (bwrap) is not installed; "
                           "install it or pass --unsandboxed")
    return NoSandbox()
