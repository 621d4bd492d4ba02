"""Scoring a suite against recordings: locate each mission's stream, summarise
it (plain JSONL fold or DuckDB), judge it, and total per half and per flag.

Train and test are never blended: every total below is per half. A declared
mission with no run stays in the denominator, so a half that never started
cannot show 100%.
"""

from __future__ import annotations

import math
import os
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.eval.harness_files import REPORT_FORMAT, REPORT_VERSION
from evalkit.eval.suite import SPLITS, Mission, Suite
from evalkit.eval.summary import RunSummary, pack, summarize, unpack
from evalkit.eval.verdict import NOT_RUN, Verdict, altered, judge
from evalkit.store.layout import as_text, no_stream, resolve_events, resolve_relative
from evalkit.store.reader import file_bytes, parse_bytes
from evalkit.store.seal import Checker

ENGINES = ("auto", "python", "duckdb")
#: The plain fold (fanned out over the cores) beats DuckDB reading JSONL at every size
#: measured (benchmarks/bench_scoring.py), so ``auto`` reads JSONL in Python; DuckDB
#: earns its start-up when scoring from a Parquet dataset.
DUCKDB_FROM = None


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


@dataclass
class ScoreReport:
    suite: str
    split: str
    engine: str
    verdicts: list[Verdict]
    #: Whether each stream was checked against its seal (``--no-verify``: not).
    verified: bool = True

    @property
    def all_passed(self) -> bool:
        return all(v.passed for v in self.verdicts)

    def halves(self) -> dict[str, dict[str, Any]]:
        """Totals per half, and per flag within each half (one pass over the verdicts)."""
        return halves_dict(tally_halves(self.verdicts, self.split))

    def head(self) -> dict[str, Any]:
        """The report without its verdicts (they go last, so a fan-out can stitch them on)."""
        return report_head(self.suite, self.split, self.all_passed, self.halves(),
                           self.verified)

    def to_dict(self) -> dict[str, Any]:
        return {**self.head(), "verdicts": [v.as_dict() for v in self.verdicts]}


#: Per half: the half's totals, and its totals per flag.
HalfTotals = dict[str, tuple["_Totals", dict[str, "_Totals"]]]


def tally_halves(verdicts: Iterable[Verdict], split: str) -> HalfTotals:
    """Running totals of ``verdicts`` per half and flag; those of shares of a report add up."""
    found: HalfTotals = {half: (_Totals(), {}) for half in SPLITS if split in ("all", half)}
    for v in verdicts:
        if v.split in found:
            flags = found[v.split][1]
            (flags.get(v.flag) or flags.setdefault(v.flag, _Totals())).add(v)
    # Each verdict has one flag, so a half's totals are its flags' (exact: see _Totals),
    # added up once here rather than verdict by verdict.
    for whole, flags in found.values():
        for each in flags.values():
            whole.merge(each)
    return found


def merge_halves(into: HalfTotals, other: HalfTotals) -> None:
    for half, (whole, flags) in other.items():
        mine, my_flags = into[half]
        mine.merge(whole)
        for flag, t in flags.items():
            if flag in my_flags:
                my_flags[flag].merge(t)
            else:
                my_flags[flag] = t


def halves_dict(found: HalfTotals) -> dict[str, dict[str, Any]]:
    return {half: {"totals": whole.as_dict(),
                   "by_flag": {flag: t.as_dict() for flag, t in sorted(flags.items())}}
            for half, (whole, flags) in found.items()}


def report_head(suite: str, split: str, passed: bool, halves: dict[str, Any],
                verified: bool) -> dict[str, Any]:
    return {"format": REPORT_FORMAT, "version": REPORT_VERSION, "suite": suite, "split": split,
            "passed": passed, "verified": verified, "halves": halves}


def totals(verdicts: list[Verdict]) -> dict[str, Any]:
    """Counts and means over one group of verdicts (never across halves)."""
    found = _Totals()
    for v in verdicts:
        found.add(v)
    return found.as_dict()


