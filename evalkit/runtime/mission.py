"""From settings to a finished mission: what ``evalkit mission`` does, as a library call.

The command parses flags into ``MissionSettings`` and calls ``launch``; this
module builds the same objects a library caller would (backend, plane, store,
sink, ``Run``), owns their lifecycles, and turns SIGTERM into a wound-up run.
Anything that stops a mission before it starts is an ``EvalkitError`` with one
sentence, raised before any event is written.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.contract import PROFILES, SANDBOXES
from evalkit.errors import EvalkitError
from evalkit.redact import declared_secrets, remember
from evalkit.runtime.cancel import Cancelled, CancelToken, sigterm_cancels
from evalkit.runtime.control import ControlChannel
from evalkit.runtime.governance import DEFAULT_PROFILE, AuditLog, Governor, audit_root
from evalkit.runtime.run import Bounds, Observer, Run, RunOutcome

#: Where the action ledger is (default: the state folder's governance database), or off.
LEDGER_ENV = "EVALKIT_LEDGER"
LEDGER_OFF, LEDGER_ALL = ("off", "none"), ("all", "on")

if TYPE_CHECKING:
    from evalkit.runtime.governance.skills import Manifest


@dataclass
class MissionSettings:
    """One mission's configuration, as the command line (or a caller) gave it."""

    objective: str
    events: str | None = None
    provider: str = "openai"
    model: str | None = None
    api_base: str | None = None
    api_key: str | None = None
    #: Environment variables whose values are secret (``--secret``): never recorded.
    secrets: tuple[str, ...] = ()
    script: str | None = None
    stream: bool = True
    protocol: str = "json"
    mcp_stdio: tuple[str, ...] = ()
    #: ``--mcp-scopes SERVER=SCOPE[,SCOPE]`` values: an operator's word over annotations.
    mcp_scopes: tuple[str, ...] = ()
    #: ``--mcp-env NAME[=VALUE]``: variables passed to the MCP servers beyond their few defaults.
    mcp_env: tuple[str, ...] = ()
    #: Seconds an MCP server may take to start, and one MCP call to answer (None: defaults).
    mcp_start_timeout: float | None = None
    mcp_call_timeout: float | None = None
    #: Seconds one model call may take in all, and a stream may stay silent (None: defaults).
    request_timeout: float | None = None
    stream_idle_timeout: float | None = None
    steps: int = 0
    seconds: float | None = None
    #: Token and cost budgets over every model call (``evalkit.runtime.budgets``); None: none.
    max_tokens: int | None = None
    max_cost: float | None = None
    #: A pricing file (``evalkit.pricing``); None: ``EVALKIT_PRICING``, else unpriced.
    pricing: str | None = None
    profile: str | None = None
    #: "bwrap", "none", or None for "bwrap when it is installed".
    sandbox: str | None = None
    root: Path = field(default_factory=Path.cwd)
    #: Skill manifests (SKILL.md paths), first is primary.
    skills: tuple[str, ...] = ()
    #: Scopes added beyond the profile for this run.
    grants: tuple[str, ...] = ()
    gate_tools: tuple[str, ...] = ()
    #: An approved request whose one call this run may make.
    approval: str | None = None
    #: Seconds a standing gate waits for a decision (None/0: it does not wait).
    gate_wait: float | None = None
    #: Where control commands come from: -, fd:N or a path.
    control: str | None = None
    #: The stuck-loop supervisor (``--no-supervisor`` switches it off).
    supervisor: bool = True
    #: Staged decomposition (``--swarm``): see ``evalkit.runtime.swarm``.
    swarm: bool = False
    #: Independent swarm steps run at once (``--swarm-parallel``); 1 = one after another.
    swarm_parallel: int = 1
    #: Replay this recorded run (a run id or a run directory): see ``evalkit.runtime.replay``.
    replay: str | None = None
    #: Continue this unfinished run (a run id or a run directory): see ``evalkit.runtime.resume``.
    resume: str | None = None
    #: On replay: "recorded" (the default) or "live" tool results.
    tools: str | None = None
    #: On replay: serve the recording before this step index, then the live model (a fork).
    live_from: int | None = None
    #: An HTTP cassette for the openai backend, and its vcrpy record mode.
    cassette: str | None = None
    record_mode: str | None = None

    def recorded_flags(self) -> dict[str, Any]:
        """The settings worth keeping in meta.json (never the key)."""
        flags = asdict(self)
        flags.pop("api_key")
        flags.pop("objective")
        flags["root"] = str(self.root)
        flags["mcp_stdio"] = list(self.mcp_stdio)
        flags["mcp_scopes"] = list(self.mcp_scopes)
        # A value given on the command line may be a credential: only the names are kept
        # (a resume passes each name's value from its own environment). None named, none
        # written: a recording made without the flag reads as it always has.
        flags["mcp_env"] = [item.split("=", 1)[0] for item in self.mcp_env]
        if not flags["mcp_env"]:
            del flags["mcp_env"]
        return flags


