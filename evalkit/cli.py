"""The ``evalkit`` command: parse, call the library, print, exit code.

Commands are imported only when invoked, so ``evalkit score`` never pays for
the runtime, DuckDB or an SDK it does not use. Exit codes (see EVAL.md):
0 ok, 1 failures found (a mission failed, a suite is not gradeable),
2 usage error or unreadable input, 3 an internal error in evalkit itself.
"""

from __future__ import annotations

import errno
import importlib
import io
import os
import sys
from typing import Any

import click

from evalkit import __version__

EXIT_OK, EXIT_FAILURES, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
#: What a program killed by SIGPIPE exits with: the reader of its output went away.
#: Writing failed because the disk, not evalkit, gave out.
_NO_ROOM = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}

#: command name -> ("module:attribute" of its click command, one-line help).
COMMANDS: dict[str, tuple[str, str]] = {
    "contract": ("evalkit.commands.contract:contract", "Print the mission stream contract."),
    "conform": ("evalkit.commands.conform:conform",
                "Check that an agent speaks the mission stream contract."),
    "check": ("evalkit.commands.scoring:check", "Refuse a suite that cannot be graded."),
    "score": ("evalkit.commands.scoring:score", "Verdicts and KPIs from recorded streams."),
    "verify": ("evalkit.commands.verify:verify", "Check recordings against their seals."),
    "ingest": ("evalkit.commands.tables:ingest", "Turn run directories into a Parquet dataset."),
    "sql": ("evalkit.commands.tables:sql", "Query runs with DuckDB."),
    "mission": ("evalkit.runtime.command:mission_command", "Run a governed agent mission."),
    "approvals": ("evalkit.commands.approvals:approvals", "List and decide gated tool requests."),
    "keys": ("evalkit.commands.keys:keys", "Rotate and list the keys sealing approval checkpoints."),
    "gate": ("evalkit.commands.gate:gate",
             "Govern another framework's tool calls: a sidecar over stdio."),
    "replay": ("evalkit.commands.replay:replay", "Re-run a recording through the loop, no model."),
    "regrade": ("evalkit.commands.replay:regrade", "Replay runs under a new skill; or decide them again under a new policy."),
    "runs": ("evalkit.commands.runs:runs", "List and show recorded runs: records, events, ends."),
    "run": ("evalkit.commands.run:run", "Spawn the agent once per mission, capture, score."),
    "measure": ("evalkit.commands.run:measure", "A suite over a configuration matrix, with stats."),
    "record-corpus": ("evalkit.commands.corpus:record_corpus",
                      "Regenerate recordings/ from the suites' scripted agents."),
    "report": ("evalkit.commands.report:report", "Render an HTML KPI report."),
    "diff": ("evalkit.commands.report:diff", "Which verdicts flipped between two scorings."),
    "judge": ("evalkit.commands.judge:judge", "Grade answers with a model judge, once; recorded."),
    "doctor": ("evalkit.commands.doctor:doctor", "What this machine can run, with fixes."),
    "export": ("evalkit.commands.export:export",
               "Write runs as Inspect AI eval logs or OpenTelemetry GenAI spans."),
    "import": ("evalkit.commands.otel:import_", "Turn OpenTelemetry GenAI traces into runs."),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        entry = COMMANDS.get(name)
        if entry is None:
            return None
        from evalkit.extras import require_command

        # Before the import that a missing extra would break.
        require_command(name)
        module, _, attr = entry[0].partition(":")
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Listing must not import every command (and the SDKs behind them).
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name][1]) for name in self.list_commands(ctx)])

    def main(self, *args: Any, **kwargs: Any) -> Any:
        # Before click prints anything, --help and --version included.
        _stand_in_for_closed_streams()
        _whole_writes_to_stdout()
        return super().main(*args, **kwargs)

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        # `evalkit --help > /dev/full` writes here, before any command is invoked.
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.exceptions.Exit:
            _flush_stdout()
            raise
        except OSError as exc:
            raise _output_failed(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        from evalkit.errors import EvalkitError

        try:
            try:
                result = super().invoke(ctx)
            except click.exceptions.Exit:
                _flush_stdout()
                raise
            # What is still buffered fails here, where it can be said, not at exit.
            _flush_stdout()
            return result
        except OSError as exc:
            raise _output_failed(exc) from None
        except EvalkitError as exc:
            click.echo(f"Error: {exc.message}", err=True)
            ctx.exit(exc.exit_code)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except Exception as exc:  # a bug in evalkit, never the user's input
            raise _internal(exc) from None


def _flush_stdout() -> None:
    """Flush stdout, so a write the disk refuses fails while it can still be reported."""
    try:
        sys.stdout.flush()
    except ValueError:  # closed under us: nothing more can go there
        pass


def _output_failed(exc: OSError) -> click.exceptions.Exit:
    """How a command whose output could not be written ends: the surroundings' fault,
    one sentence and exit 2 — a reader that went away (``| head``) as much as a disk that
    refused the output (full, over quota, past the file size limit), so a pipeline never
    mistakes a cut answer for a whole one. Any other OSError is not about the output: a bug.
    """
    if isinstance(exc, BrokenPipeError) or exc.errno == errno.EPIPE:
        why = "the reader closed the pipe before the output ended"
    elif exc.errno in _NO_ROOM:
        why = str(exc.strerror)
    else:
        return _internal(exc)
    # Keep Python from failing again flushing the dead output at exit.
    _discard_stdout()
    click.echo(f"Error: cannot write the output: {why}", err=True)
    return click.exceptions.Exit(EXIT_USAGE)


def _internal(exc: Exception) -> click.exceptions.Exit:
    """Exit 3 for a bug in evalkit: one line, the traceback only with EVALKIT_DEBUG."""
    if os.environ.get("EVALKIT_DEBUG"):
        raise exc
    click.echo(f"internal error in evalkit: {type(exc).__name__}: {exc} "
               "(set EVALKIT_DEBUG=1 for the traceback)", err=True)
    return click.exceptions.Exit(EXIT_INTERNAL)


def _stand_in_for_closed_streams() -> None:
    """A stream closed by the caller (``evalkit score … >&-``) is output thrown away,
    not an error: what the command writes to it goes nowhere."""
    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115


class _WholeWrites(io.RawIOBase):
    """fd 1, where every write is finished or fails.

    CPython's unbuffered writer (``PYTHONUNBUFFERED=1``, ``-u``) takes a short
    write as done: a disk with a little room left takes the first part of the
    output and the rest is dropped, so ``contract > file`` exited 0 with the file
    cut short; a long write into a pipe whose reader left half way ends the same
    way (``evalkit sql … | head`` lost its output and exited 0). Here what the
    kernel did not take is written again, so the refusal comes as an error, and
    a pipe's worth at a time, so the first write after a reader left fails.
    """

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd = fd

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        total = len(view)
        while view:
            view = view[os.write(self.fd, view[:1 << 16]):]
        return total


def _whole_writes_to_stdout() -> None:
    """Put ``_WholeWrites`` under the process's own stdout, whatever file it is (not a
    terminal, whose writes are whole, nor a stdout a caller replaced, such as a
    test's capture)."""
    if sys.stdout is not sys.__stdout__ or sys.stdout is None:
        return
    try:
        if sys.stdout.isatty():
            return
        os.fstat(sys.stdout.fileno())
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError):
        return
    raw = _WholeWrites(sys.stdout.fileno())
    # As Python set it up: unbuffered (PYTHONUNBUFFERED, -u) is a raw binary layer.
    buffered = isinstance(getattr(sys.stdout, "buffer", None), io.BufferedIOBase)
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(raw) if buffered else raw,  # type: ignore[arg-type]
                                  encoding=sys.stdout.encoding, errors=sys.stdout.errors,
                                  line_buffering=sys.stdout.line_buffering,
                                  write_through=getattr(sys.stdout, "write_through", False))


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so what is still buffered is dropped, not flushed again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="evalkit")
def main() -> None:
    """Evaluate and replay LLM agent missions from their recordings."""


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