class _Totals:
    """Running counts and sums of one group; ``as_dict`` is what a report shows.

    Integer KPIs are summed exactly and float ones kept and summed with
    ``math.fsum`` (exactly rounded), so a mean does not depend on the order
    the verdicts came in or on how a fan-out split them.
    """

    __slots__ = ("missions", "missing", "passed", "human", "rejected", "ints", "floats", "counts")

    #: The means a report shows, and the KPI each is taken over (scored runs that carry it).
    MEANS = (("mean_steps", "steps"), ("mean_wall_s", "elapsed_s"), ("mean_tokens", "tokens"))

    def __init__(self) -> None:
        self.missions = self.missing = self.passed = self.human = self.rejected = 0
        self.ints = [0, 0, 0]
        self.floats: list[array[float]] = [array("d"), array("d"), array("d")]
        self.counts = [0, 0, 0]

    def add(self, v: Verdict) -> None:
        self.missions += 1
        self.passed += v.passed
        if v.missing:
            self.missing += 1
            return
        kpis = v.kpis
        for i, (_, name) in enumerate(self.MEANS):
            value = kpis[name]
            if value is not None:
                if type(value) is int:
                    self.ints[i] += value
                else:
                    self.floats[i].append(value)
                self.counts[i] += 1
        self.human += kpis["human_interventions"] or 0
        self.rejected += kpis["reply_rejected"] or 0

    def merge(self, other: _Totals) -> None:
        self.missions += other.missions
        self.missing += other.missing
        self.passed += other.passed
        self.human += other.human
        self.rejected += other.rejected
        for i in range(len(self.MEANS)):
            self.ints[i] += other.ints[i]
            self.floats[i].extend(other.floats[i])
            self.counts[i] += other.counts[i]

    def _mean(self, i: int) -> float | None:
        n = self.counts[i]
        if not n:
            return None
        try:
            if not self.floats[i]:
                return round(self.ints[i] / n, 3)
            return round(math.fsum([*self.floats[i], self.ints[i]]) / n, 3)
        except OverflowError:
            # A sum past the largest float (streams may carry any finite number): each
            # value divided first, still exactly summed, so still independent of order.
            parts = [value / n for value in self.floats[i]]
            return round(math.fsum([*parts, self.ints[i] / n]), 3)

    def as_dict(self) -> dict[str, Any]:
        n = self.missions
        out = {
            "missions": n,
            "scored": n - self.missing,
            "missing": self.missing,
            "passed": self.passed,
            "failed": n - self.passed,
            "success_rate": round(self.passed / n, 4) if n else None,
        }
        for i, (mean, _) in enumerate(self.MEANS):
            out[mean] = self._mean(i)
        out["human_interventions"] = self.human
        out["reply_rejected"] = self.rejected
        return out


def missions_in(suite: Suite, split: str) -> list[Mission]:
    if split not in ("all", *SPLITS):
        raise EvalkitError(f"--split takes train, test or all, not {split!r}")
    return [m for m in suite.missions if split == "all" or m.split == split]


def locate(missions: list[Mission], runs: Path | None,
           mapping: Mapping[str, str | Path]) -> list[Located]:
    """Find each mission's events file: an explicit --map entry first, then --runs/<key>."""
    return [_locate(target) for target in _targets(missions, runs, mapping)]


@dataclass(frozen=True)
class _Target:
    """Where to look for one mission's stream (``path`` None: nowhere, so not run)."""

    key: str
    path: Path | None
    label: str | None
    base: Path | None


def _targets(missions: list[Mission], runs: Path | None,
             mapping: Mapping[str, str | Path]) -> list[_Target]:
    """Where ``locate`` looks, with ``--runs`` checked first (no stream is opened; the
    ``--map`` entries are checked by ``_known``)."""
    if runs is not None and not runs.is_dir():
        what = "is not a folder" if runs.exists() else "does not exist"
        raise EvalkitError(f"--runs {runs} {what}")
    targets = []
    for m in missions:
        if m.key in mapping:
            targets.append(_Target(m.key, Path(mapping[m.key]), str(mapping[m.key]), None))
        elif runs is not None:
            targets.append(_Target(m.key, runs / m.key, None, runs))
        else:
            targets.append(_Target(m.key, None, None, None))
    return targets


def _locate(target: _Target, checker: Checker | None = None) -> Located:
    key, base = target.key, target.base
    label = as_text(target.label) if target.label is not None else None
    if target.path is None:
        return Located(key, None, None, NOT_RUN)
    events = resolve_events(target.path, checker.listed if checker is not None
                            and checker.wants_listings else None)
    if events is None:
        if not os.path.exists(target.path):
            return Located(key, None, label, NOT_RUN)
        return Located(key, None, label, no_stream(label or target.path.name))
    if label is None and base is not None:
        label = _relative_posix(events, base)
    return Located(key, events, as_text(label or events.as_posix()))


def _relative_posix(path: Path, base: Path) -> str:
    """``path.relative_to(base).as_posix()`` for a path found below ``base``, minus pathlib's cost."""
    text, prefix = os.fspath(path), os.path.join(os.fspath(base), "")
    if text.startswith(prefix) and os.sep == "/":
        return text[len(prefix):]
    return path.relative_to(base).as_posix()


