"""A run folder as a Parquet dataset, and the summaries ``score --dataset`` judges.

Ingest (``evalkit.store.ingest``) stores every record; here it also stores,
per stream, the summary ``evalkit.eval.summary.summarize`` folds from the
very records it parsed (the ``summaries`` table: the whole ``RunSummary`` as
JSON, plus ``run_id``, ``finished``, ``outcome`` and ``records`` as
columns), stamped in the manifest with the version of the fold that wrote
it. ``score --dataset`` reads those when the stamp is this evalkit's, and
otherwise folds each run again from the records the dataset keeps: one fold,
in Python, whichever way a run is scored; DuckDB and Parquet store and
query, and never fold a run a second way.

Also here: ``open_dataset`` (DuckDB views over a dataset folder) and
``query``, what ``evalkit sql`` runs.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import os
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa

from evalkit.errors import EvalkitError
from evalkit.eval import judging
from evalkit.eval.summary import RunSummary, summarize
from evalkit.store import dataset as ds
from evalkit.store.columns import Column, schema
from evalkit.store.layout import resolve_relative, taken_alone

if TYPE_CHECKING:  # DuckDB and the ingest load only where they are used:
    import duckdb  # judging from kept summaries needs neither.

    from evalkit.store import ingest as ing


# --- summaries kept in the dataset ---------------------------------------------

#: Bump when the fold's meaning changes without a RunSummary field changing;
#: a change of fields changes ``summary_version()`` by itself.
SUMMARY_VERSION = 4
SUMMARIES = "summaries"
_TUPLE_FIELDS = ("problems", "tools_called", "gate_tools", "rejected_tools")

SUMMARIES_COLUMNS: tuple[Column, ...] = (
    Column("events_path", pa.string(), "the stream, relative to the ingested folder"),
    Column("run_id", pa.string(), "the run id the fold read"),
    Column("finished", pa.bool_(), "whether the stream holds a `mission_finished`"),
    Column("outcome", pa.string(), "its outcome"),
    Column("records", pa.int64(), "records the reader read"),
    Column("summary", pa.string(), "the whole `RunSummary` (the facts a verdict is judged "
           "from), fields still at their defaults left out; JSON text rather than a struct "
           "because `score --dataset` decodes each straight from the file's buffer, which "
           "is what keeps it fast", json=True),
)
SUMMARIES_SCHEMA = schema(SUMMARIES_COLUMNS)


def summary_version() -> str:
    """What wrote a summaries table: the fold's version and RunSummary's field names."""
    names = ",".join(f.name for f in dataclasses.fields(RunSummary))
    return f"{SUMMARY_VERSION}-{hashlib.sha256(names.encode()).hexdigest()[:12]}"


#: RunSummary's defaults: a kept summary leaves out every field still at its default
#: (most of them in a typical run), which halves what reading it back costs.
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunSummary)}


_LEFT_OUT = {**_DEFAULTS, **{name: [] for name in _TUPLE_FIELDS}}  # as as_dict writes them


def _summary_json(s: RunSummary) -> str:
    fields = s.as_dict()
    del fields["source"]  # the row's events_path
    return orjson.dumps({k: v for k, v in fields.items()
                         if v != _LEFT_OUT[k] or type(v) is not type(_LEFT_OUT[k])}).decode()


def _stored_summary(events_path: str, data: str | bytes | memoryview) -> RunSummary:
    """A RunSummary back from its JSON; built without ``__init__``, which costs 2x here.

    The version check in ``stored_summaries_current`` guarantees the fields match.
    """
    fields = orjson.loads(data)
    for name in _TUPLE_FIELDS:
        if name in fields:
            fields[name] = tuple(fields[name])
    fields["source"] = events_path
    summary = RunSummary.__new__(RunSummary)
    # Every field in the instance's own dict: a verdict reads most of them, and one
    # left to the class's default is found after the instance's dict has missed.
    summary.__dict__ = {**_DEFAULTS, **fields}
    return summary


def _summaries_table(found: dict[str, RunSummary]) -> pa.Table:
    rows = list(found.values())
    return pa.table({
        "events_path": [s.source for s in rows],
        "run_id": [s.run_id for s in rows],
        "finished": [s.finished for s in rows],
        "outcome": [s.outcome for s in rows],
        "records": [s.records for s in rows],
        "summary": [_summary_json(s) for s in rows],
    }, schema=SUMMARIES_SCHEMA)


class SummaryDerivation:
    """The ``summaries`` table, computed by ingest from each batch (see store.ingest)."""

    schemas = {SUMMARIES: SUMMARIES_SCHEMA}

    @property
    def manifest(self) -> dict[str, Any]:
        return {SUMMARIES: {"version": summary_version()}}

    def fold(self, events_path: str, records: list[dict[str, Any]], lines: list[int],
             skipped: int, *, judgments: bytes | None = None) -> RunSummary:
        # The reference fold over the very records being ingested: what `score --runs`
        # computes, for a fifth of what the aggregate query costs here.
        summary = summarize(records, lines, source=events_path, skipped=skipped)
        if judgments is not None:
            summary.judgments = judging.read_judgments(judgments)
        return summary

    def __call__(self, events: pa.Table, runs: pa.Table, folded: list[RunSummary]
                 ) -> list[tuple[str, pa.Table]]:
        paths = runs.column("events_path").to_pylist()
        return [(SUMMARIES, _summaries_table(dict(zip(paths, folded, strict=True))))]


def ingest(root: Path, out: Path | None = None, **options: Any) -> ing.IngestResult:
    """``store.ingest.ingest`` plus the summaries table. ``evalkit ingest`` also passes
    ``gather=evalkit.report.verdict_table.VerdictTable()`` (the verdicts table), which
    this layer, below the reports, cannot name itself."""
    from evalkit.store import ingest as ing

    return ing.ingest(root, out, derive=SummaryDerivation(), **options)


# --- from a dataset ----------------------------------------------------------

def _sql_path(path: Path) -> str:
    return "'" + os.fspath(path).replace("'", "''") + "'"


def check_dataset(folder: Path) -> dict[str, Any]:
    """A dataset's manifest, once it says the dataset can be read here; otherwise one
    ``EvalkitError`` sentence (no dataset, a damaged manifest, another schema)."""
    return _check_manifest(Path(folder))


def _check_manifest(folder: Path) -> dict[str, Any]:
    manifest = folder / ds.MANIFEST
    try:
        info = orjson.loads(manifest.read_bytes())
    except FileNotFoundError:
        raise EvalkitError(f"{folder} is not an evalkit dataset (no {ds.MANIFEST}); "
                           f"make one with `evalkit ingest`") from None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise EvalkitError(f"cannot read {manifest}: {exc}") from None
    if not isinstance(info, dict) or info.get("format") != ds.FORMAT:
        raise EvalkitError(f"{manifest} does not describe an evalkit dataset")
    # A manifest without ``schema`` was written before there was one: its ``version``
    # was the same fact, and is 1 in every dataset written then.
    schema = info.get(ds.SCHEMA_KEY, info.get("version"))
    if type(schema) is not int:
        raise EvalkitError(f"{manifest} does not say the schema of its tables; re-create the "
                           f"dataset with `evalkit ingest`")
    if schema > ds.SCHEMA:
        raise EvalkitError(f"{folder} holds tables of schema {schema}; this evalkit reads schema "
                           f"{ds.SCHEMA}: upgrade evalkit or re-ingest the runs")
    if schema < ds.SCHEMA:
        raise EvalkitError(f"{folder} holds tables of schema {schema}, written by an older "
                           f"evalkit; re-run `evalkit ingest` on its runs to rewrite it as "
                           f"schema {ds.SCHEMA}")
    return info


def open_dataset(path: Path, *, kept: bool = True) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view of each table of the dataset (``summaries``
    when the dataset keeps current ones and ``kept`` is true), its JSON text columns read
    as ``JSON``, and the views of ``evalkit.eval.views`` whose tables are there."""
    import duckdb

    from evalkit.eval.views import VIEWS

    folder = Path(path)
    info = _check_manifest(folder)
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    tables = [*ds.TABLES,
              *([SUMMARIES] if kept and _kept_summaries_current(folder, info) else []),
              *_gathered_tables(folder, info)]
    made = [(table, f"{_select(table, folder / f'{table}.parquet')}", f"{table}.parquet")
            for table in tables]
    made += [(view.name, view.sql, f"the view {view.name}") for view in VIEWS
             if set(view.reads) <= set(tables)]
    for name, select, what in made:
        try:
            con.execute(f"CREATE VIEW {name} AS {select}")
        except duckdb.Error as exc:  # a damaged file, or one not of the declared columns
            con.close()
            raise EvalkitError(f"cannot read the dataset {folder}: {what}: "
                               f"{_first_line(exc)}; re-create it with `evalkit ingest`") from None
    return con


