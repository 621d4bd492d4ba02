"""Scoring a large suite on every core, to the same bytes.

At 100,000 missions every step of ``score`` — parsing the suite, building
and checking missions, finding each run's summary, judging, rendering — is
per-mission Python, so one process keeps one core busy. Here the suite's
text is cut into spans of about a hundred missions (``suite_pieces``, 64 KB
each); each process parses, builds, checks, judges and renders the spans it
takes, appending what it renders to scratch files, and sends back where each
span's output sits, the tally the suite-wide check rules need, and running
totals. This process writes the report's head, then the spans in suite
order. A run's summary comes from a dataset's kept summaries (``--dataset``)
or is folded from its stream where the share finds it (``--runs``).

Each process starts with an even run of spans and takes them in order; one
that runs out takes the far half of what the busiest has left (``_Claims``).
Halves of the work by bytes are not halves by time: missions that fail,
with long reasons, may sit together in one half, and a shared host slows one
core and not the other. Cut in halves once, one process finished 0.1-0.3 s
before the other at 100,000 missions (5-15% of the run). Taking a far half,
rather than every other span, keeps each process moving forward through the
dataset's row groups, each decoded once.

The result is byte for byte what the one-process path writes: the same
functions judge and render, totals are exact (see ``score._Totals``), and
only the suite-wide rules see the whole. This path takes only clean cases:
a suite with any check problem, a dataset without current kept summaries,
or anything unexpected gives None, and the caller scores in one process,
which says what is wrong in its usual words.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from evalkit.errors import EvalkitError
from evalkit.eval import suite_pieces
from evalkit.eval.check import ShareCheck, Tally, suite_problems
from evalkit.eval.score import (
    HalfTotals,
    Unkept,
    dataset_where,
    fold,
    halves_dict,
    judged,
    locate_under,
    merge_halves,
    nothing_to_score,
    report_head,
    runs_where,
    tally_halves,
)
from evalkit.eval.suite import _FAST_PATH_FROM, Mission, _suite_file, default_name
from evalkit.eval.verdict import Verdict, altered, judge
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
from evalkit.store.replace import FileSlice
from evalkit.store.seal import Checker

if TYPE_CHECKING:
    from evalkit.eval.kept import KeptSummaries

#: Missions a suite must have (judged by its size: ~600 bytes of JSON each)
#: before fanning out pays for the forks and the stitching.
FANOUT_FROM_BYTES = max(_FAST_PATH_FROM, 4 * 2**20)


#: Where one span's output sits in its process's files: (start, length) by file name
#: (``json``, ``rows.HALF``, ``failed.HALF``), for those it wrote anything to.
Placed = dict[str, tuple[int, int]]


@dataclass
class _Share:
    """What one process sends back for the spans it took."""

    tally: Tally
    totals: HalfTotals
    passed: bool
    judged: int
    #: Missions with anything where their run would be (none at all: nothing to score).
    found: int
    #: Its files by name: the verdicts as the report's JSON holds them, and per half
    #: the markdown table rows and why-they-failed lines.
    paths: dict[str, Path]
    #: (span, where its output sits) for every span it took.
    spans: list[tuple[int, Placed]]


class _FromDataset:
    """Each mission's run from a dataset's kept summaries (indexed before forking:
    the workers share its pages)."""

    def __init__(self, dataset: Path, kept: KeptSummaries, verify: bool) -> None:
        from evalkit.eval.tables import altered

        self.where = dataset_where(dataset)
        self.kept = kept
        self.unkept = Unkept.of(dataset)
        self.tampered = altered(dataset) if verify else {}

    def verdict(self, m: Mission) -> tuple[Verdict, bool]:
        """The mission's verdict, and whether anything was where its run would be."""
        found = self.kept.find(m.key)  # as score._score_dataset
        if found is None:
            return self.unkept.verdict(m)
        rel, row = found
        reason = self.tampered.get(rel)
        if reason is not None:
            return altered(m, reason, source=rel), True
        return judge(m, self.kept.summary(row, rel), source=rel), True


