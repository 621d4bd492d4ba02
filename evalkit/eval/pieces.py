"""Scoring a large JSON suite in pieces that the workers parse, build, check and judge.

Loading a 100,000-mission suite in one process (parsing it, then building its
missions) took as long as judging all of them on two cores, and no worker
could share it: ``score --dataset`` on two cores ran no faster than on one.
So a large JSON suite is cut before it is parsed, and each worker parses its
own pieces.

Nothing here is a second loader, checker or judge. The cut points are found by
a cheap pattern (``}, {`` between two missions) and proved by the parses: the
head parses only if its ``[`` opened the top-level ``missions`` list, each
piece only if it is a run of whole values (so it starts and ends between
missions, never inside a string: a cut inside one leaves it unclosed), the
tail only if it closes the document. Each piece is then read by the loader's
JSON reader, built by the loader's own builder (``build_missions``), looked at
by check's rules for a mission and judged as ``score`` judges. Any doubt (a
YAML suite, a repeated key, a cut that lands inside a string) and anything
check would say, even a warning, gives None: the caller then loads and checks
the suite whole, which words what is wrong.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit import parallel
from evalkit.errors import EvalkitError
from evalkit.eval.check import Rules, Tally, mission_clean, suite_clean
from evalkit.eval.score import (
    ScoreReport,
    Share,
    check_split,
    in_split,
    judged_share,
    nothing_to_score,
    open_source,
    refuse_mixed,
)
from evalkit.eval.strict_json import loads
from evalkit.eval.suite import Suite, build_fields, build_missions
from evalkit.eval.suite_text import read_bytes, suite_file

if TYPE_CHECKING:
    from evalkit.eval.score import _Dataset, _Runs
    from evalkit.pricing import Pricing
    from evalkit.store.seal import Checker

#: From this size on a JSON suite is cut (some 1,500 missions); below it, loading it
#: whole costs less than starting a worker.
CUT_FROM = 1 << 20
#: Suite text in one piece: about 400 missions. Handing a piece out and its verdicts
#: back has a cost of its own (at 100,000 missions, pieces of 64 KB took a fifth longer
#: than pieces of 256 KB), and the last piece still keeps nobody waiting.
PIECE_BYTES = 1 << 18
#: Pieces each process must have before one more is started (``parallel.workers_for``).
PIECES_PER_WORKER = 2

#: Where each part may be: the parses decide whether it is.
_MISSIONS = re.compile(rb'"missions"[ \t\n\r]*:[ \t\n\r]*\[')
_BETWEEN = re.compile(rb"(\})[ \t\n\r]*,[ \t\n\r]*(\{)")
_CLOSE = re.compile(rb"\}[ \t\n\r]*\]")
#: An object opening after white space, matched in place (slicing a large suite to look
#: at its first byte would copy it).
_OPENS = re.compile(rb"[ \t\n\r]*\{")
_SPACE = b" \t\n\r"


@dataclass(frozen=True)
class Cut:
    """A suite file's bytes, its own fields built, and where its runs of missions are."""

    path: Path
    data: bytes
    #: The suite with its own fields and no missions.
    suite: Suite
    #: [start, end) of each run of whole mission objects, in file order.
    spans: tuple[tuple[int, int], ...]


def cut(given: Path) -> Cut | None:
    """The suite at ``given`` (a file, or a folder holding one) cut into pieces, or None
    when it is small, not JSON, or anything about it is in doubt."""
    try:
        path = suite_file(given)
        data = read_bytes(path) if path.stat().st_size >= CUT_FROM else b""
    except (EvalkitError, OSError):
        return None
    if len(data) < CUT_FROM or not _OPENS.match(data):
        return None
    opened = _MISSIONS.search(data)
    if opened is None:
        return None
    head = loads(data[:opened.end()] + b"]}")
    if not isinstance(head, dict) or list(head)[-1:] != ["missions"] or head["missions"] != []:
        return None
    start = opened.end()
    closing_at = _CLOSE.search(data, start)
    if closing_at is None or not _OPENS.match(data, start, closing_at.start()):
        return None
    tail = _tail(data[closing_at.end():])
    if tail is None or "missions" in tail or tail.keys() & head.keys():
        return None
    del head["missions"]
    suite = build_fields(path, given, {**head, **tail})
    if suite is None:
        return None
    end = closing_at.start() + 1  # just past the last mission's "}"
    return Cut(path, data, suite, tuple(_split(data, start, end, PIECE_BYTES)))


def _split(data: bytes, start: int, end: int, size: int) -> Iterator[tuple[int, int]]:
    """[start, end) cut into runs of whole mission objects of about ``size`` bytes."""
    begin = start
    while end - begin > size:
        found = _BETWEEN.search(data, begin + size, end)
        if found is None:
            break
        yield begin, found.end(1)
        begin = found.start(2)
    yield begin, end


def _tail(rest: bytes) -> dict[str, Any] | None:
    """The top-level fields after the missions list (the bytes after its ``]``)."""
    rest = rest.lstrip(_SPACE)
    if rest.startswith(b","):
        found = loads(b"{" + rest[1:])
        return found if isinstance(found, dict) else None
    return {} if rest.rstrip(_SPACE) == b"}" else None


def score_pieces(given: Path, *, runs: str | Path | None = None,
                 dataset: str | Path | None = None, split: str = "all", verify: bool = True,
                 checker: Checker | None = None, pricing: Pricing | None = None,
                 workers: int | None = None) -> ScoreReport | None:
    """``score``'s report of the suite at ``given``, scored in pieces; None when the suite
    cannot be cut, or check has anything to say of it (load and check it whole then)."""
    found = cut(given)
    if found is None:
        return None
    refuse_mixed(runs=runs, mapping=None, dataset=dataset, pricing=pricing)
    check_split(split)
    source = open_source(runs=runs, mapping={}, dataset=dataset, verify=verify,
                         checker=checker, pricing=pricing)
    job = _Job(found.path, found.data, found.suite, Rules.of(found.suite), source, split)
    if workers is None:
        workers = parallel.workers_for(len(found.spans), PIECES_PER_WORKER)
    shares, tally = [], Tally()
    with closing(parallel.ordered(_piece, found.spans, shared=job, workers=workers)) as pieces:
        for piece in pieces:
            if piece is None:
                return None
            shares.append(piece[0])
            tally.merge(piece[1])
    if not suite_clean(found.suite, tally):
        return None
    if not any(share.there for share in shares):
        raise nothing_to_score(found.suite.name, source.where)
    return ScoreReport(found.suite.name, split, shares, verify)


@dataclass(frozen=True)
class _Job:
    """What every piece reads (inherited by forked workers, never pickled)."""

    path: Path
    data: bytes
    suite: Suite
    rules: Rules
    source: _Runs | _Dataset
    split: str


def _piece(job: _Job, span: tuple[int, int]) -> tuple[Share, Tally] | None:
    """The verdicts of one piece's missions and their tally; None if anything is in doubt."""
    raw = loads(b"[" + job.data[span[0]:span[1]] + b"]")
    if not isinstance(raw, list):
        return None
    missions = build_missions(job.path, raw, job.suite.extras)
    if missions is None:
        return None
    tally = Tally()
    for m in missions:
        if not mission_clean(job.rules, m):
            return None
        tally.count(m)
    scored = [m for m in missions if in_split(m, job.split)]
    return judged_share(job.source, scored, job.split), tally


__all__ = ["CUT_FROM", "Cut", "cut", "score_pieces"]
