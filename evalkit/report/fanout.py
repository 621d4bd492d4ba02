"""Scoring a large suite on every core, to the same bytes.

At 100,000 missions every step of ``score`` — parsing the suite, building
and checking missions, finding each run's summary, judging, rendering — is
per-mission Python, so one process keeps one core busy. Here the suite's
text is cut into runs of missions (``suite_pieces``); each process parses,
builds, checks, judges and renders its own run about a hundred missions at a
time (``suite_pieces.CHUNK_CHARS``), appending what it renders to scratch
files, and sends back the tally the suite-wide check rules need and running
totals. This process writes the
report's head, then the files. A run's summary comes from a dataset's kept
summaries (``--dataset``) or is folded from its stream where the share finds
it (``--runs``).

The result is byte for byte what the one-process path writes: the same
functions judge and render, totals are exact (see ``score._Totals``), and
only the suite-wide rules see the whole. This path takes only clean cases:
a suite with any check problem, a dataset without current kept summaries,
or anything unexpected gives None, and the caller scores in one process,
which says what is wrong in its usual words.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from evalkit.errors import EvalkitError
from evalkit.eval import suite_pieces
from evalkit.eval.check import ShareCheck, Tally, suite_problems
from evalkit.eval.score import (
    HalfTotals,
    dataset_where,
    fold,
    halves_dict,
    judged,
    locate_under,
    merge_halves,
    missing_from_dataset,
    nothing_to_score,
    report_head,
    runs_where,
    tally_halves,
)
from evalkit.eval.suite import _FAST_PATH_FROM, Mission, _suite_file, default_name
from evalkit.eval.verdict import Verdict, judge
from evalkit.report.markdown import (
    HalfLines,
    Rendered,
    encode_verdicts,
    json_parts,
    lines_bytes,
    markdown_parts,
    render_verdicts,
)
from evalkit.store import leftovers

if TYPE_CHECKING:
    from evalkit.eval.kept import KeptSummaries

#: Missions a suite must have (judged by its size: ~600 bytes of JSON each)
#: before fanning out pays for the forks and the stitching.
FANOUT_FROM_BYTES = max(_FAST_PATH_FROM, 4 * 2**20)


@dataclass
class _Share:
    """What one process sends back for its run of missions."""

    tally: Tally
    totals: HalfTotals
    passed: bool
    judged: int
    #: Missions with anything where their run would be (none at all: nothing to score).
    found: int
    #: Its verdicts as the report's JSON holds them (None: none), and per half its
    #: markdown table rows and why-they-failed lines (None: none), each in a file.
    json: Path | None
    rows: dict[str, Path | None]
    failures: dict[str, Path | None]


class _FromDataset:
    """Each mission's run from a dataset's kept summaries (indexed before forking:
    the workers share its pages)."""

    def __init__(self, dataset: Path, kept: KeptSummaries) -> None:
        from evalkit.eval.tables import without_stream

        self.where = dataset_where(dataset)
        self.kept = kept
        #: Mission folders that were there but held no stream.
        self.bare = without_stream(dataset)

    def verdict(self, m: Mission) -> tuple[Verdict, bool]:
        """The mission's verdict, and whether anything was where its run would be."""
        found = self.kept.find(m.key)  # as score._score_dataset
        if found is None:
            return (judge(m, None, missing=missing_from_dataset(m.key, self.bare)),
                    m.key in self.bare)
        rel, row = found
        return judge(m, self.kept.summary(row, rel), source=rel), True


class _FromRuns:
    """Each mission's stream from a runs folder, found and folded by the share."""

    def __init__(self, runs: Path) -> None:
        self.where = runs_where(runs)
        self.runs = runs

    def verdict(self, m: Mission) -> tuple[Verdict, bool]:
        loc = locate_under(m.key, self.runs)
        return judged(m, loc, fold(loc)), loc.there


@dataclass(frozen=True)
class _Job:
    pieces: suite_pieces.Pieces
    source: _FromDataset | _FromRuns
    split: str
    want_json: bool
    want_markdown: bool
    #: Where each share writes what it renders.
    scratch: Path


_JOB: _Job | None = None  # set before forking: the workers inherit it rather than unpickle it


