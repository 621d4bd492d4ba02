"""``evalkit`` commands run in this process, answered as a spawn of them would be."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from click.testing import CliRunner

from evalkit.cli import main


def in_process(args: Sequence[str], *, cwd: Path | None = None,
               env: Mapping[str, str | None] | None = None) -> subprocess.CompletedProcess[str]:
    """``evalkit ARGS`` through click's runner, in ``cwd`` and with ``env`` laid over this
    process's environment (None unsets a name): its exit code, stdout and stderr. An
    exception the command did not turn into an exit is raised here, so a crash fails the
    test instead of reading as an exit code."""
    before = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        result = CliRunner().invoke(main, list(args), env=dict(env) if env else None)
    finally:
        os.chdir(before)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout,
                                       result.stderr)
