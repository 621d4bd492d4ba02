"""``evalkit mission "OBJECTIVE" [flags]``: parse, build, call, print, exit code.

Every flag of ``contract.CLI_FLAGS`` is accepted here, because a program that
spawns a mission may rely on all of them. Flags whose feature has not landed
refuse with one sentence and exit 2 rather than being silently ignored: a
harness that asked for a gate and got an ungated run would be scoring a run
nobody asked for.

stdout is prose for a person (stderr when the stream itself goes to stdout);
the event sink is the only machine channel. Exit codes: 0 the mission ran
(whatever its outcome, a transport fault included: that is an infrastructure
failure for the scorer to count, the stream says it), 1 no event was written,
2 usage or a refusal to start, 3 the loop itself crashed (a bug in evalkit;
the stream still closed), 4 the endpoint refused the configuration (401, 403,
404, 400: a wrong key, model or URL) — the stream closed, and asking again
with the same flags cannot help, so the operator is told at once; 5 the run
store refused a write (a full disk): the mission ended there, incomplete with
a reason beginning 'recording failed:' where the sink could still take it,
and the recording lacks what came after.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from evalkit.contract import CLI_FLAGS
from evalkit.errors import EvalkitError
from evalkit.runtime.backends import CONFIGURATION

EXIT_RAN, EXIT_NO_EVENTS, EXIT_USAGE, EXIT_CRASHED, EXIT_CONFIGURATION = 0, 1, 2, 3, 4
EXIT_UNRECORDED = 5

_MEANING = {f["flag"]: f["meaning"] for f in CLI_FLAGS}

#: Parameter name -> flag, for the flags accepted now and refused until their issue lands.
NOT_YET = {
    "mcp_url": "--mcp-url",
}


def _opt(flag: str, **kwargs: Any) -> Any:
    """A click option for a contract flag, its help text taken from the contract."""
    return click.option(flag, help=_MEANING[flag], **kwargs)


@click.command("mission")
@click.argument("objective", nargs=-1)
@_opt("--events", metavar="SINK", envvar="EVALKIT_EVENTS")
@_opt("--control", metavar="SOURCE")
@_opt("--provider", metavar="NAME", envvar="EVALKIT_PROVIDER")
@_opt("--model", metavar="NAME", envvar="EVALKIT_MODEL")
@_opt("--api-base", metavar="URL", envvar="EVALKIT_API_BASE")
@_opt("--api-key", metavar="KEY", envvar="EVALKIT_API_KEY", show_envvar=False)
@_opt("--secret", metavar="NAME", multiple=True)
@_opt("--script", metavar="FILE")
@_opt("--no-stream", is_flag=True)
@_opt("--protocol", type=click.Choice(["json", "native"]), default="json")
@_opt("--mcp-stdio", metavar="CMD", multiple=True)
@_opt("--mcp-url", metavar="URL", multiple=True)
@_opt("--mcp-start-timeout", metavar="SECONDS", type=float)
@_opt("--mcp-call-timeout", metavar="SECONDS", type=float)
@_opt("--mcp-env", metavar="NAME[=VALUE]", multiple=True)
@_opt("--mcp-scopes", metavar="SERVER=SCOPE[,SCOPE]", multiple=True)
@_opt("--skill", metavar="PATH", multiple=True)
@_opt("--profile", metavar="NAME", envvar="EVALKIT_PROFILE")
@_opt("--grant", metavar="SCOPE", multiple=True)
@_opt("--unsandboxed", is_flag=True)
@_opt("--gate-tool", metavar="NAME", multiple=True)
@_opt("--approval", metavar="ID")
@_opt("--gate-wait", metavar="SECONDS", type=float)
@_opt("--mission-steps", metavar="N", type=int, default=0)
@_opt("--mission-seconds", metavar="S", type=float)
@_opt("--max-tokens", metavar="N", type=int)
@_opt("--max-cost", metavar="AMOUNT", type=float)
@_opt("--pricing", metavar="FILE", envvar="EVALKIT_PRICING")
@_opt("--request-timeout", metavar="SECONDS", type=float, envvar="EVALKIT_REQUEST_TIMEOUT")
@_opt("--stream-idle-timeout", metavar="SECONDS", type=float,
      envvar="EVALKIT_STREAM_IDLE_TIMEOUT")
@_opt("--no-supervisor", is_flag=True)
@_opt("--swarm", is_flag=True)
@_opt("--swarm-parallel", metavar="N", type=int)
@_opt("--cassette", metavar="PATH")
@_opt("--record-mode", metavar="MODE")
@_opt("--tools", metavar="recorded|live")
@_opt("--resume", metavar="RUN")
@_opt("--replay", metavar="RUN")
@click.pass_context
def mission_command(ctx: click.Context, objective: tuple[str, ...], **flags: Any) -> None:
    """Run an agent mission: OBJECTIVE -> model -> tools -> answer, streamed and recorded."""
    from evalkit.runtime.console import Console, diagnostic

    try:
        settings = _settings(objective, flags)
        prose = sys.stderr if settings.events in ("-", "fd:1") else sys.stdout
        from evalkit.runtime.governance.approvals import GateNotice
        from evalkit.runtime.mission import launch

        launched = launch(settings, observer=GateNotice(Console(prose)),
                          notice=lambda said: click.echo(diagnostic(said), err=True))
    except EvalkitError as exc:
        click.echo(diagnostic(f"Error: {exc.message}"), err=True)
        ctx.exit(exc.exit_code)
    outcome = launched.outcome
    if outcome.records == 0 or (not launched.recorded and settings.events
                                and launched.sink_errors >= outcome.records):
        why = "the event sink refused every write" if outcome.records else outcome.reason
        click.echo(diagnostic(f"Error: no event was written: {why}"), err=True)
        ctx.exit(EXIT_NO_EVENTS)
    if launched.sink_errors:
        click.echo(diagnostic(f"warning: {launched.sink_errors} record(s) could not be written "
                              f"to {settings.events}; the run store has them"), err=True)
    if launched.notes:
        from evalkit.runtime.replay.session import summary_lines

        for line in summary_lines(launched.notes):
            click.echo(diagnostic(line), file=prose)
    if "CassetteMiss" in (outcome.reason or ""):
        click.echo(diagnostic(f"Error: {outcome.reason}"), err=True)
    if outcome.unrecorded is not None:
        click.echo(diagnostic(f"Error: the run could not be recorded whole: "
                              f"{outcome.unrecorded}"), err=True)
        ctx.exit(EXIT_UNRECORDED)
    if outcome.fault == CONFIGURATION and not outcome.error:
        click.echo(diagnostic(f"Error: {outcome.reason}"), err=True)
        ctx.exit(EXIT_CONFIGURATION)
    if outcome.error:
        click.echo(diagnostic(f"internal error in the mission loop (the stream was closed "
                              f"incomplete):\n{outcome.error}"), err=True)
        ctx.exit(EXIT_CRASHED)
    ctx.exit(EXIT_RAN)


def _settings(objective: tuple[str, ...], flags: dict[str, Any]) -> Any:
    """Flags -> ``MissionSettings``; refuses the flags whose features have not landed."""
    from evalkit.runtime.mission import MissionSettings

    for name, flag in NOT_YET.items():
        if flags.get(name) not in (None, False, ()):
            raise EvalkitError(f"{flag} is not available yet.")
    sandbox = "none" if flags["unsandboxed"] else (os.environ.get("EVALKIT_SANDBOX") or None)
    provider = flags["provider"] or ("scripted" if flags["script"] else "openai")
    return MissionSettings(
        objective=" ".join(objective), events=flags["events"], provider=provider,
        model=flags["model"], api_base=flags["api_base"], api_key=flags["api_key"],
        secrets=tuple(flags["secret"]),
        script=flags["script"], stream=not flags["no_stream"], protocol=flags["protocol"],
        mcp_stdio=tuple(flags["mcp_stdio"]), mcp_scopes=tuple(flags["mcp_scopes"]),
        mcp_env=tuple(flags["mcp_env"]), mcp_start_timeout=flags["mcp_start_timeout"],
        mcp_call_timeout=flags["mcp_call_timeout"],
        request_timeout=flags["request_timeout"],
        stream_idle_timeout=flags["stream_idle_timeout"],
        steps=flags["mission_steps"],
        seconds=flags["mission_seconds"], max_tokens=flags["max_tokens"],
        max_cost=flags["max_cost"], pricing=flags["pricing"],
        profile=flags["profile"], sandbox=sandbox,
        skills=tuple(flags["skill"]), grants=tuple(flags["grant"]),
        gate_tools=tuple(flags["gate_tool"]), approval=flags["approval"],
        gate_wait=flags["gate_wait"], control=flags["control"],
        supervisor=not flags["no_supervisor"], swarm=flags["swarm"],
        swarm_parallel=1 if flags["swarm_parallel"] is None else flags["swarm_parallel"],
        replay=flags["replay"], resume=flags["resume"],
        tools=flags["tools"], cassette=flags["cassette"], record_mode=flags["record_mode"])