def _select(table: str, file: Path) -> str:
    """The SELECT a table's view is: its Parquet file, JSON text read as DuckDB ``JSON``."""
    casts = [f"CAST({name} AS JSON) AS {name}" for name in json_columns(table)]
    replace = f" REPLACE ({', '.join(casts)})" if casts else ""
    return f"SELECT *{replace} FROM read_parquet({_sql_path(file)})"


def json_columns(table: str) -> list[str]:
    """The columns of a dataset table that hold JSON text (``JSON`` in `evalkit sql`)."""
    if table == SUMMARIES:
        return [c.name for c in SUMMARIES_COLUMNS if c.json]
    return ds.json_columns(table)


#: What a table a ``Gathering`` added may be called, to be made a view.
_TABLE_NAME = re.compile(r"[a-z][a-z0-9_]*")


def _gathered_tables(folder: Path, manifest: dict[str, Any]) -> list[str]:
    """The other tables the manifest names (a gathering's, e.g. ``verdicts``) that are there."""
    named = manifest.get("tables")
    if not isinstance(named, dict):
        return []
    return [name for name, file in sorted(named.items())
            if name not in ds.TABLES and name != SUMMARIES and _TABLE_NAME.fullmatch(name) and file == f"{name}.parquet"
            and (folder / file).is_file()]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def stored_summaries_current(dataset: Path) -> bool:
    """True when the dataset keeps summaries written by this evalkit's fold."""
    return _kept_summaries_current(Path(dataset), _check_manifest(Path(dataset)))


