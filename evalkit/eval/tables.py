"""Scoring at scale: RunSummary from DuckDB tables instead of a Python fold.

``summarize`` folds one stream's records in Python; here one aggregate SQL
query folds every stream of a dataset at once ("last" = highest file line,
"first" = lowest), and the few values are then put through the very same
normalisation functions (``text``/``number``/``flag``) into ``RunSummary``
objects. A test holds the two producers equal field by field, so a verdict
never depends on which path computed it.

Neither producer is free at 100k runs, so ``ingest`` keeps the summaries as
a ``summaries`` table (one row per stream, the whole ``RunSummary`` as
JSON), folded by ``summarize`` from the very text it ingests, while each
batch is in memory. ``summaries_from_dataset`` reads that table when the
dataset's summaries were written by this evalkit's fold
(``SUMMARY_VERSION``) and runs the aggregate query otherwise; a dataset is
a cache of the recordings, never a second truth.

Also here: ``open_dataset`` (views over a dataset folder) and ``query``, what
``evalkit sql`` runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa

from evalkit import signals
from evalkit.errors import EvalkitError
from evalkit.eval.summary import (
    PROBLEMS_QUOTED,
    RunSummary,
    _finish,
    first_firing,
    summarize,
)
from evalkit.store import dataset as ds
from evalkit.store.values import flag, number, text

if TYPE_CHECKING:  # DuckDB and the ingest SQL load only where a query runs:
    import duckdb  # reading kept summaries needs neither.

    from evalkit.store import ingest as ing

#: Values at or past 2**53 may have lost digits in a DOUBLE column; for those
#: runs the record itself (kept as JSON) is read again.
_EXACT = 2.0**53

_NUMBERS_FINISHED = ("steps", "max_steps", "elapsed_s", "prompt_tokens", "completion_tokens",
                     "total_tokens", "calls", "cost")


#: The events the stagnation fold reads (evalkit.signals). Each reaches the same Python
#: fold reduced to what it reads; a tool result travels as a fingerprint of its JSON
#: text (equal exactly when the call and result are written the same), not whole.
_WATCHED = "'step_started', 'tool_call', 'tool_result', 'reply_rejected'"
_FINGERPRINTED = "['$.tool', '$.arguments', '$.ok', '$.exit_code', '$.output', '$.error']"


def _big(columns: Iterable[str]) -> str:
    return " OR ".join(f"coalesce(abs({c}) >= {_EXACT}, false)" for c in columns)


SUMMARY_SQL = f"""
SELECT r.events_path,
    r.blank + r.torn + r.non_object AS skipped,
    count(e.line) AS records,
    count(e.line) FILTER (WHERE len(e.problems) > 0) AS nonconforming,
    (list({{'line': e.line, 'problems': e.problems}} ORDER BY e.line)
        FILTER (WHERE len(e.problems) > 0))[1:{PROBLEMS_QUOTED}] AS problems,
    bool_or(e.event = 'mission_started') AS started,
    arg_max({{'run_id': e.run_id, 'protocol': e.protocol, 'profile': e.profile,
              'sandbox': e.sandbox}}, e.line) FILTER (WHERE e.event = 'mission_started') AS last_start,
    bool_or(e.event = 'mission_finished') AS finished,
    arg_max({{'outcome': e.outcome, 'reason': e.reason, 'steps': e.steps,
              'max_steps': e.max_steps, 'elapsed_s': e.elapsed_s,
              'prompt_tokens': e.prompt_tokens, 'completion_tokens': e.completion_tokens,
              'total_tokens': e.total_tokens, 'calls': e.calls, 'cost': e.cost,
              'exact_line': CASE WHEN {_big(f'e.{c}' for c in _NUMBERS_FINISHED)}
                                   OR json_extract(e.record, '$.budget') IS NOT NULL
                            THEN e.line END}}, e.line)
        FILTER (WHERE e.event = 'mission_finished') AS last_finish,
    count(e.line) FILTER (WHERE e.event = 'step_started') AS steps_started,
    list(e.tool ORDER BY e.line) FILTER (WHERE e.event = 'tool_call') AS tools_called,
    list(e.tool ORDER BY e.line) FILTER (WHERE e.event = 'gate_requested') AS gate_tools,
    list(e.tool ORDER BY e.line) FILTER (WHERE e.event = 'reply_rejected' AND e.tool IS NOT NULL)
        AS rejected_tools,
    count(e.line) FILTER (WHERE e.event = 'reply_rejected') AS reply_rejected,
    count(e.line) FILTER (WHERE e.event = 'tool_result' AND e.ok IS FALSE) AS refusals,
    bool_or(e.event = 'step_started' AND e.has_plan) AS staged,
    count(e.line) FILTER (WHERE e.event = 'step_started' AND e.injected_truthy) AS injected,
    bool_or(e.event = 'answer') AS answered,
    arg_max({{'text': e.text}}, e.line) FILTER (WHERE e.event = 'answer') AS last_answer,
    count(e.line) FILTER (WHERE e.event = 'grounding') AS grounding_records,
    bool_or(e.event = 'grounding' AND e.repairing IS NOT TRUE) AS grounding_verdict,
    arg_max({{'ran': e.ran, 'grounded': e.grounded, 'verified': e.verified, 'repairs': e.repairs,
              'exact_line': CASE WHEN {_big(['e.repairs'])} THEN e.line END}}, e.line)
        FILTER (WHERE e.event = 'grounding' AND e.repairing IS NOT TRUE) AS last_verdict,
    list({{'event': e.event,
           'index': CASE WHEN e.event = 'step_started'
                         THEN json_extract(e.record, '$.index')::VARCHAR END,
           'review': CASE WHEN e.event = 'step_started'
                          THEN json_extract(e.record, '$.review')::VARCHAR END,
           'result': CASE WHEN e.event = 'tool_result' THEN md5(list_transform(
                json_extract(e.record, {_FINGERPRINTED}),
                lambda x: coalesce(x::VARCHAR, 'null'))::VARCHAR) END}} ORDER BY e.line)
        FILTER (WHERE e.event IN ({_WATCHED}) AND coalesce(e.branch, 'direct') = 'direct')
        AS watched
