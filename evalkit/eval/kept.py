"""A dataset's kept summaries, found by mission and decoded a row group at a time.

For the shares of a large suite (``evalkit.report.fanout``), which ask for
their missions' summaries one by one. Ingest writes the table in the order
it walked the run folders, so each row group holds a narrow range of events
paths, and the file's footer says which (Parquet's min and max statistics).
A mission's rows are then found from the footer alone: the groups whose
range can hold ``KEY`` or ``KEY/...``, decoded when first asked for. Nothing
is read before the fan-out forks, and each share decodes only the groups its
own missions are in.

A table whose groups' ranges overlap, or that has no statistics, is indexed
whole instead: every path read up front, which costs a second on one core
at a million runs.
"""

from __future__ import annotations

import bisect
import itertools
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from evalkit.eval.summary import RunSummary
from evalkit.eval.tables import SUMMARIES, _stored_summary
from evalkit.store.layout import resolve_relative, taken_alone

if TYPE_CHECKING:
    import pyarrow.parquet as pq

class _Group:
    """One row group, decoded: its paths, their rows by mission folder, its summaries."""

    __slots__ = ("paths", "rows", "data", "offsets")

    def __init__(self, file: pq.ParquetFile, group: int) -> None:
        table = file.read_row_group(group, columns=["events_path", "summary"],
                                    use_threads=False)
        self.paths: list[str] = table.column(0).to_pylist()
        self.rows = _by_folder(self.paths)
        column = table.column(1)
        # One chunk, as a row group reads: combining it would copy megabytes.
        array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        if array.null_count or None in self.paths:
            raise ValueError("a kept summary or its events path is null")
        # Offsets into the buffer of JSON texts: each summary is decoded straight
        # from Arrow's memory, with no Python string in between.
        self.offsets = np.frombuffer(array.buffers()[1], dtype=np.int32, count=len(array) + 1,
                                     offset=4 * array.offset).tolist()
        self.data = memoryview(array.buffers()[2])


def _each(rows: int | list[int]) -> tuple[int, ...] | list[int]:
    """The rows of one folder as ``_by_folder`` holds them (one row, or a list)."""
    return (rows,) if isinstance(rows, int) else rows


def _by_folder(paths: list[str]) -> dict[str, int | list[int]]:
    """Row (or rows, for a folder holding several runs) by mission folder."""
    folders = [path.split("/", 1)[0] for path in paths]
    rows: dict[str, int | list[int]] = dict(zip(folders, range(len(folders)), strict=True))
    if len(rows) != len(folders):  # the usual dataset has one run per folder
        several: dict[str, list[int]] = {}
        for row, folder in enumerate(folders):
            several.setdefault(folder, []).append(row)
        rows.update((folder, found) for folder, found in several.items() if len(found) > 1)
    return rows