@dataclass
class Launched:
    """A finished mission plus what the command needs to report on it."""

    outcome: RunOutcome
    sink_errors: int
    recorded: bool
    #: What a replay reports (``drift``, ``ran_off_end``…); empty for a fresh run.
    notes: dict[str, Any] = field(default_factory=dict)


def check(settings: MissionSettings) -> None:
    """Refuse settings a mission cannot start with, one sentence each."""
    if not settings.objective.strip():
        raise EvalkitError("an objective is required: evalkit mission \"what to do\"")
    if settings.provider == "replay" and not settings.replay:
        raise EvalkitError("--provider replay needs --replay RUN (the recording it serves)")
    if settings.provider not in ("openai", "scripted", "replay"):
        raise EvalkitError(f"unknown provider {settings.provider!r}: use openai or scripted")
    if settings.cassette and settings.provider != "openai":
        raise EvalkitError(f"--cassette records the openai backend's HTTP exchanges; "
                           f"--provider {settings.provider} makes none")
    if settings.record_mode and not settings.cassette:
        raise EvalkitError("--record-mode needs --cassette PATH")
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
    if settings.max_tokens is not None and settings.max_tokens < 1:
        raise EvalkitError("--max-tokens must be 1 or more")
    if settings.max_cost is not None and not settings.max_cost > 0:
        raise EvalkitError("--max-cost must be an amount more than 0")
    for flag, value in (("--request-timeout", settings.request_timeout),
                        ("--stream-idle-timeout", settings.stream_idle_timeout),
                        ("--mcp-start-timeout", settings.mcp_start_timeout),
                        ("--mcp-call-timeout", settings.mcp_call_timeout)):
        if value is not None and not value > 0:
            raise EvalkitError(f"{flag} must be more than 0 seconds")
    for item in settings.mcp_env:
        name = item.split("=", 1)[0]
        if not name or not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise EvalkitError(f"--mcp-env {item!r}: give NAME or NAME=VALUE, NAME an "
                               "environment variable name")
    if settings.profile is not None and settings.profile not in PROFILES:
        raise EvalkitError(f"unknown profile {settings.profile!r}: use one of "
                           f"{', '.join(PROFILES)}")
    if settings.swarm_parallel < 1:
        raise EvalkitError("--swarm-parallel must be 1 or more")
    if settings.swarm_parallel > 1 and not settings.swarm:
        raise EvalkitError("--swarm-parallel runs swarm steps at once: give --swarm too")
    if settings.swarm_parallel > 1 and settings.cassette:
        raise EvalkitError("--cassette plays HTTP exchanges back in the order they were "
                           "recorded: run swarm steps one at a time (--swarm-parallel 1)")
    if settings.sandbox is not None and settings.sandbox not in SANDBOXES:
        raise EvalkitError(f"EVALKIT_SANDBOX={settings.sandbox!r} is not bwrap or none")
    _check_governance(settings)