FROM runs r LEFT JOIN events e ON e.events_path = r.events_path
GROUP BY ALL
"""


def _summary(row: dict[str, Any], exact: dict[tuple[str, int], dict[str, Any]]) -> RunSummary:
    """One aggregate row -> RunSummary, through summary.py's normalisation functions.

    ``exact`` holds the records (by events path and line) whose numbers a DOUBLE
    column may have rounded, and the mission_finished records carrying a budget
    (kept as recorded, which no column holds); those are read from the record itself.
    """
    s = RunSummary(source=row["events_path"], records=row["records"], skipped=row["skipped"])
    s.nonconforming = row["nonconforming"]
    quoted: list[str] = []
    for item in row["problems"] or ():
        for problem in item["problems"]:
            if len(quoted) < PROBLEMS_QUOTED:
                quoted.append(f"line {item['line']}: {problem}")
    s.problems = tuple(quoted)
    start = row["last_start"]
    if start is not None:
        s.started = True
        s.run_id, s.protocol = text(start["run_id"]), text(start["protocol"])
        s.profile, s.sandbox = text(start["profile"]), text(start["sandbox"])
    finish = row["last_finish"]
    if finish is not None:
        if finish["exact_line"] is not None:
            _finish(s, exact[(s.source, finish["exact_line"])])
        else:
            s.finished = True
            s.outcome, s.reason = text(finish["outcome"]), text(finish["reason"])
            s.steps, s.max_steps = number(finish["steps"]), number(finish["max_steps"])
            s.elapsed_s = number(finish["elapsed_s"])
            s.prompt_tokens = number(finish["prompt_tokens"])
            s.completion_tokens = number(finish["completion_tokens"])
            s.total_tokens = number(finish["total_tokens"])
            s.model_calls, s.cost = number(finish["calls"]), number(finish["cost"])
    s.steps_started = row["steps_started"]
    s.tools_called = tuple(text(t) for t in row["tools_called"] or ())
    s.gate_tools = tuple(text(t) for t in row["gate_tools"] or ())
    s.rejected_tools = tuple(text(t) for t in row["rejected_tools"] or ())
    s.reply_rejected, s.refusals = row["reply_rejected"], row["refusals"]
    s.staged = bool(row["staged"])
    s.injected = row["injected"]
    if row["last_answer"] is not None:
        s.answered = True
        s.answer = text(row["last_answer"]["text"])
    s.grounding_records = row["grounding_records"]
    verdict = row["last_verdict"]
    if verdict is not None:
        s.grounding_verdict = True
        line = verdict["exact_line"]
        record = exact[(s.source, line)] if line is not None else verdict
        s.grounding_ran, s.grounded = flag(record.get("ran")), flag(record.get("grounded"))
        s.verified, s.repairs = flag(record.get("verified")), number(record.get("repairs"))
    s.stagnation, s.stagnation_step = first_firing(_stagnation(row["watched"] or ()))
    return s


def _stagnation(watched: Iterable[dict[str, Any]]) -> list[signals.Firing]:
    watch = signals.Watch()
    for item in watched:
        watch.feed_parts(item["event"], result=item["result"],
                         index=_json(item["index"]), review=_json(item["review"]))
    return watch.firings


def _json(value: str | None) -> Any:
    return None if value is None else orjson.loads(value)


def _summaries(con: duckdb.DuckDBPyConnection) -> dict[str, RunSummary]:
    """Run SUMMARY_SQL over the ``runs`` and ``events`` relations of ``con``."""
    rows = con.sql(SUMMARY_SQL).to_arrow_table().to_pylist()  # a fifth faster than fetchall
    wanted = [(row["events_path"], item["exact_line"]) for row in rows
              for item in (row["last_finish"], row["last_verdict"])
              if item is not None and item["exact_line"] is not None]
    exact: dict[tuple[str, int], dict[str, Any]] = {}
    if wanted:  # rare: runs with numbers at or past 2**53, or a budget that ran out
        con.register("exact_wanted", pa.table({"p": [p for p, _ in wanted],
                                               "l": [line for _, line in wanted]}))
        try:
            for path, line, record in con.sql(
                    "SELECT events_path, line, record FROM events JOIN exact_wanted "
                    "ON events_path = p AND line = l").fetchall():
                exact[(path, line)] = orjson.loads(record)
        finally:
            con.unregister("exact_wanted")
    out = {}
    for row in rows:
        summary = _summary(row, exact)
        out[summary.source] = summary
    return dict(sorted(out.items()))


# --- summaries kept in the dataset ---------------------------------------------

#: Bump when the fold's meaning changes without a RunSummary field changing;
#: a change of fields changes ``summary_version()`` by itself.
SUMMARY_VERSION = 3
SUMMARIES = "summaries"
_TUPLE_FIELDS = ("problems", "tools_called", "gate_tools", "rejected_tools")

SUMMARIES_SCHEMA = pa.schema([
    ("events_path", pa.string()), ("run_id", pa.string()), ("finished", pa.bool_()),
    ("outcome", pa.string()), ("records", pa.int64()), ("summary", pa.string()),
])


def summary_version() -> str:
    """What wrote a summaries table: the fold's version and RunSummary's field names."""
    names = ",".join(f.name for f in dataclasses.fields(RunSummary))
    return f"{SUMMARY_VERSION}-{hashlib.sha256(names.encode()).hexdigest()[:12]}"


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


#: RunSummary's defaults: a kept summary leaves out every field still at its default
#: (most of them in a typical run), which halves what reading it back costs.
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunSummary)}


_LEFT_OUT = {**_DEFAULTS, **{name: [] for name in _TUPLE_FIELDS}}  # as as_dict writes them


def _summary_json(s: RunSummary) -> str:
    fields = s.as_dict()
    del fields["source"]  # the row's events_path
    return orjson.dumps({k: v for k, v in fields.items()
                         if v != _LEFT_OUT[k] or type(v) is not type(_LEFT_OUT[k])}).decode()


def _stored_summary(events_path: str, data: str) -> RunSummary:
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


class SummaryDerivation:
    """The ``summaries`` table, computed by ingest from each batch (see store.ingest)."""

    schemas = {SUMMARIES: SUMMARIES_SCHEMA}

    @property
    def manifest(self) -> dict[str, Any]:
        return {SUMMARIES: {"version": summary_version()}}

    def fold(self, events_path: str, records: list[dict[str, Any]], lines: list[int],
             skipped: int) -> RunSummary:
        # The reference fold over the very records being ingested: what `score --runs`
        # computes, for a fifth of what the aggregate query costs here.
        return summarize(records, lines, source=events_path, skipped=skipped)

    def __call__(self, con: duckdb.DuckDBPyConnection, events: pa.Table, runs: pa.Table,
                 folded: list[RunSummary]) -> list[tuple[str, pa.Table]]:
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
    version = info.get("version")
    if not isinstance(version, int) or version > ds.VERSION:
        raise EvalkitError(f"{folder} is dataset version {version!r}; this evalkit reads up to "
                           f"version {ds.VERSION}: upgrade evalkit or re-ingest the runs")
    return info


def open_dataset(path: Path, *, kept: bool = True) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with views runs, events, model_calls, tool_calls,
    and ``summaries`` when the dataset keeps current ones (and ``kept`` is true)."""
    import duckdb

    folder = Path(path)
    info = _check_manifest(folder)
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    views = [*ds.TABLES,
             *([SUMMARIES] if kept and _kept_summaries_current(folder, info) else []),
             *_gathered_tables(folder, info)]
    for table in views:
        try:
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet("
                        f"{_sql_path(folder / f'{table}.parquet')})")
        except duckdb.Error as exc:
            con.close()
            raise EvalkitError(f"cannot read the dataset {folder}: {table}.parquet: "
                               f"{_first_line(exc)}; re-create it with `evalkit ingest`") from None
    return con


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