Found = dict[str, "RunSummary | Altered | str"]


def summaries_python(targets: list[_Target], *, workers: int | None = None,
                     checker: Checker | None = None) -> tuple[list[Located], Found]:
    """The plain path: locate and fold each stream; large sets fan out over the cores.

    Locating is part of each share, not done before it: on a slow file system
    the few system calls per mission cost a fifth of scoring 10,000 runs. With
    ``workers`` > 1 this process takes one share itself while forked workers
    take the others (a parent that only waited would leave a core idle), and
    the workers send back plain tuples, which cross the pipe several times
    faster than the dataclasses.
    """
    workers = workers if workers is not None else _workers_for(len(targets))
    if workers <= 1:
        return _unpacked([_locate_and_fold(targets, checker)], len(targets))
    import multiprocessing

    chunks = [targets[i::workers] for i in range(workers)]  # interleaved: even shares
    with multiprocessing.get_context("fork").Pool(workers - 1) as pool:
        pending = pool.starmap_async(_locate_and_fold, [(c, checker) for c in chunks[1:]],
                                     chunksize=1)
        first = _locate_and_fold(chunks[0], checker)
        return _unpacked([first, *pending.get()], len(targets))


#: Runs each process must have to fold before one more is forked: below it the fork
#: and sending the summaries back (a few milliseconds, then ~10 µs a run) cost more
#: than sharing the fold (~0.1 ms a run) saves.
PARALLEL_FROM = 500


