"""Scoring a suite against recordings: find each mission's run, check it against its
seal, fold it, judge it, and total per half and per flag.

Train and test are never blended: every total is per half. A declared
mission with no run stays in the denominator, so a half that never started
cannot show 100%.

A run is always read as ``evalkit.eval.summary.summarize`` folds it: straight
from its stream under ``--runs``/``--map``, or as ingest kept that fold's
summary in a dataset (``--dataset``). The suite is judged in shares, runs of
missions, by worker processes when it is large (``evalkit.parallel``): each
share finds, checks, folds and judges its missions and writes their verdicts
as ``report.json`` holds them, and only those bytes and the share's running
totals come back. At 100,000 missions, sending the verdicts back as objects
and writing them here cost more than judging them did; so a report keeps its
verdicts as that text, and reads them back only for a caller that asks.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit import parallel
from evalkit.errors import EvalkitError
from evalkit.eval import judging
from evalkit.eval.harness_files import REPORT_FORMAT, REPORT_VERSION
from evalkit.eval.report_json import decode_verdicts, encode_verdicts, json_parts
from evalkit.eval.suite import SPLITS, Mission, Suite
from evalkit.eval.summary import RunSummary, summarize
from evalkit.eval.totals import HalfTotals, halves_dict, merge_halves, tally_halves
from evalkit.eval.verdict import NOT_RUN, Verdict, altered, judge
from evalkit.store.layout import as_text, no_stream, resolve_events
from evalkit.store.reader import file_bytes, parse_bytes
from evalkit.store.replace import Part
from evalkit.store.seal import Checker

if TYPE_CHECKING:
    from evalkit.pricing import Pricing

#: Missions judged as one share: enough that handing a share to a process and its
#: result back costs little beside judging it, few enough that what a share builds
#: stays in the CPU's caches and the last share keeps nobody waiting.
SHARE = 256
#: Missions each process must have to judge before one more is started: below it,
#: starting the process costs more than it saves.
PER_WORKER = 1000


@dataclass
class Located:
    """Where one mission's stream is, or why there is none."""

    key: str
    events: Path | None
    source: str | None
    missing: str | None = None

    @property
    def there(self) -> bool:
        """Whether anything stood where the run would be: a stream, or a folder without one
        (a run that died before writing a line is scored, as missing; only a source
        where no mission has anything at all is "nothing to score")."""
        return self.events is not None or self.missing != NOT_RUN


@dataclass(frozen=True)
class Altered:
    """What ``fold`` finds for a stream that fails its seal: the verdict's reason."""

    reason: str


@dataclass(frozen=True)
class Share:
    """What a run of missions came to."""

    #: Their verdicts, as they sit in ``report.json``'s list (``report_json``).
    json: bytes
    totals: HalfTotals
    passed: bool
    #: Whether any of them had anything where its run would be.
    there: bool


@dataclass
class ScoreReport:
    """The verdicts of one half (or both) of a suite, with their totals."""

    suite: str
    split: str
    shares: list[Share] = field(repr=False)
    #: Whether each stream was checked against its seal (``--no-verify``: not).
    verified: bool = True

    @property
    def all_passed(self) -> bool:
        return all(share.passed for share in self.shares)

    def halves(self) -> dict[str, dict[str, Any]]:
        """Totals per half, and per flag within each half."""
        found = tally_halves((), self.split)
        for share in self.shares:
            merge_halves(found, share.totals)
        return halves_dict(found)

    def head(self) -> dict[str, Any]:
        """The report without its verdicts."""
        return {"format": REPORT_FORMAT, "version": REPORT_VERSION, "suite": self.suite,
                "split": self.split, "passed": self.all_passed, "verified": self.verified,
                "halves": self.halves()}

    def json_parts(self) -> list[Part]:
        """``report.json``'s bytes, in parts (``to_json_bytes(self.to_dict())`` joined)."""
        return json_parts(self.head(), [share.json for share in self.shares])

    def verdict_dicts(self) -> list[dict[str, Any]]:
        return [v for share in self.shares for v in decode_verdicts(share.json)]

    def to_dict(self) -> dict[str, Any]:
        return {**self.head(), "verdicts": self.verdict_dicts()}

    @cached_property
    def verdicts(self) -> list[Verdict]:
        return [_verdict_of(v) for v in self.verdict_dicts()]