def score_rendered(suite_path: Path, split: str, *, dataset: Path | None = None,
                   runs: Path | None = None, want_json: bool, want_markdown: bool,
                   workers: int | None = None) -> Rendered | None:
    """The report of ``suite_path`` scored on several cores, or None.

    From ``dataset`` (its kept summaries) or ``runs`` (each mission's stream
    folded where its share finds it), one of the two. None means "score it
    the usual way": too small to pay, a suite that is not a JSON document, a
    check problem, or a dataset without current kept summaries. With one
    core it still pays: the work streams, so memory stays low.
    """
    if (dataset is None) == (runs is None):
        raise TypeError("score_rendered scores from a dataset or from runs: give one")
    workers = workers if workers is not None else len(os.sched_getaffinity(0))
    try:
        file = _suite_file(Path(suite_path))
        if file.stat().st_size < FANOUT_FROM_BYTES:
            return None
        source = _source(dataset, runs)
        if source is None:
            return None
        data = file.read_bytes()
    except (EvalkitError, OSError, ValueError, *_arrow_errors()):
        return None  # the usual path words it (a damaged table: it reads the events)
    pieces = suite_pieces.cut(file, data, workers, default_name(Path(suite_path)))
    del data  # the pieces hold it (less any BOM)
    if pieces is None:
        return None
    try:
        scratch = _scratch()
    except OSError:
        return None
    try:
        job = _Job(pieces, source, split, want_json, want_markdown, scratch)
        shares = _run(job)
        found = None
        if shares is not None and all(share is not None for share in shares):
            found = _stitch(pieces, source.where, split, shares,  # type: ignore[arg-type]
                            want_json, want_markdown, scratch)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    if found is None:
        shutil.rmtree(scratch, ignore_errors=True)
    return found


#: The scratch folder's name in the temp directory, before host and process id.
SCRATCH_PREFIX = "evalkit-score-"


def _scratch() -> Path:
    """A scratch folder for this process's shares; first, those killed scores left."""
    base = Path(tempfile.gettempdir())
    leftovers.remove_left_behind(base, (SCRATCH_PREFIX,))
    scratch = base / leftovers.tagged(SCRATCH_PREFIX)
    try:
        scratch.mkdir()
    except FileExistsError:  # this process scores twice at once (a library caller)
        return Path(tempfile.mkdtemp(prefix=f"{scratch.name}.", dir=base))
    return scratch


def _source(dataset: Path | None, runs: Path | None) -> _FromDataset | _FromRuns | None:
    """Where the runs come from, or None when this path does not take them."""
    if runs is not None:
        return _FromRuns(Path(runs)) if Path(runs).is_dir() else None
    assert dataset is not None
    # pyarrow and numpy: only a dataset needs them.
    from evalkit.eval.kept import KeptSummaries
    from evalkit.eval.tables import stored_summaries_current

    if not stored_summaries_current(dataset):
        return None
    return _FromDataset(Path(dataset), KeptSummaries(Path(dataset)))


def _arrow_errors() -> tuple[type[Exception], ...]:
    """Arrow's errors, which only a loaded pyarrow can raise."""
    arrow = sys.modules.get("pyarrow")
    return (arrow.ArrowException,) if arrow is not None else ()


def _run(job: _Job) -> list[_Share | None] | None:
    """Piece 0 here, the others in forked workers (a parent that only waited would idle a core)."""
    import multiprocessing

    global _JOB
    _JOB = job
    try:
        if len(job.pieces.spans) == 1:
            return [_share(0)]
        with multiprocessing.get_context("fork").Pool(len(job.pieces.spans) - 1) as pool:
            pending = pool.map_async(_share, range(1, len(job.pieces.spans)), chunksize=1)
            first = _share(0)
            return [first, *pending.get()]
    finally:
        _JOB = None


def _share(index: int) -> _Share | None:
    """Parse, build, check, judge and render one run of missions (None: do it the usual way)."""
    try:
        return _score_share(index)
    except (suite_pieces.Odd, *_arrow_errors(), OSError, ValueError, KeyError, TypeError):
        return None  # the one-process path says what it is