class _FromRuns:
    """Each mission's stream from a runs folder, found, checked and folded by the share."""

    def __init__(self, runs: Path, checker: Checker | None) -> None:
        self.where = runs_where(runs)
        self.runs = runs
        self.checker = checker

    def verdict(self, m: Mission) -> tuple[Verdict, bool]:
        loc = locate_under(m.key, self.runs, self.checker)
        return judged(m, loc, fold(loc, self.checker)), loc.there


class _Claims:
    """Which spans each process has left, shared by the processes of a fan-out.

    Process ``w`` owns ``[front, back)`` of the spans and takes its front one
    at a time. One with nothing left takes the far half of the largest
    range left, moving its own range there, and goes on forward from it: the
    work evens out in a few such moves rather than a claim per span from
    anywhere. Built before forking: the lock is a semaphore and the ends live
    in an anonymous shared mapping, which forked processes see as one.
    (``multiprocessing.RawArray`` would do too, at the cost of importing ctypes
    and making a heap arena: 5 ms of a 2 s score.)
    """

    def __init__(self, ranges: list[tuple[int, int]]) -> None:
        import array
        import mmap
        import multiprocessing

        self._lock = multiprocessing.get_context("fork").Lock()
        ends = array.array("q", [end for pair in ranges for end in pair])
        shared = mmap.mmap(-1, len(ends) * ends.itemsize)  # MAP_SHARED: forks write it too
        self._ends = memoryview(shared).cast("q")
        self._ends[:] = ends

    def take(self, worker: int) -> Iterator[int]:
        """The spans for process ``worker``, until none is left anywhere."""
        while (span := self.next(worker)) is not None:
            yield span

    def next(self, worker: int) -> int | None:
        ends = self._ends
        mine = 2 * worker
        with self._lock:
            front = ends[mine]
            if front >= ends[mine + 1]:
                largest, most = 0, 0
                for other in range(0, len(ends), 2):
                    left = ends[other + 1] - ends[other]
                    if left > most:
                        largest, most = other, left
                if not most:
                    return None
                # Its owner keeps the near half; a last span left goes whole.
                front = ends[largest] + most // 2
                ends[mine + 1] = ends[largest + 1]
                ends[largest + 1] = front
            ends[mine] = front + 1
            return front

    def abandon(self) -> None:
        """Leave nothing for anyone: a process that gave up makes the others stop too."""
        ends = self._ends
        with self._lock:
            for i in range(0, len(ends), 2):
                ends[i] = ends[i + 1]