class KeptSummaries:
    """The kept summaries of ``dataset``, which the caller has checked are current.

    A damaged table raises (pyarrow's errors, OSError, ValueError, orjson's).
    """

    #: Row groups kept decoded at a time. A share asks in suite order, which is
    #: mostly the table's, so it moves through the groups once; keeping every one
    #: it touched held some 600 MB per process at a million runs. Once as many
    #: groups were dropped as the table has (asked in some other order), none is
    #: dropped any more, so no group is decoded over and over.
    KEEP_GROUPS = 2

    def __init__(self, dataset: Path) -> None:
        import pyarrow.parquet as pq

        self._file = pq.ParquetFile(Path(dataset) / f"{SUMMARIES}.parquet")
        meta = self._file.metadata
        self._starts: list[int] = []
        start = 0
        for group in range(meta.num_row_groups):
            self._starts.append(start)
            start += meta.row_group(group).num_rows
        self._decoded: dict[int, _Group] = {}
        self._dropped = 0
        ranges = _ranges(self._file)
        # Groups in path order: each one's first and last path, for bisect.
        self._lows, self._highs, self._order = (
            [list(column) for column in zip(*ranges, strict=True)] if ranges else ([], [], []))
        self._whole = _Whole(self._file) if ranges is None else None

    def find(self, key: str) -> tuple[str, int] | None:
        """The events path mission ``key`` is scored from (``resolve_relative``'s pick
        among those in its folder) and its row, or None when it has none."""
        found = self._rows_of(key)
        if not found:
            return None
        if len(found) == 1 and taken_alone(found[0][0]):  # its folder is KEY
            return found[0]
        paths = [path for path, _ in found]
        path = resolve_relative(key, paths)
        return (path, found[paths.index(path)][1]) if path is not None else None

    def get(self, path: str) -> RunSummary:
        """The summary kept for ``path`` (a row ``find`` has not given: a search)."""
        for found, row in self._rows_of(path.split("/", 1)[0]):
            if found == path:
                return self.summary(row, path)
        raise KeyError(path)

    def summary(self, row: int, path: str) -> RunSummary:
        """The summary kept in ``row``, whose events path is ``path``."""
        group = bisect.bisect_right(self._starts, row) - 1
        decoded = self._group(group)
        at = row - self._starts[group]
        return _stored_summary(path, decoded.data[decoded.offsets[at]:decoded.offsets[at + 1]])

    def _rows_of(self, folder: str) -> list[tuple[str, int]]:
        """(events path, row) of every run in mission folder ``folder``."""
        if self._whole is not None:
            return self._whole.rows_of(folder)
        found: list[tuple[str, int]] = []
        # Its paths are ``folder`` itself or start with "folder/": all below folder + "0".
        beyond = folder + "0"
        i = bisect.bisect_left(self._highs, folder)
        while i < len(self._order) and self._lows[i] < beyond:
            group = self._order[i]
            decoded = self._group(group)
            rows = decoded.rows.get(folder)
            if rows is not None:
                start = self._starts[group]
                for at in _each(rows):
                    found.append((decoded.paths[at], start + at))
            i += 1
        return found

    def _group(self, group: int) -> _Group:
        decoded = self._decoded.get(group)
        if decoded is None:
            if len(self._decoded) >= self.KEEP_GROUPS and self._dropped < len(self._starts):
                del self._decoded[next(iter(self._decoded))]  # the first decoded
                self._dropped += 1
            decoded = self._decoded[group] = _Group(self._file, group)
        return decoded


def _ranges(file: pq.ParquetFile) -> list[tuple[str, str, int]] | None:
    """(first path, last path, group) of every row group, in path order, when the
    footer gives each group's range and no two ranges overlap; else None."""
    meta = file.metadata
    try:
        column = file.schema_arrow.get_field_index("events_path")
    except KeyError:
        return None
    ranges = []
    for group in range(meta.num_row_groups):
        stats = meta.row_group(group).column(column).statistics
        if stats is None or not stats.has_min_max or meta.row_group(group).num_rows == 0:
            return None
        low, high = stats.min, stats.max
        if not isinstance(low, str) or not isinstance(high, str):
            return None
        ranges.append((low, high, group))
    ranges.sort()
    if any(before[1] >= after[0] for before, after in itertools.pairwise(ranges)):
        return None
    return ranges


class _Whole:
    """Every path of the table, indexed up front (a table whose groups' ranges overlap)."""

    def __init__(self, file: pq.ParquetFile) -> None:
        # No thread pool: a fan-out forks after this, and a child cannot use one.
        self.paths: list[str] = file.read(columns=["events_path"],
                                          use_threads=False).column(0).to_pylist()
        self.rows = _by_folder(self.paths)

    def rows_of(self, folder: str) -> list[tuple[str, int]]:
        rows = self.rows.get(folder)
        if rows is None:
            return []
        return [(self.paths[row], row) for row in _each(rows)]


__all__ = ["KeptSummaries"]
