"""Tool planes evalkit ships for its own suites.

``evalkit.planes.stub`` is a deterministic MCP tool server over stdio
(``python -m evalkit.planes.stub``): the plane the in-repo suite runs
against, so every capability of the runtime can be exercised offline.
"""

from __future__ import annotations

import shlex
import sys

STUB_MODULE = "evalkit.planes.stub"


def stub_command(python: str | None = None) -> str:
    """The ``--mcp-stdio`` command that starts the stub server with this (or the given) Python."""
    return shlex.join([python or sys.executable, "-m", STUB_MODULE])
