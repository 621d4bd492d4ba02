"""The dataset's Parquet files, appended to batch by batch in large row groups."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

#: A row group ends at this many rows or bytes of columns, whichever comes first.
#: The bytes bound is kept small for the kept summaries, which ``score --dataset``
#: decodes a row group at a time: at 48 MB a group (some 40,000 summaries) cost
#: a share a quarter of a second and 100 MB more memory than at 8 MB, most of it
#: first touches of fresh pages. DuckDB, which reads the other tables, is as
#: fast on groups this size and spreads them over more threads.
ROW_GROUP_ROWS = 64 * 1024
ROW_GROUP_BYTES = 8 * 2**20


class Writers:
    """One Parquet writer per table, appended to batch by batch.

    A batch's share of a table can be small (some 650 rows of ``runs``), so
    consecutive batches are gathered into row groups of up to ``ROW_GROUP_ROWS``
    rows or ``ROW_GROUP_BYTES``: readers then find the few large row groups a merge
    of per-process files used to give, not one per batch.
    """

    def __init__(self, folder: Path, schemas: dict[str, pa.Schema]) -> None:
        self.writers = {
            name: pq.ParquetWriter(
                folder / f"{name}.parquet", schema, compression="zstd", compression_level=1,
                use_dictionary=[f.name for f in schema if f.name in _DICTIONARY],
            )
            for name, schema in schemas.items()
        }
        self.gathered: dict[str, list[pa.Table]] = {name: [] for name in schemas}

    def write(self, name: str, table: pa.Table) -> None:
        gathered = self.gathered[name]
        if len(table):
            gathered.append(table)
        if sum(map(len, gathered)) >= ROW_GROUP_ROWS \
                or sum(t.nbytes for t in gathered) >= ROW_GROUP_BYTES:
            self._flush(name)

    def _flush(self, name: str) -> None:
        gathered = self.gathered[name]
        if gathered:
            self.writers[name].write_table(pa.concat_tables(gathered),
                                           row_group_size=ROW_GROUP_ROWS)
            gathered.clear()

    def close(self, *, flush: bool = True) -> None:
        """Write what is gathered (not after a failure) and close the files; once.

        The tables are encoded side by side: this is the ingest's last step, with
        every other process done and their cores free.
        """
        try:
            if flush:
                with ThreadPoolExecutor(max_workers=len(self.writers) or 1) as threads:
                    for done in [threads.submit(self._flush, name) for name in self.writers]:
                        done.result()
        finally:
            for writer in self.writers.values():
                writer.close()
            self.writers = {}


_DICTIONARY = {"run", "events_path", "path", "source", "event", "branch", "tool", "outcome",
               "reason", "budget_which", "protocol", "profile", "sandbox", "kind", "name",
               "plane"}