def _check_governance(settings: MissionSettings) -> None:
    from evalkit.runtime.governance.approvals import is_approval_id
    from evalkit.runtime.governance.mcpscopes import parse_flag
    from evalkit.runtime.governance.profiles import check_grants

    check_grants(settings.grants)
    parse_flag(settings.mcp_scopes)
    if settings.approval is not None and not is_approval_id(settings.approval):
        raise EvalkitError(f"--approval {settings.approval!r} is not an approval id "
                           "(ap_ and 16 hex digits)")
    if settings.gate_wait is not None and settings.gate_wait < 0:
        raise EvalkitError("--gate-wait must be 0 seconds or more")


def launch(settings: MissionSettings, *, observer: Observer | None = None,
           environ: Mapping[str, str] | None = None,
           notice: Callable[[str], None] | None = None, durable: bool = True) -> Launched:
    """Build everything, run the mission, close everything; SIGTERM winds the run up.

    ``notice`` hears the sentences a person should see before the run starts
    (pending approvals found abandoned on the way in). A ``--replay`` or
    ``--resume`` comes in through its door (``evalkit.runtime.doors``), which
    decides the effective settings and what stands in for the live parts.
    ``durable=False`` records without fsync (regrade's re-creatable replays only).
    """
    from evalkit.runtime.doors import open_door
    from evalkit.store.layout import runs_root
    from evalkit.store.runstore import RunStore
    from evalkit.store.seal import signer_or_none

    env = os.environ if environ is None else environ
    root = runs_root(env)
    store = None
    if root is not None:
        signer, why_not = signer_or_none(env)
        if why_not is not None and notice is not None:
            notice(why_not)
        store = RunStore(root, durable=durable, signer=signer)
    door = open_door(settings, store)
    try:
        return _launch(door, store, env, observer=observer, notice=notice)
    finally:
        door.close()


