"""The files ``run``, ``measure`` and ``score --report`` write: names, formats, first bytes.

One owner for the names and format words that the harness writes and that
the report, the diff, the verdicts table and the corpus read back
(docs/MEASURE.md, "Folders"); the run directory inside each mission folder
is ``evalkit.store.layout``'s.
"""

from __future__ import annotations

from evalkit.store.layout import CAPTURE_FILE as CAPTURE_FILE  # re-exported: read here too

#: A score report (``ScoreReport.to_dict()``) and its Markdown.
REPORT_FILE, REPORT_MD = "report.json", "report.md"
REPORT_FORMAT, REPORT_VERSION = "evalkit-score", 1

#: A measure matrix: rows, provenance and statistics, and its Markdown.
MATRIX_FILE, MATRIX_MD = "matrix.json", "matrix.md"
MATRIX_FORMAT, MATRIX_VERSION = "evalkit-matrix", 1

#: A run folder's provenance.
RUN_FILE = "run.json"
RUN_FORMAT, RUN_VERSION = "evalkit-run", 1

#: Beside each mission's stream: how the agent was spawned and how it ended,
#: and what it printed (scrubbed).
#: (``CAPTURE_FILE`` is named in ``evalkit.store.layout``: ingest reads it too.)
STDOUT_FILE, STDERR_FILE = "stdout.txt", "stderr.txt"

#: How the first bytes of each file read when evalkit wrote it: (how it starts, what
#: its first 4 KB hold). The formats come first in the JSON evalkit writes.
_HEADS = {REPORT_FILE: (b"{", f'"format": "{REPORT_FORMAT}"'.encode()),
          REPORT_MD: (b"# Suite `", "\n**Overall** \u2014 ".encode()),
          MATRIX_FILE: (b"{", f'"format": "{MATRIX_FORMAT}"'.encode())}


def begins_as_ours(name: str, head: bytes) -> bool:
    """Whether a file called ``name`` (report.json, report.md or matrix.json) whose
    first 4 KB are ``head`` begins as evalkit writes it."""
    starts, holds = _HEADS[name]
    return head.startswith(starts) and holds in head