def _score_share(index: int) -> _Share | None:
    job = _JOB
    assert job is not None
    fields = suite_pieces.build_fields(job.pieces)
    if fields is None:
        return None
    check = ShareCheck(fields)
    verdict_of = job.source.verdict
    totals = tally_halves((), job.split)
    passed, judged, found = True, 0, 0
    with _Files(job.scratch, index, totals) as out:
        for built in suite_pieces.missions(job.pieces, index):
            if not check.clean(built):
                return None
            verdicts = []
            for m in built:
                if job.split != "all" and m.split != job.split:
                    continue
                verdict, there = verdict_of(m)
                verdicts.append(verdict)
                found += there
            merge_halves(totals, tally_halves(verdicts, job.split))
            passed = passed and all(v.passed for v in verdicts)
            judged += len(verdicts)
            dicts = [v.as_dict() for v in verdicts]
            if job.want_json:
                out.json(encode_verdicts(dicts))
            if job.want_markdown:
                out.markdown(*render_verdicts(dicts, totals))
    return _Share(check.tally, totals, passed, judged, found, *out.written())


class _Files:
    """One share's rendered output, appended chunk by chunk to files in the scratch folder."""

    def __init__(self, scratch: Path, index: int, halves: HalfTotals) -> None:
        self.paths = {"json": scratch / f"{index}.json"}
        for half in halves:
            self.paths[f"rows.{half}"] = scratch / f"{index}.{half}.rows.md"
            self.paths[f"failed.{half}"] = scratch / f"{index}.{half}.failed.md"
        self.halves = list(halves)
        self.files: dict[str, BinaryIO] = {}
        self.sizes = dict.fromkeys(self.paths, 0)

    def __enter__(self) -> _Files:
        self.files = {name: open(path, "wb") for name, path in self.paths.items()}  # noqa: SIM115
        return self

    def __exit__(self, *exc: object) -> None:
        for file in self.files.values():
            file.close()

    def _write(self, name: str, data: bytes | memoryview) -> None:
        self.files[name].write(data)
        self.sizes[name] += len(data)

    def json(self, run: bytes | memoryview) -> None:
        if run:
            if self.sizes["json"]:
                self._write("json", b",\n")
            self._write("json", run)

    def markdown(self, rows: HalfLines, failures: HalfLines) -> None:
        for half in self.halves:
            self._write(f"rows.{half}", lines_bytes(rows[half]))
            self._write(f"failed.{half}", lines_bytes(failures[half]))

    def written(self) -> tuple[Path | None, dict[str, Path | None], dict[str, Path | None]]:
        def path(name: str) -> Path | None:
            return self.paths[name] if self.sizes[name] else None
        return (path("json"), {half: path(f"rows.{half}") for half in self.halves},
                {half: path(f"failed.{half}") for half in self.halves})


def _stitch(pieces: suite_pieces.Pieces, where: str, split: str, shares: list[_Share],
            want_json: bool, want_markdown: bool, scratch: Path) -> Rendered | None:
    tally = Tally()
    for share in shares:
        tally.add(share.tally)
    suite = suite_pieces.build_fields(pieces)
    if suite is None or len(tally.keys) != tally.total or any(suite_problems(suite, tally)):
        return None  # a key in two runs, or a suite-wide problem: the usual path words it
    if not any(share.found for share in shares):
        raise nothing_to_score(suite.name, where)
    totals = shares[0].totals
    for share in shares[1:]:
        merge_halves(totals, share.totals)
    passed = all(share.passed for share in shares)
    head = report_head(suite.name, split, passed, halves_dict(totals))
    json = json_parts(head, [s.json for s in shares if s.json]) if want_json else None
    markdown = None
    if want_markdown:
        rows = {half: [s.rows[half] for s in shares if s.rows[half]] for half in totals}
        failures = {half: [s.failures[half] for s in shares if s.failures[half]] for half in totals}
        markdown = markdown_parts(head, rows, failures,  # type: ignore[arg-type]
                                  {half: bool(failures[half]) for half in totals})
    return Rendered(passed, json, markdown, scratch)


__all__ = ["FANOUT_FROM_BYTES", "Rendered", "score_rendered"]
