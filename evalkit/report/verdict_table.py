"""The verdicts of the score reports kept beside the runs, as a table DuckDB reads.

``run``, ``measure`` and ``score --report`` leave a ``report.json`` holding every
verdict (reasons, checks, KPIs) beside the runs they scored. ``evalkit ingest``
and ``evalkit sql`` gather them into ``verdicts``: one row per verdict of each
report, with the KPIs as typed columns, and for a report of a measure matrix
the configuration (``config``) and repeat (``rep``) it belongs to. A question
across missions, repeats and configurations — which missions fail under
``swarm`` and pass under ``direct`` — is then one SELECT, and the Parquet file
loads into pandas or polars as it is.

The table says what the reports say; nothing is judged again here (``score``
is the one judge). A report written later is ingested again, like the runs.
A ``report.json`` that evalkit did not write is not a score report and is
left out without a word; one of evalkit's that cannot be read (cut short,
edited into another shape) is left out with one sentence saying why, and
the rest are still gathered.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from evalkit.errors import EvalkitError
from evalkit.eval.harness_files import MATRIX_FILE, REPORT_FILE, begins_as_ours
from evalkit.eval.verdict import KPI_NAMES
from evalkit.report.folders import read_matrix, read_report
from evalkit.store.layout import as_text
from evalkit.store.values import flag, number, text

VERDICTS = "verdicts"
#: Bump when a column's meaning changes.
VERDICTS_VERSION = 1

_S, _I, _F, _B, _L = pa.string(), pa.int64(), pa.float64(), pa.bool_(), pa.list_(pa.string())

#: Each KPI's column type. Counts evalkit makes itself are whole numbers; numbers the
#: stream carries are DOUBLE, as in the dataset's other tables (a column has one type).
KPI_TYPES: dict[str, pa.DataType] = {
    "records": _I, "outcome": _S, "steps": _F, "max_steps": _F, "elapsed_s": _F,
    "budget": _S, "tokens": _F, "prompt_tokens": _F, "completion_tokens": _F,
    "model_calls": _F, "cost": _F, "tools": _L, "tool_calls": _I, "refusals": _I,
    "reply_rejected": _I, "staged": _B, "gate_requested": _I, "injected": _I,
    "human_interventions": _I, "grounding_ran": _B, "grounded": _B, "verified": _B,
    "repairs": _F, "answer_chars": _I, "protocol": _S, "profile": _S, "sandbox": _S,
    "run_id": _S, "skipped_lines": _I, "stagnation": _S, "stagnation_step": _F,
}

#: The columns before the KPIs: where the verdict was read, then the verdict itself.
_HEAD: tuple[tuple[str, pa.DataType], ...] = (
    ("report", _S), ("config", _S), ("rep", _I), ("suite", _S),
    ("key", _S), ("flag", _S), ("split", _S), ("passed", _B), ("missing", _B),
    ("category", _S), ("infra", _S), ("reasons", _L), ("checks", _L),
    ("must", _L), ("must_not", _L), ("source", _S),
)

VERDICTS_SCHEMA = pa.schema([*_HEAD, *((name, KPI_TYPES[name]) for name in KPI_NAMES)])

#: What each column before the KPIs says (docs/TABLES.md); a KPI column is the verdict's
#: KPI of that name, as report.json's ``kpis`` hold it.
MEANINGS: dict[str, str] = {
    "report": "the score report the verdict was read from, relative to the ingested folder",
    "config": "the measure matrix row the report belongs to (null outside a matrix)",
    "rep": "which repeat of that row",
    "suite": "the suite's name",
    "key": "the mission's key", "flag": "the mission's flag", "split": "`train` or `test`",
    "passed": "whether the mission passed", "missing": "whether its run was missing",
    "category": "the failure taxonomy's category, where `run` added it",
    "infra": "the infrastructure failure, where `run` added it",
    "reasons": "why it failed, one sentence each", "checks": "the checks that failed",
    "must": "what a reader must find in the answer",
    "must_not": "what a reader must not find in it",
    "source": "the stream the verdict was judged from",
}


def _whole(value: Any) -> int | None:
    found = number(value)
    return found if type(found) is int and -2**63 <= found < 2**63 else None


def _double(value: Any) -> float | None:
    found = number(value)
    try:
        return float(found) if found is not None else None
    except OverflowError:  # an integer past DOUBLE's range: no column value says it
        return None


def _texts(value: Any) -> list[str] | None:
    if not isinstance(value, list):
        return None
    return [item if isinstance(item, str) else text(item) for item in value]  # type: ignore[misc]


#: How a value of each column type is read: as the dataset reads a stream's values.
_READ: dict[pa.DataType, Callable[[Any], Any]] = {
    _S: text, _I: _whole, _F: _double, _B: flag, _L: _texts,
}


class VerdictTable:
    """The ``verdicts`` table, gathered by ingest (a ``store.ingest.Gathering``).

    ``warn`` is told, in one sentence each, of every report of evalkit's left out.
    """

    names = frozenset({REPORT_FILE, MATRIX_FILE})
    schemas = {VERDICTS: VERDICTS_SCHEMA}
    manifest = {VERDICTS: {"version": VERDICTS_VERSION}}

    def __init__(self, warn: Callable[[str], None] | None = None) -> None:
        self.warn = warn or (lambda sentence: None)

    def __call__(self, root: Path, files: list[str]) -> list[tuple[str, pa.Table]]:
        placed = self._matrices([p for p in files if os.path.basename(p) == MATRIX_FILE])
        tables = [VERDICTS_SCHEMA.empty_table()]
        for path in files:
            if os.path.basename(path) != REPORT_FILE:
                continue
            shown = as_text(path)
            report = self._report(Path(path), shown)
            if report is None:
                continue
            where = as_text(os.path.relpath(path, root).replace(os.sep, "/"))
            config, rep = placed.get(os.path.normpath(path), (None, None))
            try:
                tables.append(_table(report, where, config, rep))
            except UnicodeEncodeError:
                self.warn(f"left out {shown}: it holds text that is not Unicode "
                          "(a lone surrogate escape), which a Parquet string cannot hold")
        return [(VERDICTS, pa.concat_tables(tables))]

    def _report(self, path: Path, shown: str) -> dict[str, Any] | None:
        """The score report at ``path``; None when it is not one of evalkit's, or unreadable."""
        try:
            if not _begins_as(path, REPORT_FILE):
                return None
            return read_report(path)
        except OSError as exc:
            self.warn(f"left out {shown}: {exc.strerror or exc}")
        except EvalkitError as exc:
            self.warn(f"left out {exc}")
        return None

    def _matrices(self, paths: list[str]) -> dict[str, tuple[str, int]]:
        """Each report of a measure matrix (its normalised path) -> (row name, repeat).

        A damaged matrix leaves its reports unplaced (``config`` and ``rep`` null), not out.
        """
        placed: dict[str, tuple[str, int]] = {}
        for path in paths:
            try:
                if not _begins_as(Path(path), MATRIX_FILE):
                    continue
                matrix = read_matrix(Path(path))
            except OSError as exc:
                self.warn(f"cannot place the reports of {as_text(path)} in its matrix: "
                          f"{exc.strerror or exc}")
                continue
            except EvalkitError as exc:
                self.warn(f"cannot place the reports of a matrix in it: {exc}")
                continue
            folder = os.path.dirname(path)
            for row in matrix["rows"]:
                for n, rep in enumerate(row.get("reps") or (), start=1):
                    placed[os.path.normpath(os.path.join(folder, rep, REPORT_FILE))] = \
                        (row["name"], n)
        return placed