_VERDICT_FIELDS = ("key", "flag", "split", "passed", "reasons", "missing", "needs_reader",
                   "kpis", "source", "checks")


def _verdict_of(found: dict[str, Any]) -> Verdict:
    """The verdict a report's entry was written from (``Verdict.as_dict``'s inverse)."""
    return Verdict(**{name: found.pop(name) for name in _VERDICT_FIELDS}, extra=found)


def missions_in(suite: Suite, split: str) -> list[Mission]:
    if split not in ("all", *SPLITS):
        raise EvalkitError(f"--split takes train, test or all, not {split!r}")
    return [m for m in suite.missions if split == "all" or m.split == split]


def score(suite: Suite, *, runs: str | Path | None = None,
          mapping: Mapping[str, str | Path] | None = None, dataset: str | Path | None = None,
          split: str = "all", verify: bool = True, checker: Checker | None = None,
          workers: int | None = None, pricing: Pricing | None = None) -> ScoreReport:
    """Verdicts for every mission of ``suite`` in ``split`` from recorded streams: those
    under ``runs`` (``runs/<key>``) and at ``mapping``'s paths, or those in ``dataset``.

    Each stream is checked against its seal (``evalkit.store.seal``) unless ``verify``
    is False; ``checker`` says which keys are trusted and whether unsigned streams are
    refused (default: ``Checker.for_scoring`` of the runs folder or the mapped paths).
    ``workers``: processes to judge with (default: one per core, for a large suite).
    ``pricing``: price every run again from its recorded tokens (``evalkit.eval.repricing``);
    None keeps the cost each stream recorded.
    """
    if dataset is not None and (runs is not None or mapping):
        raise EvalkitError("score from --dataset or from --runs/--map, not both: a dataset "
                           "holds the runs it was ingested from, and nothing would be mixed in")
    if dataset is not None and pricing is not None:
        raise EvalkitError("--pricing prices runs from their recordings; score them with "
                           "--runs or --map (a dataset keeps no run's model)")
    missions = missions_in(suite, split)
    source: _Runs | _Dataset
    if dataset is not None:
        source = _Dataset(Path(dataset), verify)
    else:
        runs_path = Path(runs) if runs is not None else None
        mapping = _known(suite, mapping or {})
        if runs_path is not None and not runs_path.is_dir():
            what = "is not a folder" if runs_path.exists() else "does not exist"
            raise EvalkitError(f"--runs {runs_path} {what}")
        if verify and checker is None:
            checker = Checker.for_scoring(beside(runs_path, mapping))
        if verify and checker is not None and runs_path is not None:
            checker.warm(runs_path)  # before any fork: the workers inherit what it read
        source = _Runs(runs_path, mapping, checker if verify else None, pricing)
    if workers is None:
        workers = parallel.workers_for(len(missions), PER_WORKER)
    shares = list(parallel.ordered(_judge_share, parallel.spans(len(missions), SHARE),
                                   shared=_Job(missions, source, split), workers=workers))
    if not any(share.there for share in shares):
        raise nothing_to_score(suite.name, source.where)
    return ScoreReport(suite.name, split, shares, verify)


@dataclass(frozen=True)
class _Job:
    """What every share reads (inherited by forked workers, never pickled)."""

    missions: Sequence[Mission]
    source: _Runs | _Dataset
    split: str


def _judge_share(job: _Job, span: tuple[int, int]) -> Share:
    """Judge missions ``span`` of the job and write their verdicts."""
    verdicts, there = [], False
    for m in job.missions[span[0]:span[1]]:
        verdict, found = job.source.verdict(m)
        verdicts.append(verdict)
        there = there or found
    return Share(encode_verdicts([v.as_dict() for v in verdicts]),
                 tally_halves(verdicts, job.split), all(v.passed for v in verdicts), there)


