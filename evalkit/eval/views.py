"""The DuckDB views `evalkit sql` adds over a dataset's tables, so nobody filters copies.

A folder written by `evalkit run` holds each run twice (the stream the harness
captured and the run store's copy, ``source`` says which), and the score reports
under a folder may judge a mission more than once (re-scored, or scored again
from a later run). The views keep one of each: a question about runs or verdicts
is asked of ``runs_latest`` or ``verdicts_latest`` without knowing any of that.
Each is plain SQL over the tables, shown in docs/TABLES.md as it is run.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class View:
    """A view: its name, the tables it reads (made only when all are there), its SQL."""

    name: str
    reads: tuple[str, ...]
    meaning: str
    sql: str


VIEWS: tuple[View, ...] = (
    View("runs_latest", ("runs",),
         "each run once: the rows sharing a `run_id` are copies of one run, shown by the "
         "capture (the stream `score` reads) when there is one, else by the store's copy; "
         "a stream without a run id is its own run",
         "SELECT * FROM runs QUALIFY row_number() OVER (PARTITION BY coalesce(run_id, "
         "events_path) ORDER BY source = 'capture' DESC, events_path) = 1"),
    View("events_latest", ("runs", "events"),
         "the records of the runs in `runs_latest`, each record once",
         "SELECT * FROM events WHERE events_path IN (SELECT events_path FROM runs_latest)"),
    View("verdicts_latest", ("runs", "verdicts"),
         "one verdict per mission (suite, config, rep, key): the verdict of the run that "
         "started last (by `runs.ts`); between verdicts of one run (a re-score) or of runs "
         "with no recorded start, the one whose report path sorts last",
         "SELECT v.* FROM verdicts v LEFT JOIN (SELECT run_id, max(ts) AS started FROM runs "
         "WHERE run_id IS NOT NULL GROUP BY run_id) r ON v.run_id = r.run_id "
         "QUALIFY row_number() OVER (PARTITION BY v.suite, v.config, v.rep, v.key "
         "ORDER BY r.started DESC NULLS LAST, v.report DESC) = 1"),
)
