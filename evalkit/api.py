"""The library's entry points, which the CLI's commands call too (``from evalkit import …``).

Each takes what a program has (a path, or a loaded suite) and answers with
the objects the layers below define; a problem the caller can fix is an
``EvalkitError`` with one sentence, as the CLI prints it. Nothing here
touches the process's global state: no output, no collector switched off.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.errors import EvalkitError

if TYPE_CHECKING:
    import pandas as pd

    from evalkit.eval.check import CheckResult
    from evalkit.eval.score import ScoreReport
    from evalkit.eval.suite import Suite
    from evalkit.store.ingest import IngestResult
    from evalkit.store.seal import Checker

#: Told of each score report left out of the verdicts table, one sentence each.
Warn = Callable[[str], None]


def check(suite: str | Path | Suite, *, strict: bool = False) -> CheckResult:
    """Whether a suite can be graded (``.ok``), with every problem in one sentence each.

    A file that is not a suite at all raises ``SuiteError`` (every loading problem,
    and what check finds in the part that loaded). Under 8 missions the split, the
    claimed capabilities and the reader's rubric are ``.warnings``, unless ``strict``.
    """
    from evalkit.eval.check import check_path, check_suite
    from evalkit.eval.suite import Suite

    return check_suite(suite, strict=strict) if isinstance(suite, Suite) \
        else check_path(suite, strict=strict)


def score(suite: str | Path | Suite, *, runs: str | Path | None = None,
          mapping: Mapping[str, str | Path] | None = None, dataset: str | Path | None = None,
          split: str = "all", verify: bool = True,
          trust: Sequence[str | Path] = (), require_signed: bool = False,
          checker: Checker | None = None, pricing: str | Path | None = None) -> ScoreReport:
    """Verdicts and KPIs for a suite's missions, from recordings: ``runs`` (a folder of
    mission folders), ``mapping`` (mission key -> run directory or events file), or a
    ``dataset`` written by ``ingest``.

    A suite given by path is checked first and refused (exit 1) when it cannot be
    graded. Every stream is checked against its seal unless ``verify`` is False:
    ``trust`` adds public keys whose seals count, ``require_signed`` fails unsigned
    streams, ``checker`` (an ``evalkit.store.seal.Checker``) replaces both.
    ``pricing`` (a pricing file) prices every run again from its recorded tokens.
    """
    from evalkit.eval.check import gradeable
    from evalkit.eval.score import beside
    from evalkit.eval.score import score as score_suite
    from evalkit.eval.suite import Suite

    if not isinstance(suite, Suite):
        suite = gradeable(suite, refusing="nothing scored")
    if checker is None and verify and dataset is None and (trust or require_signed):
        from evalkit.store.seal import Checker

        where = beside(Path(runs) if runs is not None else None, mapping or {})
        checker = Checker.for_scoring(where, [Path(t) for t in trust],
                                      require_signed=require_signed)
    prices = None
    if pricing is not None:
        from evalkit.pricing import load

        prices = load(pricing)
    return score_suite(suite, runs=runs, mapping=mapping, dataset=dataset, split=split,
                       verify=verify, checker=checker, pricing=prices)


def ingest(folder: str | Path, out: str | Path | None = None, *,
           warn: Warn | None = None) -> IngestResult:
    """Every run directory under ``folder`` (and events file in it) into a Parquet dataset
    (default ``folder/dataset.parquet``), with the verdicts of the score reports there."""
    from evalkit.eval.tables import ingest as ingest_runs

    folder = Path(folder)
    if not folder.is_dir():
        why = "is not a folder of run directories" if folder.exists() else "does not exist"
        raise EvalkitError(f"{folder} {why}")
    return ingest_runs(folder, Path(out) if out is not None else None, gather=_verdicts(warn))


def query(path: str | Path, sql: str, *, warn: Warn | None = None
          ) -> tuple[list[str], list[tuple[Any, ...]]]:
    """(column names, rows) of one read-only SQL question over a dataset, or over a folder
    of runs and score reports (ingested into a temporary dataset first)."""
    from evalkit.eval.tables import query as run_query

    return run_query(Path(path), sql, gather=_verdicts(warn))


def runs_df(path: str | Path) -> pd.DataFrame:
    """The ``runs`` table (one row per stream) of a dataset, or of a folder of runs."""
    return _frame(Path(path), "runs")


def verdicts_df(path: str | Path) -> pd.DataFrame:
    """The ``verdicts`` table (one row per verdict of every score report, every KPI a
    column) of a dataset, or of a folder of runs and reports."""
    return _frame(Path(path), "verdicts")


def _verdicts(warn: Warn | None) -> Any:
    from evalkit.report.verdict_table import VerdictTable

    return VerdictTable(warn=warn)


def _frame(path: Path, table: str) -> pd.DataFrame:
    """A table as pandas, with pyarrow's types (lists stay lists, nulls stay null)."""
    from evalkit.eval.tables import find_dataset

    found = find_dataset(path)
    if found is not None:
        return _read(found, table)
    with tempfile.TemporaryDirectory(prefix="evalkit-dataset-") as scratch:
        result = ingest(path, Path(scratch) / "dataset.parquet")
        if not result.runs and not any(result.gathered.values()):
            raise EvalkitError(f"no dataset and no runs at {path} (no dataset.json, and no run "
                               "directory with an events file, nor a score report, below it)")
        return _read(result.out, table)


def _read(dataset: Path, table: str) -> pd.DataFrame:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from evalkit.eval.tables import check_dataset

    check_dataset(dataset)  # a dataset of another schema is one sentence, not odd columns
    file = dataset / f"{table}.parquet"
    try:
        if file.is_file():
            data = pq.read_table(file)
        else:  # a dataset of runs only: no score report was there to gather
            data = _schema(table).empty_table()
    except (OSError, pa.ArrowException) as exc:
        raise EvalkitError(f"cannot read the dataset {dataset}: {file.name}: {exc}; "
                           "re-create it with `evalkit ingest`") from None
    return data.to_pandas(types_mapper=pd.ArrowDtype)


def _schema(table: str) -> Any:
    from evalkit.report.verdict_table import VERDICTS, VERDICTS_SCHEMA
    from evalkit.store.dataset import SCHEMAS

    return VERDICTS_SCHEMA if table == VERDICTS else SCHEMAS[table]


__all__ = ["check", "ingest", "query", "runs_df", "score", "verdicts_df"]