def unkept(dataset: Path) -> tuple[frozenset[str], dict[str, int]]:
    """What the manifest says of the names under the ingested folder it keeps no run
    for, so a mission named by one gets the verdict ``--runs`` gives, not "not run":
    the folders that hold no stream where ``score --runs`` looks
    (``ds.WITHOUT_STREAM``), and the files that hold no record, each with the lines
    a reader skips in it (``ds.WITHOUT_RECORDS``). Either is empty for a dataset
    written before it was kept.
    """
    manifest = _check_manifest(Path(dataset))
    names = manifest.get(ds.WITHOUT_STREAM)
    files = manifest.get(ds.WITHOUT_RECORDS)
    folders = (frozenset(name for name in names if isinstance(name, str))
               if isinstance(names, list) else frozenset())
    recordless = ({name: skipped for name, skipped in files.items()
                   if isinstance(name, str) and type(skipped) is int and skipped >= 0}
                  if isinstance(files, dict) else {})
    return folders, recordless


def altered(dataset: Path) -> dict[str, str]:
    """The streams the dataset's ingest found altered after they were closed (events path
    -> the verdict's reason): scored as tampered, whatever their kept summaries say."""
    found = _check_manifest(Path(dataset)).get(ds.ALTERED)
    if not isinstance(found, dict):
        return {}
    return {path: reason for path, reason in found.items()
            if isinstance(path, str) and isinstance(reason, str)}


def _kept_summaries_current(folder: Path, manifest: dict[str, Any]) -> bool:
    kept = manifest.get(SUMMARIES)
    return (isinstance(kept, dict) and kept.get("version") == summary_version()
            and (folder / f"{SUMMARIES}.parquet").is_file())


class DatasetSummaries:
    """A dataset's streams, each with the summary ``score`` judges it by.

    The summaries ingest kept, when this evalkit's fold wrote them: their paths are
    read up front and each summary decoded where it is asked for (``_KeptRows``), so
    the processes judging a large suite share the reading out. Otherwise (an older
    dataset, or one ``evalkit.store.ingest`` wrote alone) each stream is folded
    again from the records the dataset keeps. A dataset that cannot be read is one
    ``EvalkitError`` sentence.
    """

    def __init__(self, dataset: Path, *, stored: bool = True) -> None:
        dataset = Path(dataset)
        manifest = _check_manifest(dataset)
        found = (_kept(dataset) if stored and _kept_summaries_current(dataset, manifest)
                 else None)
        self.paths, self._summary = found or _refolded(dataset)
        self._under: dict[str, list[int]] = {}
        for row, path in enumerate(self.paths):
            self._under.setdefault(path.split("/", 1)[0], []).append(row)

    def find(self, key: str) -> tuple[str, int] | None:
        """The events path mission ``key`` is scored from (``resolve_relative``'s pick
        among the streams in its folder) and its row, or None when it has none."""
        rows = self._under.get(key)
        if not rows:
            return None
        if len(rows) == 1 and taken_alone(self.paths[rows[0]]):  # its folder is KEY
            return self.paths[rows[0]], rows[0]
        paths = [self.paths[row] for row in rows]
        path = resolve_relative(key, paths)
        return (path, rows[paths.index(path)]) if path is not None else None

    def summary(self, row: int) -> RunSummary:
        return self._summary(row)