def summaries_from_dataset(dataset: Path, *, stored: bool = True) -> dict[str, RunSummary]:
    """Every stream of a dataset folder, summarised; keyed by events path (relative to the root).

    ``stored`` reads the summaries ingest kept when they are current; otherwise
    (or with ``stored=False``, or when the kept table cannot be read) the
    aggregate query runs over the events. A dataset whose tables cannot be
    read is one ``EvalkitError`` sentence.
    """
    dataset = Path(dataset)
    if stored and stored_summaries_current(dataset):
        try:
            return _kept_summaries(dataset)
        except (pa.ArrowException, OSError, ValueError, KeyError, TypeError):
            pass  # a damaged cache: the events below still say everything
    import duckdb  # only here: reading kept summaries needs no DuckDB

    try:
        con = open_dataset(dataset, kept=False)  # the aggregate reads runs and events only
        try:
            return _summaries(con)
        finally:
            con.close()
    except duckdb.Error as exc:
        raise EvalkitError(f"cannot read the dataset {dataset}: {_first_line(exc)}; "
                           "re-create it with `evalkit ingest`") from None


def _kept_summaries(dataset: Path) -> dict[str, RunSummary]:
    import pyarrow.parquet as pq

    # ParquetFile, not read_table: the latter loads pyarrow.dataset and pandas (0.2 s).
    table = pq.ParquetFile(dataset / f"{SUMMARIES}.parquet").read(
        columns=["events_path", "summary"])
    paths = table.column("events_path").to_pylist()
    data = table.column("summary").to_pylist()
    found = {path: _stored_summary(path, text) for path, text in zip(paths, data, strict=True)}
    return dict(sorted(found.items()))