def _begins_as(path: Path, name: str) -> bool:
    """Whether the file at ``path`` begins as evalkit writes a file called ``name``."""
    with open(path, "rb") as file:
        return begins_as_ours(name, file.read(4096))


def _table(report: dict[str, Any], where: str, config: str | None, rep: int | None
           ) -> pa.Table:
    """One report's verdicts as rows (``read_report`` has checked their shape)."""
    verdicts = report["verdicts"]
    n = len(verdicts)
    readers = [v.get("needs_reader") or {} for v in verdicts]
    columns: dict[str, list[Any]] = {
        "report": [where] * n, "config": [config] * n, "rep": [rep] * n,
        "suite": [report.get("suite")] * n,
        "key": [v["key"] for v in verdicts], "flag": [v["flag"] for v in verdicts],
        "split": [v["split"] for v in verdicts], "passed": [v["passed"] for v in verdicts],
        "missing": [v["missing"] for v in verdicts],
        "category": [v.get("category") for v in verdicts],
        "infra": [v.get("infra") for v in verdicts],
        "reasons": [v["reasons"] for v in verdicts],
        "checks": [v.get("checks") or [] for v in verdicts],
        "must": [r.get("must") or [] for r in readers],
        "must_not": [r.get("must_not") or [] for r in readers],
        "source": [v.get("source") for v in verdicts],
    }
    arrays = [pa.array(columns[name], type) for name, type in _HEAD]
    arrays += [_column(list(values), KPI_TYPES[name])
               for name, values in zip(KPI_NAMES, _kpi_columns(verdicts), strict=True)]
    return pa.table(arrays, schema=VERDICTS_SCHEMA)


def _kpi_columns(verdicts: list[dict[str, Any]]) -> list[tuple[Any, ...]] | Any:
    """Each KPI's values, in ``KPI_NAMES`` order, one sequence per KPI (an absent one: null).

    ``score`` writes every verdict's KPIs in that order, so the usual report is turned
    on its side in C (``zip``); any other is read name by name.
    """
    kpis = [v["kpis"] for v in verdicts]
    if not kpis:
        return [() for _ in KPI_NAMES]
    if all(list(k) == _KPI_ORDER for k in kpis):
        return zip(*[k.values() for k in kpis], strict=True)
    return [tuple(k.get(name) for k in kpis) for name in KPI_NAMES]


_KPI_ORDER = list(KPI_NAMES)


def _column(values: list[Any], type: pa.DataType) -> pa.Array:
    """``values`` read as a column of ``type`` (``_READ``): at 100k verdicts, reading each
    value costs seconds, so a column whose values all have the type already goes to
    Arrow as it is (``_AS_IS``), which reads them exactly as ``_READ`` would."""
    if all(map(_AS_IS[type], values)):
        try:
            return pa.array(values, type)
        except (pa.ArrowInvalid, OverflowError):  # an integer past 64 bits: read below
            pass
    return pa.array(map(_READ[type], values), type)


def _finite(value: Any) -> bool:
    return value - value == 0  # False for NaN and the infinities


#: Whether a value is one Arrow takes as ``_READ`` reads it (bool is an int to Python,
#: not to a column; an integral float is read as an int; NaN and infinities as null).
_AS_IS: dict[pa.DataType, Callable[[Any], bool]] = {
    _S: lambda v: v is None or type(v) is str,
    _I: lambda v: v is None or type(v) is int,
    _F: lambda v: v is None or type(v) is int or type(v) is float and _finite(v),
    _B: lambda v: v is None or type(v) is bool,
    _L: lambda v: v is None or type(v) is list and all(type(i) is str for i in v),
}


__all__ = ["KPI_TYPES", "VERDICTS", "VERDICTS_SCHEMA", "VerdictTable"]