def summaries_from_dataset(dataset: Path, *, stored: bool = True) -> dict[str, RunSummary]:
    """Every stream of a dataset folder, summarised; keyed by events path (relative to the
    root). ``stored=False`` folds every stream again even where kept summaries are current."""
    found = DatasetSummaries(dataset, stored=stored)
    return dict(sorted((path, found.summary(row)) for row, path in enumerate(found.paths)))


def _kept(dataset: Path) -> tuple[list[str], Callable[[int], RunSummary]] | None:
    """The kept summaries' paths, and how to decode the one in a row; None when the table
    cannot be read (a damaged cache: the events still say everything)."""
    import pyarrow.parquet as pq

    try:
        # ParquetFile, not read_table: the latter loads pyarrow.dataset and pandas (0.2 s).
        # No thread pool: judging forks after this, and a child cannot use one.
        file = pq.ParquetFile(dataset / f"{SUMMARIES}.parquet")
        paths = file.read(columns=["events_path"], use_threads=False).column(0).to_pylist()
    except (pa.ArrowException, OSError, ValueError, KeyError, TypeError):
        return None
    if None in paths:
        return None
    return paths, _KeptRows(dataset, paths, file.metadata)


class _KeptRows:
    """A kept summary by row, decoded a row group at a time in whichever process asks.

    Only the paths are read up front. A share's missions are mostly neighbours in
    the table (ingest writes it in the order it walked the run folders), so each
    process decodes about once each group its shares need, and holds one at a time:
    the whole column decoded at once cost more in fresh memory than in decoding.
    """

    def __init__(self, dataset: Path, paths: list[str], meta: Any) -> None:
        self.dataset, self.paths = dataset, paths
        self.starts = [0]
        for group in range(meta.num_row_groups):
            self.starts.append(self.starts[-1] + meta.row_group(group).num_rows)
        self.group = -1
        self.pid = 0
        self.file: Any = None
        self.offsets: Any = None
        self.data: Any = None

    def __call__(self, row: int) -> RunSummary:
        group = bisect.bisect_right(self.starts, row) - 1
        if group != self.group or self.pid != os.getpid():
            self._decode(group)
        at = row - self.starts[group]
        try:
            return _stored_summary(self.paths[row],
                                   self.data[self.offsets[at]:self.offsets[at + 1]])
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise self._damaged(exc) from None

    def _decode(self, group: int) -> None:
        import pyarrow.parquet as pq

        if self.pid != os.getpid():  # a file of this process's own (a fork shares the offset)
            self.file, self.pid = pq.ParquetFile(self.dataset / f"{SUMMARIES}.parquet"), os.getpid()
        try:
            column = self.file.read_row_group(group, columns=["summary"],
                                              use_threads=False).column(0)
            texts = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        except (pa.ArrowException, OSError) as exc:
            raise self._damaged(exc) from None
        if texts.null_count or len(texts) != self.starts[group + 1] - self.starts[group]:
            raise self._damaged(ValueError("a summary is missing"))
        # Each summary is decoded straight from Arrow's buffer of JSON texts, by its offsets.
        self.offsets = memoryview(texts.buffers()[1]).cast("i")[
            texts.offset:texts.offset + len(texts) + 1]
        self.data = memoryview(texts.buffers()[2])
        self.group = group

    def _damaged(self, exc: BaseException) -> EvalkitError:
        return EvalkitError(f"the summaries {self.dataset} keeps cannot be read "
                            f"({_first_line(exc)}); re-create the dataset with `evalkit ingest`")