def _launch(door: Any, store: Any, env: Mapping[str, str], *, observer: Observer | None,
            notice: Callable[[str], None] | None) -> Launched:
    from evalkit.gate.certificates import close_certified
    from evalkit.runtime.backends import make_backend
    from evalkit.runtime.governance.reach import governed_folders
    from evalkit.runtime.tools import ResultStore, ToolPlane
    from evalkit.runtime.tools.fsroot import hide
    from evalkit.store.orphans import close_orphans
    from evalkit.store.sink import EventSink

    settings = door.settings
    check(settings)
    # Known before anything is written: the key and the declared values never are.
    remember((settings.api_key, *declared_secrets(settings.secrets, env)))
    if settings.swarm and door.resume is not None:
        _check_swarm_resume(door.resume)
    env = {**env, **door.env}
    root = store.root if store is not None else None
    if store is not None:
        # Runs whose process died get their last word, closed as this run will be.
        close_orphans(store, keep=door.keep, close=close_certified)
    manifest, approvals = _governance_parts(settings, env, notice)
    governed = governed_folders(env)
    hide(governed)  # before any tool exists
    live = None if settings.provider == "replay" else make_backend(
        settings.provider, script=settings.script, model=settings.model,
        base_url=settings.api_base, api_key=settings.api_key, stream=settings.stream,
        cassette=settings.cassette, record_mode=settings.record_mode,
        request_timeout_s=settings.request_timeout, idle_timeout_s=settings.stream_idle_timeout)
    model = door.model(live) if door.model is not None else live
    pricing = _pricing(settings, env, model)
    sandbox = _sandbox(settings.sandbox, governed) if door.plane is None else None
    sandbox_name = door.sandbox or sandbox.name
    results = ResultStore()
    for output in door.outputs:  # a resumed run's handles continue where they stood
        results.put(output)
    plane = door.plane(results) if door.plane is not None else ToolPlane(
        root=settings.root, results=results, builtins=builtins_for(manifest),
        mcp_stdio=list(settings.mcp_stdio), sandbox=sandbox,
        mcp_scopes=_declarations(settings, manifest), **_mcp_options(settings, manifest, env))
    token = CancelToken()
    sink: EventSink | None = None
    control: ControlChannel | None = None
    ledger = None
    pauses = None
    try:
        ledger = _ledger(env, gated=bool(settings.gate_tools or settings.approval),
                         mission_root=settings.root) if store is not None else None
        # A replay's gates stop nothing live: there is nothing a person could resume.
        pauses = _pauses(ledger, env) if not settings.replay else None
        control = ControlChannel.open(settings.control) if settings.control else None
        sink = EventSink.open(settings.events) if settings.events else None
        with sigterm_cancels(token):
            if settings.approval is not None:
                _refuse_before_starting(settings, settings.approval, approvals, pauses,
                                        door.resume)
            try:
                plane.start()
            except EvalkitError:
                raise
            except Cancelled:
                raise EvalkitError("cancelled before the mission started") from None
            except Exception as exc:
                raise EvalkitError(f"the tool plane did not start: {exc}") from None
            where = audit_root(env)
            governor = Governor.at_door(
                plane.catalogue(), profile=settings.profile or DEFAULT_PROFILE,
                grants=settings.grants, manifest=manifest, gate_tools=settings.gate_tools,
                approval_id=settings.approval, approvals=approvals,
                audit=AuditLog(where) if where is not None else None,
                sandbox=sandbox_name, gate_wait=settings.gate_wait, runs_root=root,
                ledger=ledger)
            if governor.approval_problem and notice is not None:
                notice(f"note: {governor.approval_problem}; its call will be refused")
            if governor.deferred and notice is not None:
                notice(f"note: {', '.join(governor.deferred)} not offered by the running "
                       "server(s) yet; admitted if registered mid-run")
            kind, staging = (Run, {}) if not settings.swarm else _swarm(settings)
            run = kind(model, plane, bounds=Bounds(steps=settings.steps, seconds=settings.seconds,
                                           tokens=settings.max_tokens, cost=settings.max_cost,
                                           supervisor=settings.supervisor),
                       pricing=pricing,
                       store=store, sink=sink, protocol=settings.protocol, observer=observer,
                       results=results, meta={"flags": settings.recorded_flags(), **door.meta},
                       sandbox=sandbox_name, cancel_token=token, governor=governor,
                       control=control, resume=door.resume, closing_meta=door.closing,
                       grounding=_grammar(manifest), **staging)
            # The paused run's checkpoint is leased before the run takes its first step.
            lease = pauses.take(settings, door.resume, governor.approval) \
                if pauses is not None and door.resume is not None \
                and governor.approval is not None and governor.approval_problem is None \
                else None
            try:  # from here a failure fails the lease with a code (never its text)
                if control is not None:
                    control.start(on_cancel=token.cancel)
                outcome = run.run(settings.objective)
            except BaseException as exc:
                if lease is not None and pauses is not None:
                    pauses.fail(lease, "operator_aborted" if isinstance(exc, KeyboardInterrupt)
                                else "resume_failed")
                raise
            if pauses is not None:
                said = _settle(pauses, settings, outcome, store, lease)
                if said and notice is not None:
                    notice(said)
    finally:
        token.close()
        if control is not None:
            control.close()
        if pauses is not None:
            pauses.close()
        if ledger is not None:
            ledger.close()
        plane.close()
        if sink is not None:
            sink.close()
        if callable(getattr(live, "close", None)):
            live.close()  # a cassette is written here
    return Launched(outcome=outcome, sink_errors=sink.errors if sink else 0,
                    recorded=store is not None,
                    notes=door.closing() if door.closing is not None else {})


def _pricing(settings: MissionSettings, env: Mapping[str, str], model: Any) -> Any:
    """The run's prices (``--pricing``, else ``EVALKIT_PRICING``), or None: unpriced.

    A cost budget needs a price for the model the run talks to: without one the
    run's cost could never be known, so the budget could never be held.
    """
    from evalkit.pricing import PRICING_ENV, load
    from evalkit.runtime.budgets import priced_as

    named = settings.pricing or env.get(PRICING_ENV) or None
    if named is None:
        if settings.max_cost is not None:
            raise EvalkitError("--max-cost needs prices: give --pricing FILE (or set "
                               f"{PRICING_ENV})")
        return None
    pricing = load(named)
    provider, name = priced_as(model)
    if settings.max_cost is not None and pricing.price(provider, name) is None:
        raise EvalkitError(f"--max-cost cannot be held: {named} has no price for "
                           f"{provider}/{name}, so the run's cost would be unknown")
    return pricing


