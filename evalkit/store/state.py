"""The state folder: where evalkit keeps what the graded agent must never touch.

The run store, the audit log, pending approvals and the signing key decide
verdicts and permissions, so they default to one folder outside any mission
root: ``$EVALKIT_HOME``, else ``$XDG_STATE_HOME/evalkit``, else
``~/.local/state/evalkit``. A mission's working directory is where the agent
may write; nothing that judges it lives there unless an operator puts it there,
and even then the tools hide it (``evalkit.runtime.governance.reach``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

HOME_ENV = "EVALKIT_HOME"

#: The folders of the state home, by what they hold.
RUNS, AUDIT, APPROVALS, KEYS, TRUSTED = "runs", "audit", "approvals", "keys", "trusted"


def state_home(environ: Mapping[str, str] | None = None) -> Path:
    """The state folder, absolute (made absolute from the current directory if given relative)."""
    env = os.environ if environ is None else environ
    chosen = env.get(HOME_ENV)
    if chosen:
        return Path(chosen).absolute()
    xdg = env.get("XDG_STATE_HOME")
    if xdg and os.path.isabs(xdg):  # the XDG spec: a relative value is ignored
        return Path(xdg) / "evalkit"
    home = env.get("HOME") or os.path.expanduser("~")
    return Path(home).absolute() / ".local" / "state" / "evalkit"


def state_path(name: str, environ: Mapping[str, str] | None = None) -> Path:
    """One folder of the state home (``RUNS``, ``AUDIT``, ...)."""
    return state_home(environ) / name