def _refolded(dataset: Path) -> tuple[list[str], Callable[[int], RunSummary]]:
    """Every stream folded again from the records the dataset keeps (in line order, with
    the lines its reader skipped)."""
    import pyarrow.parquet as pq

    try:
        runs = pq.ParquetFile(dataset / "runs.parquet").read(
            columns=["events_path", "blank", "torn", "non_object"], use_threads=False)
        records: dict[str, list[tuple[int, str]]] = {}
        events = pq.ParquetFile(dataset / "events.parquet")
        for batch in events.iter_batches(columns=["events_path", "line", "record"],
                                         use_threads=False):
            for path, line, record in zip(*(column.to_pylist() for column in batch.columns),
                                          strict=True):
                records.setdefault(path, []).append((line, record))
        paths = runs.column("events_path").to_pylist()
        skipped = [sum(counts) for counts in zip(*(runs.column(name).to_pylist()
                                                   for name in ("blank", "torn", "non_object")),
                                                 strict=True)]
        summaries = []
        for path, skip in zip(paths, skipped, strict=True):
            lines = sorted(records.pop(path, ()))
            summaries.append(summarize([orjson.loads(record) for _, record in lines],
                                       [line for line, _ in lines], source=path, skipped=skip))
    except (pa.ArrowException, OSError, ValueError, KeyError, TypeError) as exc:
        raise EvalkitError(f"cannot read the dataset {dataset}: {_first_line(exc)}; "
                           "re-create it with `evalkit ingest`") from None
    return paths, summaries.__getitem__


# --- evalkit sql -------------------------------------------------------------------

def find_dataset(path: Path) -> Path | None:
    """The dataset a path stands for: itself, or its ``dataset.parquet/`` folder."""
    path = Path(path)
    if (path / ds.MANIFEST).is_file():
        return path
    inside = path / ds.DEFAULT_NAME
    if (inside / ds.MANIFEST).is_file():
        return inside
    return None


#: Gaps DuckDB allows between the words of ``EXPLAIN [ANALYZE] [(options)]``.
_GAP = r"(?:\s|--[^\n]*(?:\n|$)|/\*.*?\*/)*"
#: What ``EXPLAIN`` puts before the statement it explains; stripping it leaves that statement.
_EXPLAIN = re.compile(rf"{_GAP}EXPLAIN\b{_GAP}(?:ANALY[SZ]E\b{_GAP})?"
                      rf"(?:\((?:[^()']|'[^']*')*\){_GAP})?", re.IGNORECASE | re.DOTALL)
_ACCEPTED = ("`evalkit sql` only reads, so it runs exactly one SELECT (or DESCRIBE, SHOW, "
             "SUMMARIZE, FROM …, WITH …) or an EXPLAIN of one")


def _statements(con: duckdb.DuckDBPyConnection, sql: str) -> list[duckdb.Statement]:
    """DuckDB's parse of ``sql``; a syntax error is the user's, so one sentence."""
    import duckdb

    try:
        sql.encode("utf-8")
    except UnicodeEncodeError:  # bytes from the command line that are not UTF-8
        raise EvalkitError("query failed: the query is not UTF-8 text") from None
    try:
        return con.extract_statements(sql)
    except duckdb.Error as exc:
        raise EvalkitError(f"query failed: {_first_line(exc)}") from None


def _check_question(sql: str) -> None:
    """Refuse, before anything runs, whatever is not one read-only question.

    ``sql`` answers questions and never writes: COPY … TO could replace the dataset's
    own Parquet files, and EXPORT, ATTACH, CREATE, INSERT, SET, PRAGMA, CALL, LOAD …
    have no place in a question. DuckDB parses DESCRIBE, SHOW, SUMMARIZE, FROM-first
    and WITH as SELECT, so they pass. EXPLAIN passes only of a SELECT, since EXPLAIN
    ANALYZE runs what it explains (``EXPLAIN ANALYZE COPY …`` writes the file). A
    PIVOT without an ``IN (…)`` list parses as MULTI, which DuckDB also uses to wrap
    COPY/CREATE/INSERT around a PIVOT, so MULTI is refused and the message points at
    the ``IN (…)`` form, which parses as SELECT. Several statements are refused rather
    than showing only the last result.
    """
    import duckdb

    with duckdb.connect() as con:  # parsing binds nothing: no dataset needed yet
        found = _statements(con, sql)
        if not found:
            raise EvalkitError(f"no SQL statement given (only blanks or comments): {_ACCEPTED}")
        if len(found) > 1:
            raise EvalkitError(f"{len(found)} SQL statements given: {_ACCEPTED}; "
                               f"run them one at a time")
        kind = found[0].type
        if kind == duckdb.StatementType.EXPLAIN:
            prefix = _EXPLAIN.match(found[0].query)
            inner = _statements(con, found[0].query[prefix.end():]) if prefix else []
            if len(inner) == 1 and inner[0].type == duckdb.StatementType.SELECT:
                return
            what = f"{inner[0].type.name} statement" if len(inner) == 1 else "statement"
            raise EvalkitError(f"an EXPLAIN of a {what} (not of a SELECT) was given: {_ACCEPTED}")
        if kind == duckdb.StatementType.MULTI:
            raise EvalkitError(f"a statement DuckDB runs as several was given (a PIVOT with no "
                               f"IN (…) list, or one inside COPY/CREATE/INSERT): {_ACCEPTED}, "
                               f"so name the PIVOT's values with ON col IN (…)")
        if kind != duckdb.StatementType.SELECT:
            article = "an" if kind.name[0] in "AEIOU" else "a"
            raise EvalkitError(f"{article} {kind.name} statement was given: {_ACCEPTED}")