def by_mission_folder(paths: Iterable[str]) -> dict[str, list[str]]:
    """A dataset's events paths grouped by the folder they sit in under the runs root
    (a mission's key), for ``resolve_relative``."""
    found: dict[str, list[str]] = {}
    for path in paths:
        found.setdefault(path.split("/", 1)[0], []).append(path)
    return found


# --- straight from JSONL -------------------------------------------------------

def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def summaries_via_duckdb(root: Path, events_files: Sequence[Path], *,
                         batch_bytes: int | None = None) -> dict[str, RunSummary]:
    """The same summaries straight from events files, with no Parquet written.

    Files go through the ingest SQL in batches (a run never spans two), each
    batch summarised in memory, so a large ``--runs`` folder costs bounded memory.
    Keys are the files' paths relative to ``root`` (as given when outside it);
    a file that cannot be read is left out.
    """
    from evalkit.store import ingest as ing

    batch_bytes = batch_bytes or ing.BATCH_BYTES
    root = Path(root)
    out: dict[str, RunSummary] = {}
    con = ing.connect()
    try:
        batch: list[tuple[str, str]] = []
        size = 0
        for path in events_files:
            path = Path(path)
            try:
                content, nbytes = ing.read_text(os.fspath(path), required=True)
            except EvalkitError:
                continue  # left out: the caller reports it as "no stream"
            batch.append((_relative(path, root), content))
            size += nbytes
            if size >= batch_bytes:
                out.update(_summarise_batch(con, batch))
                batch, size = [], 0
        if batch:
            out.update(_summarise_batch(con, batch))
    finally:
        con.close()
    return dict(sorted(out.items()))


def _summarise_batch(con: duckdb.DuckDBPyConnection,
                     batch: list[tuple[str, str]]) -> dict[str, RunSummary]:
    from evalkit.store import ingest as ing

    paths = [rel for rel, _ in batch]
    events, counts = ing.events_table(con, [content for _, content in batch])
    events = events.append_column("events_path", pa.array(paths, pa.string()).take(
        events.column("fid")))
    runs = pa.table({
        "events_path": pa.array(paths, pa.string()),
        **{kind: pa.array(counts[kind], pa.int64()) for kind in ("blank", "torn", "non_object")},
    })
    con.register("events", events)
    con.register("runs", runs)
    try:
        return _summaries(con)
    finally:
        con.unregister("events")
        con.unregister("runs")


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