def _mcp_options(settings: MissionSettings, manifest: Manifest | None,
                 env: Mapping[str, str]) -> dict[str, Any]:
    """The MCP servers' timeouts and the variables passed them: a skill's ``mcp_env``,
    then ``--mcp-env`` (the operator's word last, so it wins on a name both give).

    A ``--mcp-env NAME`` that is not set here is passed as nothing rather than
    refused: a server that reads it optionally behaves as it would anywhere
    the variable is unset.
    """
    options: dict[str, Any] = {}
    if settings.mcp_start_timeout is not None:
        options["mcp_start_timeout_s"] = settings.mcp_start_timeout
    if settings.mcp_call_timeout is not None:
        options["mcp_call_timeout_s"] = settings.mcp_call_timeout
    passed: dict[str, str] = {}
    for item in (*(manifest.mcp_env if manifest is not None else ()), *settings.mcp_env):
        name, eq, value = item.partition("=")
        if eq:
            passed[name] = value
        elif name in env:
            passed[name] = env[name]
    if passed:
        options["mcp_env"] = passed
    return options


def _swarm(settings: MissionSettings) -> tuple[type[Run], dict[str, Any]]:
    """``SwarmRun`` and its options (imported here: a direct mission never pays for it)."""
    from evalkit.runtime.swarm import SwarmRun

    return SwarmRun, {"parallel": settings.swarm_parallel}


def _refuse_before_starting(settings: MissionSettings, approval_id: str, approvals: Any,
                            pauses: Any, point: Any) -> None:
    """What refuses ``--approval`` (and a resume's checkpoint) without the tool plane is
    said before any server starts, in the sentence the door or the lease would say later.
    A yes that does not hold up (``decision_problem``) is not refused here: its call is
    denied in the run, and its checkpoint is not leased."""
    from evalkit.runtime.governance.approvals import decision_problem
    from evalkit.runtime.governance.governor import approved_record

    record = approved_record(approval_id, approvals)
    if pauses is not None and point is not None and decision_problem(record) is None:
        pauses.refuse_early(settings, point, approval_id)


def _check_swarm_resume(point: Any) -> None:
    """A staged run is not resumed: its lanes' conversations cannot be rebuilt from the log."""
    if any(r.get("event") == "step_started" and "plan" in r for r in point.history):
        raise EvalkitError(f"run {point.writer.run_id} was staged by --swarm (a plan rode "
                           "step_started): a staged run is not resumed; replay it or start "
                           "the mission again")


def builtins_for(manifest: Any) -> list[str]:
    """The default built-ins, plus the opt-in ones (coding, research) a skill names."""
    from evalkit.runtime.tools.builtins import BUILTIN_NAMES, OPT_IN_NAMES

    named = set(getattr(manifest, "allowed_tools", None) or ())
    return [*BUILTIN_NAMES, *(n for n in OPT_IN_NAMES if n in named)]


def _grammar(manifest: Any) -> Any:
    """The skill's grounding grammar (``evalkit.grounding``), or None: no block, no validator."""
    block = getattr(manifest, "grounding", None)
    if block is None:
        return None
    from evalkit.grounding import parse_grammar

    return parse_grammar(block)


def _governance_parts(settings: MissionSettings, env: Mapping[str, str],
                      notice: Callable[[str], None] | None) -> tuple[Any, Any]:
    """The composed skill manifest and the approvals store (reconciled on the way in)."""
    from evalkit.runtime.governance import ApprovalStore, approvals_root, load_all

    manifest = load_all(settings.skills) if settings.skills else None
    folder = approvals_root(env)
    approvals = ApprovalStore(folder) if folder is not None else None
    if approvals is not None:
        abandoned = approvals.reconcile()
        if abandoned and notice is not None:
            notice(f"note: {len(abandoned)} pending approval request(s) whose run is gone were "
                   f"marked abandoned: {', '.join(abandoned)}")
        if settings.gate_tools:
            approvals.ensure()  # a gate must be able to write its request: refuse now if not
    return manifest, approvals