def _workers_for(runs: int) -> int:
    if runs < PARALLEL_FROM:
        return 1
    return max(1, min(len(os.sched_getaffinity(0)), runs // PARALLEL_FROM))


_Packed = tuple[str, "str | None", "str | None", "str | None", Any]


def _locate_and_fold(targets: list[_Target], checker: Checker | None = None) -> list[_Packed]:
    """Per target: its ``Located`` fields, then its summary packed (``pack``), why it
    has none, or None when it has no stream."""
    out: list[_Packed] = []
    for target in targets:
        loc = _locate(target, checker)
        found = fold(loc, checker)
        events = os.fspath(loc.events) if loc.events is not None else None
        out.append((loc.key, events, loc.source, loc.missing,
                    pack(found) if isinstance(found, RunSummary) else found))
    return out


def locate_under(key: str, runs: Path, checker: Checker | None = None) -> Located:
    """``locate`` for one mission of a ``--runs`` folder (telling ``checker`` what it lists)."""
    return _locate(_Target(key, runs / key, None, runs), checker)


def fold(loc: Located, checker: Checker | None = None) -> RunSummary | Altered | str | None:
    """The summary of a located stream, why it has none, or None when there is no stream.

    With a ``checker``, the bytes read are first checked against the stream's seal, and
    a stream altered after it was closed is never folded as if it were the run.
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
    return summarize(read.records, read.lines, source=loc.source, skipped=read.skipped)


def judged(m: Mission, loc: Located, found: RunSummary | Altered | str | None) -> Verdict:
    """The verdict of a mission from what ``fold`` found for it."""
    if isinstance(found, RunSummary):
        return judge(m, found, source=loc.source)
    if isinstance(found, Altered):
        return altered(m, found.reason, source=loc.source)
    return judge(m, None, source=loc.source, missing=found or loc.missing)


def _unpacked(shares: list[list[_Packed]], total: int) -> tuple[list[Located], Found]:
    """The shares' results back in the targets' order (share i holds targets i, i+n, ...)."""
    located: list[Located] = [None] * total  # type: ignore[list-item]
    found: Found = {}
    for i, share in enumerate(shares):
        for at, (key, events, source, missing, summary) in zip(
                range(i, total, len(shares)), share, strict=True):
            located[at] = Located(key, Path(events) if events is not None else None,
                                  source, missing)
            if summary is not None:
                found[key] = summary if isinstance(summary, (str, Altered)) else unpack(summary)
    return located, found


def summaries_duckdb(located: list[Located], checker: Checker | None = None) -> Found:
    from evalkit.eval import tables  # DuckDB is imported only on this path

    out: Found = {}
    if checker is not None:  # DuckDB reads the files itself: the seals are checked first
        for loc in located:
            if loc.events is not None:
                found = fold(loc, checker)
                if isinstance(found, (Altered, str)):
                    out[loc.key] = found
        located = [loc for loc in located if loc.key not in out]
    files = [loc.events for loc in located if loc.events is not None]
    root = Path(os.path.commonpath([str(f.parent) for f in files])) if files else Path(".")
    by_path = tables.summaries_via_duckdb(root, files)
    for loc in located:
        if loc.events is None:
            continue
        found = by_path.get(loc.events.relative_to(root).as_posix())
        if found is None:
            out[loc.key] = f"no stream: cannot read {loc.events}"
            continue
        found.source = loc.source
        out[loc.key] = found
    return out


def score(suite: Suite, *, runs: str | Path | None = None,
          mapping: Mapping[str, str | Path] | None = None, dataset: str | Path | None = None,
          split: str = "all", engine: str = "auto", verify: bool = True,
          checker: Checker | None = None) -> ScoreReport:
    """Verdicts for every mission of ``suite`` in ``split`` from recorded streams.

    Each stream is checked against its seal (``evalkit.store.seal``) unless ``verify``
    is False; ``checker`` says which keys are trusted and whether unsigned streams are
    refused (default: ``Checker.for_scoring`` of the runs folder or the mapped paths).
    """
    if engine not in ENGINES:
        raise EvalkitError(f"--engine takes one of {', '.join(ENGINES)}, not {engine!r}")
    if dataset is not None and (runs is not None or mapping):
        raise EvalkitError("score from --dataset or from --runs/--map, not both: a dataset "
                           "holds the runs it was ingested from, and nothing would be mixed in")
    missions = missions_in(suite, split)
    if dataset is not None:
        return _score_dataset(suite, missions, Path(dataset), split, verify)
    runs_path = Path(runs) if runs is not None else None
    targets = _targets(missions, runs_path, _known(suite, mapping or {}))
    if verify and checker is None:
        checker = Checker.for_scoring(beside(runs_path, mapping or {}))
    checker = checker if verify else None
    if checker is not None and runs_path is not None and runs_path.is_dir():
        checker.warm(runs_path)  # before any fork: the workers inherit it
    chosen = engine if engine != "auto" else (
        "duckdb" if DUCKDB_FROM is not None and len(targets) >= DUCKDB_FROM else "python")
    if chosen == "duckdb":
        located = [_locate(target, checker) for target in targets]
        _require_a_stream(located, suite, runs_path)
        found = summaries_duckdb(located, checker)
    else:
        located, found = summaries_python(targets, checker=checker)
        _require_a_stream(located, suite, runs_path)
    verdicts = [judged(m, loc, found.get(m.key))
                for m, loc in zip(missions, located, strict=True)]
    return ScoreReport(suite.name, split, chosen, verdicts, verify)


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


def _require_a_stream(located: list[Located], suite: Suite, runs: Path | None) -> None:
    if not any(loc.there for loc in located):
        raise nothing_to_score(suite.name, runs_where(runs))


def runs_where(runs: Path | None) -> str:
    return f"has a run under {runs}" if runs is not None else "has a run at its --map path"


def dataset_where(dataset: Path) -> str:
    return f"has a run in {dataset}"


def nothing_to_score(suite: str, where: str) -> EvalkitError:
    """The error when no mission of the half scored has anything where its run would be
    (``where``: ``*_where``)."""
    return EvalkitError(f"nothing to score: no mission of suite '{suite}' {where}")


def _score_dataset(suite: Suite, missions: list[Mission], dataset: Path, split: str,
                   verify: bool) -> ScoreReport:
    from evalkit.eval import tables

    by_path = tables.summaries_from_dataset(dataset)
    tampered = tables.altered(dataset) if verify else {}
    unkept = Unkept.of(dataset)
    under = tables.by_mission_folder(by_path)
    verdicts, there = [], False
    # A summary is let go once its last mission is judged: at 100k runs that
    # is a tenth of peak memory. (A key twice in a suite, which check reports,
    # is judged twice from the same summary.)
    uses = Counter(m.key for m in missions)
    for m in missions:
        rel = resolve_relative(m.key, under.get(m.key, ()))
        uses[m.key] -= 1
        if rel is None:
            verdict, found = unkept.verdict(m)
            verdicts.append(verdict)
            there = there or found
        else:
            there = True
            summary = by_path[rel] if uses[m.key] else by_path.pop(rel)
            reason = tampered.get(rel)
            verdicts.append(judge(m, summary, source=rel) if reason is None
                            else altered(m, reason, source=rel))
    if not there:  # as from a runs folder
        raise nothing_to_score(suite.name, dataset_where(dataset))
    return ScoreReport(suite.name, split, "duckdb", verdicts, verify)


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
