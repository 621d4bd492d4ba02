"""The files ``run``, ``measure`` and ``score --report`` write, and their formats.

One owner for the names and format words that the harness writes and that
the report, the diff, the verdicts table and the corpus read back
(docs/MEASURE.md, "Folders"); the run directory inside each mission folder
is ``evalkit.store.layout``'s.
"""

from __future__ import annotations

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
CAPTURE_FILE, STDOUT_FILE, STDERR_FILE = "command.json", "stdout.txt", "stderr.txt"
