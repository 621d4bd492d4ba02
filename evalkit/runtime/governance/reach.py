"""What a mission's tools must never reach: the folders that judge and permit it.

The run store (what verdicts are derived from), the audit log, the approval
requests and the signing key. They default to the state folder outside any
mission root (``evalkit.store.state``), but an operator may point any of
them inside one (``EVALKIT_RUNS=.evalkit/runs``), so the tools are told
which folders to refuse by path (``fs`` and the code-editing tools) and to
hide by mount (the sandbox): the graded agent cannot read them, let alone
rewrite a pending request or an event it is judged by.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from evalkit.runtime.governance.approvals import approvals_root
from evalkit.runtime.governance.audit import audit_root
from evalkit.store.layout import runs_root
from evalkit.store.state import state_home


def governed_folders(environ: Mapping[str, str]) -> list[Path]:
    """Every folder of this mission's governance state, absolute, in a stable order."""
    found = [state_home(environ), runs_root(environ), audit_root(environ),
             approvals_root(environ)]
    return list(dict.fromkeys(Path(p).absolute() for p in found if p is not None))