class _Runs:
    """Each mission's stream at its ``--map`` path or under the runs folder, checked
    against its seal and folded where its share finds it."""

    def __init__(self, runs: Path | None, mapping: Mapping[str, str | Path],
                 checker: Checker | None, pricing: Pricing | None = None) -> None:
        self.runs, self.mapping, self.checker = runs, mapping, checker
        self.pricing = pricing
        self.where = (f"has a run under {runs}" if runs is not None
                      else "has a run at its --map path")

    def verdict(self, m: Mission) -> tuple[Verdict, bool]:
        """The mission's verdict, and whether anything was where its run would be."""
        loc = self.locate(m.key)
        return judged(m, loc, fold(loc, self.checker, self.pricing)), loc.there

    def locate(self, key: str) -> Located:
        """Where the mission's stream is: its ``--map`` entry first, then ``runs/<key>``."""
        if key in self.mapping:
            label = as_text(str(self.mapping[key]))
            return _located(key, Path(self.mapping[key]), label, None, self.checker)
        if self.runs is not None:
            return _located(key, self.runs / key, None, self.runs, self.checker)
        return Located(key, None, None, NOT_RUN)


def locate(runs: Path, key: str) -> Located:
    """Where ``score --runs`` finds the mission ``key``'s stream under ``runs``."""
    return _located(key, runs / key, None, runs, None)


def _located(key: str, path: Path, label: str | None, base: Path | None,
             checker: Checker | None) -> Located:
    events = resolve_events(path, checker.listed if checker is not None
                            and checker.wants_listings else None)
    if events is None:
        if not os.path.exists(path):
            return Located(key, None, label, NOT_RUN)
        return Located(key, None, label, no_stream(label or path.name))
    if label is None and base is not None:
        label = _relative_posix(events, base)
    return Located(key, events, as_text(label or events.as_posix()))


def _relative_posix(path: Path, base: Path) -> str:
    """``path.relative_to(base).as_posix()`` for a path found below ``base``, minus pathlib's cost."""
    text, prefix = os.fspath(path), os.path.join(os.fspath(base), "")
    if text.startswith(prefix) and os.sep == "/":
        return text[len(prefix):]
    return path.relative_to(base).as_posix()


def fold(loc: Located, checker: Checker | None = None,
         pricing: Pricing | None = None) -> RunSummary | Altered | str | None:
    """The summary of a located stream, why it has none, or None when there is no stream.

    With a ``checker``, the bytes read are first checked against the stream's seal, and
    a stream altered after it was closed is never folded as if it were the run. With
    ``pricing``, the summary's cost is the run priced again from its recorded tokens.
    """
    if loc.events is None:
        return None
    try:
        data = file_bytes(loc.events)
    except EvalkitError as exc:
        if loc.events.is_dir():
            return f"no stream: {loc.events} is a directory, not an events file"
        return f"no stream: {exc.message}"
    if data is None:
        return f"no stream: cannot read {loc.events}: No such file or directory"
    if checker is not None:
        reason = checker.altered(loc.events, data)
        if reason is not None:
            return Altered(reason)
    read = parse_bytes(loc.events, data)
    summary = summarize(read.records, read.lines, source=loc.source, skipped=read.skipped)
    judged = judgments_beside(loc.events, checker)
    if isinstance(judged, Altered):
        return judged
    if judged:
        summary.judgments = judged
    if pricing is not None:
        from evalkit.eval.repricing import reprice

        summary.cost = reprice(read.records, loc.events, summary.run_id, pricing)
    return summary


def judgments_beside(events: Path, checker: Checker | None = None
                     ) -> dict[str, dict[str, Any]] | Altered:
    """The judgments recorded beside a stream (``evalkit.eval.judging``), checked against
    their own seal: judgments altered after they were sealed make the run's verdict an
    infrastructure failure, as an altered stream does."""
    path, data = judging.read_beside(events)
    if data is None:
        return {}
    if checker is not None:
        reason = checker.altered(Path(path), data)
        if reason is not None:
            return Altered(reason)
    return judging.read_judgments(data)