def _ledger(env: Mapping[str, str], *, gated: bool, mission_root: Path) -> Any:
    """The action ledger a recorded mission's calls go through, or None.

    Unset, ``EVALKIT_LEDGER`` means: a mission with gates (``--gate-tool``,
    ``--approval``) uses the state folder's governance database. ``all`` makes every
    recorded mission use it, a path names another file for every mission, ``off`` none.
    A ledger that cannot be opened, or that lies inside the mission root outside every
    folder the tools are kept from (where the agent could rewrite it), refuses the
    mission: governance fails closed.
    """
    import sqlite3

    from evalkit.gate import db
    from evalkit.gate.ledger import Ledger
    from evalkit.runtime.governance.reach import governed_folders

    value = (env.get(LEDGER_ENV) or "").strip()
    if value.lower() in LEDGER_OFF or (not value and not gated):
        return None
    path = Path(value) if value and value.lower() not in LEDGER_ALL else db.default_path(env)
    if _within(path, mission_root) and not any(_within(path, folder)
                                                for folder in governed_folders(env)):
        raise EvalkitError(f"the action ledger {path} is inside the mission root {mission_root}, "
                           f"where the agent could rewrite it: point {LEDGER_ENV} elsewhere")
    try:
        return Ledger(path)
    except EvalkitError as exc:  # the opener's own sentence (db.connect)
        raise EvalkitError(f"{exc} ({LEDGER_ENV}=off runs without it)") from None
    except (OSError, sqlite3.Error) as exc:
        raise EvalkitError(f"cannot open the action ledger {path}: {exc} ({LEDGER_ENV}=off "
                           "runs without it)") from None


def _pauses(ledger: Any, env: Mapping[str, str]) -> Any:
    """Paused runs' checkpoints, in the ledger's database; None with the ledger off.

    Without a ledger nothing is saved and a resume needs no lease: it behaves as
    it did before checkpoints existed (``evalkit.runtime.pause``).
    """
    if ledger is None:
        return None
    from evalkit.runtime.pause import Pauses

    return Pauses(ledger.path, env)


def _settle(pauses: Any, settings: MissionSettings, outcome: RunOutcome, store: Any,
            lease: Any) -> str | None:
    """The run ended: save its pause or settle its lease; a sentence when that did not work.

    The run is over and recorded whatever happens here, so a checkpoint that could
    not be written is said, not raised: a resume then has no checkpoint to lease.
    """
    import sqlite3

    run_dir = store.path_of(outcome.run_id) if outcome.run_id else None
    try:
        return pauses.settle(settings, outcome, run_dir, lease)
    except (EvalkitError, OSError, sqlite3.Error) as exc:
        return f"note: the paused run's checkpoint was not saved: {exc}"


def _within(path: Path, folder: Path) -> bool:
    real, inside = os.path.realpath(path), os.path.realpath(folder)
    return real == inside or real.startswith(inside.rstrip(os.sep) + os.sep)


def _declarations(settings: MissionSettings, manifest: Any) -> Any:
    """The MCP scope declarations the plane applies: the skills', ``--mcp-scopes`` over them."""
    from evalkit.runtime.governance.mcpscopes import declarations, parse_flag

    return declarations(parse_flag(settings.mcp_scopes), manifest)


def _sandbox(choice: str | None, hidden: Sequence[Path] = ()) -> Any:
    """The sandbox tool subprocesses run in: bwrap where it works here, unless opted out;
    ``hidden``, the mission's governance state, is invisible inside it."""
    from evalkit.runtime.tools.sandbox import Bwrap, NoSandbox

    if choice == "none":
        return NoSandbox()
    problem = Bwrap.unavailable()
    if problem is None:
        return Bwrap(hide=hidden)
    if choice == "bwrap":
        raise EvalkitError(f"EVALKIT_SANDBOX=bwrap but {problem}; fix that or pass --unsandboxed")
    return NoSandbox()