def _no_dataset(path: Path) -> EvalkitError:
    """Why ``path`` cannot be queried: answering 0 rows from an empty temporary dataset
    would pass a mistyped folder (or a dataset that lost its manifest) off as no data."""
    if any((path / f"{table}.parquet").is_file() for table in ds.TABLES):
        return EvalkitError(f"no dataset and no runs at {path}: it has Parquet tables but no "
                            f"{ds.MANIFEST}, so re-create it with `evalkit ingest`")
    return EvalkitError(f"no dataset and no runs at {path} (no {ds.MANIFEST}, and no run "
                        f"directory with an events file, nor a score report, below it)")


def gathered_words(gathered: dict[str, int]) -> str:
    """What a gathering added, for a sentence about an ingest: ``" and 12 verdicts"``."""
    return "".join(f" and {rows} {name}" for name, rows in gathered.items() if rows)


def _holds_anything(folder: Path, gather: ing.Gathering | None) -> bool:
    """Whether ``folder`` holds a run directory, or a file ``gather`` reads.

    The walk stops at the first run; only a folder with none is walked to the end.
    """
    from evalkit.store.ingest.folders import walk

    kept: list[str] = []
    names = gather.names if gather is not None else frozenset()
    return next(walk(folder, keep=names, kept=kept), None) is not None or bool(kept)


def _read_only_here(con: duckdb.DuckDBPyConnection, dataset: Path) -> None:
    """Let the query touch files in ``dataset`` only, and change no setting.

    The statement check already keeps writes out; this also keeps a SELECT from
    reading (``read_csv('/etc/passwd')``) or fetching anything beyond the dataset it
    was asked about. DuckDB checks at query time, so the views made before still read.
    """
    allowed = os.path.join(os.path.abspath(dataset), "")  # the slash: not its siblings too
    con.execute("SET allowed_directories = ['" + allowed.replace("'", "''") + "']")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def query(path: Path, sql: str, *, gather: ing.Gathering | None = None
          ) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run one read-only question over a dataset, or over a runs folder ingested on the fly
    (with ``gather``'s tables too, when given: a folder holding only what it gathers is
    ingested as well).

    Returns (column names, rows). Anything but one SELECT (or EXPLAIN of one) is refused
    before anything runs; any DuckDB error becomes one EvalkitError sentence.
    """
    import duckdb

    _check_question(sql)
    path = Path(path)
    found = find_dataset(path)
    with tempfile.TemporaryDirectory(prefix="evalkit-dataset-") as scratch:
        if found is None:
            if not path.is_dir() or not _holds_anything(path, gather):
                raise _no_dataset(path)
            result = ingest(path, Path(scratch) / ds.DEFAULT_NAME, gather=gather)
            if not result.runs and not any(result.gathered.values()):
                raise _no_dataset(path)  # only files that turned out not to be ours
            print(f"evalkit: no dataset in {path}; ingested {result.runs} runs"
                  f"{gathered_words(result.gathered)} into a temporary one "
                  f"(run `evalkit ingest {path}` to keep it)", file=sys.stderr)
            found = result.out
        con = open_dataset(found)
        try:
            _read_only_here(con, found)
            relation = con.sql(sql)
            if relation is None:
                return [], []
            columns = [d[0] for d in relation.description]
            return columns, relation.fetchall()
        except duckdb.Error as exc:
            raise EvalkitError(f"query failed: {_first_line(exc)}") from None
        finally:
            con.close()