def judged(m: Mission, loc: Located, found: RunSummary | Altered | str | None) -> Verdict:
    """The verdict of a mission from what ``fold`` found for it."""
    if isinstance(found, RunSummary):
        return judge(m, found, source=loc.source)
    if isinstance(found, Altered):
        return altered(m, found.reason, source=loc.source)
    return judge(m, None, source=loc.source, missing=found or loc.missing)


class _Dataset:
    """Each mission's run in a dataset: the summary ingest kept (or, for a dataset
    that keeps none this evalkit wrote, one folded again from its records)."""

    def __init__(self, dataset: Path, verify: bool) -> None:
        from evalkit.eval import tables  # pyarrow: only a dataset needs it

        self.summaries = tables.DatasetSummaries(dataset)
        self.tampered = tables.altered(dataset) if verify else {}
        self.unkept = Unkept.of(dataset)
        self.where = f"has a run in {dataset}"

    def verdict(self, m: Mission) -> tuple[Verdict, bool]:
        """The mission's verdict, and whether anything was where its run would be."""
        found = self.summaries.find(m.key)
        if found is None:
            return self.unkept.verdict(m)
        path, row = found
        reason = self.tampered.get(path)
        if reason is not None:
            return altered(m, reason, source=path), True
        return judge(m, self.summaries.summary(row), source=path), True


@dataclass(frozen=True)
class Unkept:
    """What a dataset says of the names under its runs folder that it keeps no run for,
    so a mission named by one is judged as ``--runs`` judges it."""

    #: Folders that hold no stream where ``--runs`` looks: "no stream: …", missing.
    without_stream: frozenset[str]
    #: Files that hold no record, with the lines a reader skips in each: ``--runs``
    #: reads such a file as an empty stream.
    without_records: Mapping[str, int]

    @classmethod
    def of(cls, dataset: Path) -> Unkept:
        from evalkit.eval import tables

        return cls(*tables.unkept(dataset))

    def verdict(self, m: Mission) -> tuple[Verdict, bool]:
        """The verdict of a mission with no run in the dataset, and whether anything was
        where its run would be."""
        skipped = self.without_records.get(m.key)
        if skipped is not None:
            return judge(m, summarize((), source=m.key, skipped=skipped), source=m.key), True
        if m.key in self.without_stream:
            return judge(m, None, missing=no_stream(m.key)), True
        return judge(m, None, missing=NOT_RUN), False


def beside(runs: Path | None, mapping: Mapping[str, str | Path]) -> list[Path]:
    """Where a corpus's own public key may be found: the runs folder, else each mapped
    path's folder (``Trust.local`` looks there and above)."""
    if runs is not None:
        return [runs]
    return list(dict.fromkeys(Path(p).absolute().parent for p in mapping.values()))


def _known(suite: Suite, mapping: Mapping[str, str | Path]) -> Mapping[str, str | Path]:
    """``mapping``, once every entry is checked to name a mission of the suite and a
    path where something is (a mistyped path is a usage error, as a missing --runs
    folder is). An entry for a mission of the other half is left unused, not
    refused: one list of ``--map`` entries serves ``--split train`` and ``--split
    test`` alike; but it is checked all the same, so a typo is caught whichever
    half is scored."""
    keys = {m.key for m in suite.missions}
    for key, path in mapping.items():
        if key not in keys:
            raise EvalkitError(f"bad --map: the suite has no mission {key!r}")
        if not os.path.lexists(path):
            raise EvalkitError(f"bad --map {key}={as_text(str(path))}: it does not exist")
    return mapping


def nothing_to_score(suite: str, where: str) -> EvalkitError:
    """The error when no mission of the half scored has anything where its run would be."""
    return EvalkitError(f"nothing to score: no mission of suite '{suite}' {where}")


def parse_map(entries: Iterable[str]) -> dict[str, str]:
    """``KEY=PATH`` entries of ``--map``; a malformed one is a usage error."""
    out: dict[str, str] = {}
    for entry in entries:
        key, sep, path = entry.partition("=")
        if not sep or not key or not path:
            raise EvalkitError(f"bad --map {entry!r}: write it as KEY=PATH")
        if key in out:
            raise EvalkitError(f"bad --map: mission {key!r} is mapped twice")
        out[key] = path
    return out