def first_ranges(spans: int, workers: int) -> list[tuple[int, int]]:
    """Each process's first range of spans: near-even runs in suite order."""
    cuts = [spans * w // workers for w in range(workers + 1)]
    return list(itertools.pairwise(cuts))


@dataclass(frozen=True)
class _Job:
    pieces: suite_pieces.Pieces
    source: _FromDataset | _FromRuns
    split: str
    want_json: bool
    want_markdown: bool
    #: Where each share writes what it renders.
    scratch: Path
    claims: _Claims
    workers: int
    verify: bool


_JOB: _Job | None = None  # set before forking: the workers inherit it rather than unpickle it


def score_rendered(suite_path: Path, split: str, *, dataset: Path | None = None,
                   runs: Path | None = None, want_json: bool, want_markdown: bool,
                   workers: int | None = None, verify: bool = True,
                   checker: Checker | None = None) -> Rendered | None:
    """The report of ``suite_path`` scored on several cores, or None.

    From ``dataset`` (its kept summaries) or ``runs`` (each mission's stream
    folded where its share finds it), one of the two. None means "score it
    the usual way": too small to pay, a suite that is not a JSON document, a
    check problem, or a dataset without current kept summaries. With one
    core it still pays: the work streams, so memory stays low. Streams are
    checked against their seals as ``score`` checks them (``verify``, ``checker``).
    """
    if (dataset is None) == (runs is None):
        raise TypeError("score_rendered scores from a dataset or from runs: give one")
    workers = workers if workers is not None else len(os.sched_getaffinity(0))
    try:
        file = _suite_file(Path(suite_path))
        if file.stat().st_size < FANOUT_FROM_BYTES:
            return None
        source = _source(dataset, runs, verify, checker)
        if source is None:
            return None
        data = file.read_bytes()
    except (EvalkitError, OSError, ValueError, *_arrow_errors()):
        return None  # the usual path words it (a damaged table: it reads the events)
    spans = max(workers, len(data) // SPAN_BYTES)
    pieces = suite_pieces.cut(file, data, spans, default_name(Path(suite_path)))
    del data  # the pieces hold it (less any BOM)
    if pieces is None:
        return None
    workers = min(workers, len(pieces.spans))
    try:
        scratch = _scratch()
    except OSError:
        return None
    try:
        claims = _Claims(first_ranges(len(pieces.spans), workers))
        job = _Job(pieces, source, split, want_json, want_markdown, scratch, claims, workers,
                   verify)
        shares = _run(job)
        found = None
        if shares is not None and all(share is not None for share in shares):
            found = _stitch(pieces, source.where, split, shares,  # type: ignore[arg-type]
                            want_json, want_markdown, scratch, verify)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    if found is None:
        shutil.rmtree(scratch, ignore_errors=True)
    return found


#: Suite text a span holds (about a hundred missions): small enough that the last
#: span taken keeps the other processes waiting only milliseconds, large enough that
#: claiming and placing spans costs nothing that shows.
SPAN_BYTES = suite_pieces.CHUNK_CHARS

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


def _source(dataset: Path | None, runs: Path | None, verify: bool, checker: Checker | None
            ) -> _FromDataset | _FromRuns | None:
    """Where the runs come from, or None when this path does not take them."""
    if runs is not None:
        if not Path(runs).is_dir():
            return None
        if verify and checker is None:
            checker = Checker.for_scoring([Path(runs)])
        if verify and checker is not None:
            checker.warm(runs)  # the workers inherit the folder's seal, read and judged once
        return _FromRuns(Path(runs), checker if verify else None)
    assert dataset is not None
    # pyarrow and numpy: only a dataset needs them.
    from evalkit.eval.kept import KeptSummaries
    from evalkit.eval.tables import stored_summaries_current

    if not stored_summaries_current(dataset):
        return None
    return _FromDataset(Path(dataset), KeptSummaries(Path(dataset)), verify)


def _arrow_errors() -> tuple[type[Exception], ...]:
    """Arrow's errors, which only a loaded pyarrow can raise."""
    arrow = sys.modules.get("pyarrow")
    return (arrow.ArrowException,) if arrow is not None else ()


def _run(job: _Job) -> list[_Share | None] | None:
    """Process 0 here, the others forked (a parent that only waited would idle a core)."""
    import multiprocessing

    global _JOB
    _JOB = job
    try:
        if job.workers == 1:
            return [_share(0)]
        with multiprocessing.get_context("fork").Pool(job.workers - 1) as pool:
            pending = pool.map_async(_share, range(1, job.workers), chunksize=1)
            first = _share(0)
            return [first, *pending.get()]
    finally:
        _JOB = None


def _share(worker: int) -> _Share | None:
    """Parse, build, check, judge and render the spans this process takes (None: do it
    the usual way, and the others stop too)."""
    assert _JOB is not None
    found = None
    try:
        found = _score_share(worker)
    except (suite_pieces.Odd, *_arrow_errors(), OSError, ValueError, KeyError, TypeError):
        pass  # the one-process path says what it is
    finally:
        if found is None:
            _JOB.claims.abandon()
    return found


def _score_share(worker: int) -> _Share | None:
    job = _JOB
    assert job is not None
    fields = suite_pieces.build_fields(job.pieces)
    if fields is None:
        return None
    check = ShareCheck(fields)
    verdict_of = job.source.verdict
    totals = tally_halves((), job.split)
    passed, judged, found = True, 0, 0
    with _Files(job.scratch, worker, totals) as out:
        for span in job.claims.take(worker):
            out.begin()
            for built in suite_pieces.missions(job.pieces, span):
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
            out.end(span)
    return _Share(check.tally, totals, passed, judged, found, out.paths, out.spans)


class _Files:
    """One process's rendered output, appended span by span to files in the scratch
    folder, with where each span's output sits."""

    def __init__(self, scratch: Path, worker: int, halves: HalfTotals) -> None:
        self.paths = {"json": scratch / f"{worker}.json"}
        for half in halves:
            self.paths[f"rows.{half}"] = scratch / f"{worker}.{half}.rows.md"
            self.paths[f"failed.{half}"] = scratch / f"{worker}.{half}.failed.md"
        self.halves = list(halves)
        self.files: dict[str, BinaryIO] = {}
        self.sizes = dict.fromkeys(self.paths, 0)
        self.starts = dict(self.sizes)
        self.spans: list[tuple[int, Placed]] = []

    def __enter__(self) -> _Files:
        self.files = {name: open(path, "wb") for name, path in self.paths.items()}  # noqa: SIM115
        return self

    def __exit__(self, *exc: object) -> None:
        for file in self.files.values():
            file.close()

    def _write(self, name: str, data: bytes | memoryview) -> None:
        self.files[name].write(data)
        self.sizes[name] += len(data)

    def begin(self) -> None:
        self.starts = dict(self.sizes)

    def end(self, span: int) -> None:
        """The output since ``begin`` is span ``span``'s."""
        self.spans.append((span, {name: (start, self.sizes[name] - start)
                                  for name, start in self.starts.items()
                                  if self.sizes[name] > start}))

    def json(self, run: bytes | memoryview) -> None:
        if run:
            if self.sizes["json"] > self.starts["json"]:
                self._write("json", b",\n")
            self._write("json", run)

    def markdown(self, rows: HalfLines, failures: HalfLines) -> None:
        for half in self.halves:
            self._write(f"rows.{half}", lines_bytes(rows[half]))
            self._write(f"failed.{half}", lines_bytes(failures[half]))


def _placed(shares: list[_Share], spans: int) -> list[tuple[dict[str, Path], Placed]] | None:
    """Each span's files and where its output sits in them, in suite order (None: a span
    missing or taken twice, which ``_Claims`` rules out)."""
    placed: list[Any] = [None] * spans
    for share in shares:
        for span, where in share.spans:
            if placed[span] is not None:
                return None
            placed[span] = (share.paths, where)
    return None if any(found is None for found in placed) else placed


def _slices(placed: list[tuple[dict[str, Path], Placed]], name: str) -> list[FileSlice]:
    """The output named ``name`` of every span, in suite order."""
    return [FileSlice(paths[name], *where[name]) for paths, where in placed if name in where]


def _stitch(pieces: suite_pieces.Pieces, where: str, split: str, shares: list[_Share],
            want_json: bool, want_markdown: bool, scratch: Path, verify: bool
            ) -> Rendered | None:
    tally = Tally()
    for share in shares:
        tally.add(share.tally)
    suite = suite_pieces.build_fields(pieces)
    if suite is None or len(tally.keys) != tally.total or any(suite_problems(suite, tally)):
        return None  # a key in two runs, or a suite-wide problem: the usual path words it
    placed = _placed(shares, len(pieces.spans))
    if placed is None:
        return None
    if not any(share.found for share in shares):
        raise nothing_to_score(suite.name, where)
    totals = shares[0].totals
    for share in shares[1:]:
        merge_halves(totals, share.totals)
    passed = all(share.passed for share in shares)
    head = report_head(suite.name, split, passed, halves_dict(totals), verify)
    json = json_parts(head, _slices(placed, "json")) if want_json else None
    markdown = None
    if want_markdown:
        rows = {half: _slices(placed, f"rows.{half}") for half in totals}
        failures = {half: _slices(placed, f"failed.{half}") for half in totals}
        markdown = markdown_parts(head, rows, failures,  # type: ignore[arg-type]
                                  {half: bool(failures[half]) for half in totals})
    return Rendered(passed, json, markdown, scratch)


__all__ = ["FANOUT_FROM_BYTES", "Rendered", "score_rendered"]
