"""Verdict churn: which verdicts flipped between two scorings of one suite, and why.

Two scorings of the same suite (two ``score``/``run``/``measure`` folders, or
a recording folder and its ``regrade``) are compared run by run — the same
configuration, the same repeat, the same mission. A flip is a verdict that
passed on one side and failed on the other; each is attributed to the
machine checks whose reasons changed, and a flip that touched grounding
carries the grounding tokens and checks of both sides, read from the run's
last grounding verdict record. Counts are per half: train and test are never
blended.

This module never reads a folder's layout itself (that is the report layer's
``evalkit.report.folders``); it is handed each side as verdicts keyed by
(configuration, repeat, mission) plus a way to find a run's stream.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.eval import checks
from evalkit.eval.suite import SPLITS
from evalkit.eval.verdict import STREAM_CHECKS

DIFF_FORMAT = "evalkit-diff"
DIFF_VERSION = 1

REGRESSION, FIX = "pass→fail", "fail→pass"
FAIL_ON = ("never", "regressions", "any")

#: (configuration, repeat, mission key). A lone scoring has configuration and repeat "".
RunKey = tuple[str, str, str]

#: How an infrastructure error (the verdict's ``infra`` detail) reads as a reason.
INFRA_PREFIX = "infrastructure error: "

#: The grounding record's token lists, in the order a person reads them.
GROUNDING_TOKENS = ("unsupported", "silent", "uncited")


def check_of(reason: str) -> str:
    """The check a verdict reason sentence came from (``other`` when unknown): for reports
    whose verdicts do not name their checks (older or foreign ones)."""
    for pattern, check in _reason_patterns(checks.version()):
        if pattern.search(reason):
            return check
    return "other"


@functools.lru_cache(maxsize=2)
def _reason_patterns(_version: int) -> tuple[tuple[re.Pattern[str], str], ...]:
    """Each reason pattern and its check; the first that matches names the check."""
    found = [(f"^{re.escape(INFRA_PREFIX)}", "infra")]
    found += [(pattern, name) for name, pattern in STREAM_CHECKS]
    found += [(pattern, name) for check in checks.registered() for pattern, name in check.reasons]
    return tuple((re.compile(pattern), name) for pattern, name in found)


@dataclass
class Side:
    """One scoring, as the diff needs it."""

    label: str
    suite: str
    #: (configuration, repeat, key) -> the verdict as in report.json.
    verdicts: dict[RunKey, dict[str, Any]]
    #: Where a run's events file is, when it can be found (for grounding tokens).
    stream_of: Callable[[RunKey, dict[str, Any]], Path | None] | None = None

    def missions(self) -> set[str]:
        return {key for _, _, key in self.verdicts}

    def cells(self) -> set[tuple[str, str]]:
        return {(config, rep) for config, rep, _ in self.verdicts}


@dataclass
class Flip:
    configuration: str
    rep: str
    key: str
    flag: str
    split: str
    direction: str  # REGRESSION or FIX; "" for a failure whose reasons changed
    checks: list[str]
    removed: list[str]  # reasons only on side A
    added: list[str]  # reasons only on side B
    grounding: dict[str, Any] | None = None
    #: Which judge graded each side, when a model judge is part of the verdict
    #: (``judge_change``): a flip whose judge changed is the judge's doing.
    judge: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {"configuration": self.configuration, "rep": self.rep, "key": self.key,
               "flag": self.flag, "split": self.split, "direction": self.direction,
               "checks": self.checks, "removed": self.removed, "added": self.added,
               "grounding": self.grounding}
        if self.judge is not None:
            out["judge"] = self.judge
        return out


@dataclass
class Diff:
    a: str
    b: str
    suite: str
    flips: list[Flip]
    #: Still failing on both sides, for other reasons.
    changed: list[Flip]
    counts: dict[str, dict[str, int]]
    #: What differs between the sides when --allow-mismatch let it through; runs not compared.
    mismatch: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> int:
        return sum(1 for f in self.flips if f.direction == REGRESSION)

    def exit_code(self, fail_on: str) -> int:
        """0, or 1 when ``fail_on`` says these flips fail a CI job."""
        if fail_on not in FAIL_ON:
            raise EvalkitError(f"--fail-on takes regressions or any, not {fail_on!r}")
        if fail_on == "regressions":
            return 1 if self.regressions else 0
        if fail_on == "any":
            return 1 if self.flips else 0
        return 0

    def to_dict(self) -> dict[str, Any]:
        return {"format": DIFF_FORMAT, "version": DIFF_VERSION, "a": self.a, "b": self.b,
                "suite": self.suite, "counts": self.counts, "mismatch": self.mismatch,
                "flips": [f.as_dict() for f in self.flips],
                "changed": [f.as_dict() for f in self.changed]}


def mismatch(a: Side, b: Side) -> list[str]:
    """What makes two scorings not comparable: suite, mission set, or no shared run at all."""
    found = []
    if a.suite != b.suite:
        found.append(f"A scores suite '{a.suite}' and B scores suite '{b.suite}'")
    only_a, only_b = sorted(a.missions() - b.missions()), sorted(b.missions() - a.missions())
    if only_a or only_b:
        parts = []
        if only_a:
            parts.append(f"{len(only_a)} only in A ({_some(only_a)})")
        if only_b:
            parts.append(f"{len(only_b)} only in B ({_some(only_b)})")
        found.append("the mission sets differ: " + ", ".join(parts))
    if not a.cells() & b.cells():
        found.append(f"they share no configuration and repeat (A has {_some(_cells(a))}, "
                     f"B has {_some(_cells(b))})")
    return found


def compare(a: Side, b: Side, *, allow_mismatch: bool = False) -> Diff:
    """Flips from A to B, run by run. Refuses different suites or mission sets unless allowed."""
    found = mismatch(a, b)
    if found and not allow_mismatch:
        raise EvalkitError("refusing to compare: " + "; ".join(found)
                           + " (pass --allow-mismatch to compare what they share)")
    notes = list(found)
    unmatched = len(a.verdicts.keys() ^ b.verdicts.keys())
    if unmatched:
        notes.append(f"{unmatched} runs are on one side only and were not compared")
    counts = {half: {"compared": 0, REGRESSION: 0, FIX: 0, "unchanged": 0, "reasons_changed": 0}
              for half in SPLITS}
    flips: list[Flip] = []
    changed: list[Flip] = []
    for run in sorted(a.verdicts.keys() & b.verdicts.keys()):
        va, vb = a.verdicts[run], b.verdicts[run]
        half = counts.setdefault(vb.get("split") or "train", dict.fromkeys(counts["train"], 0))
        half["compared"] += 1
        pa, pb = bool(va.get("passed")), bool(vb.get("passed"))
        ra = [*(va.get("reasons") or ()), *_infra(va)]
        rb = [*(vb.get("reasons") or ()), *_infra(vb)]
        if pa == pb and (pa or ra == rb or set(ra) == set(rb)):
            half["unchanged"] += 1
            continue
        direction = "" if pa == pb else (REGRESSION if pa else FIX)
        removed = [r for r in ra if r not in rb]
        added = [r for r in rb if r not in ra]
        flip = Flip(configuration=run[0], rep=run[1], key=run[2], flag=vb.get("flag") or "",
                    split=vb.get("split") or "", direction=direction,
                    checks=_checks(removed, va) + [c for c in _checks(added, vb)
                                                   if c not in _checks(removed, va)],
                    removed=removed, added=added)
        flip.judge = judge_change(va.get(JUDGE), vb.get(JUDGE))
        if flip.judge is not None and flip.judge["changed"] and JUDGE not in flip.checks:
            flip.checks.append(JUDGE)  # a judgment "not judged" under the new judge is its doing
        if direction:
            half[direction] += 1
            if _touches_grounding(flip, va, vb):
                flip.grounding = grounding_change(_grounding_of(a, run, va),
                                                  _grounding_of(b, run, vb))
            flips.append(flip)
        else:
            half["reasons_changed"] += 1
            changed.append(flip)
    order = {half: i for i, half in enumerate(SPLITS)}

    def by_half(flip: Flip) -> tuple[int, str, str, str]:
        return order.get(flip.split, len(order)), flip.configuration, flip.rep, flip.key

    return Diff(a.label, b.label, b.suite if a.suite == b.suite else f"{a.suite} / {b.suite}",
                sorted(flips, key=by_half), sorted(changed, key=by_half), counts, notes)


#: The check (and the verdict's note) of a model judge (``evalkit.eval.checks.judge``).
JUDGE = "judge"


def judge_change(a: Any, b: Any) -> dict[str, Any] | None:
    """Which judge graded each side and what it said; ``changed`` names what differs of the
    judge itself (``model``, ``prompt``), empty when the same judge graded both. None when
    neither side was judged by a model."""
    if not isinstance(a, dict) and not isinstance(b, dict):
        return None

    def side(note: Any) -> dict[str, Any] | None:
        if not isinstance(note, dict):
            return None
        return {"model": note.get("model"), "prompt": note.get("prompt"),
                "grade": note.get("grade")}

    sa, sb = side(a), side(b)
    changed = [name for name in ("model", "prompt")
               if (sa or {}).get(name) != (sb or {}).get(name)]
    return {"a": sa, "b": sb, "changed": changed}


def _infra(verdict: dict[str, Any]) -> list[str]:
    """The failure taxonomy's infrastructure error (``run``/``measure`` add it), as a reason."""
    detail = verdict.get("infra")
    return [f"{INFRA_PREFIX}{detail}"] if detail else []


def _checks(reasons: Iterable[str], verdict: dict[str, Any]) -> list[str]:
    """The checks behind some of a verdict's reasons: its own ``checks`` when it carries
    them (evalkit verdicts do), else read from the sentences (older or foreign reports)."""
    own = dict(zip(verdict.get("reasons") or (), verdict.get("checks") or (), strict=False))
    return list(dict.fromkeys(own.get(r) or check_of(r) for r in reasons))


def _touches_grounding(flip: Flip, va: dict[str, Any], vb: dict[str, Any]) -> bool:
    if va.get("missing") or vb.get("missing"):
        return False  # a run on one side only: its grounding is not what changed
    if "expects_grounded" in flip.checks:
        return True
    ka, kb = va.get("kpis") or {}, vb.get("kpis") or {}
    if any(ka.get(k) != kb.get(k) for k in ("grounded", "verified", "repairs")):
        return True
    return "answered_with_caveat" in (ka.get("outcome"), kb.get("outcome")) \
        and ka.get("outcome") != kb.get("outcome")


def _grounding_of(side: Side, run: RunKey, verdict: dict[str, Any]) -> dict[str, Any] | None:
    """The last grounding verdict record (``repairing`` not true) of a run's stream."""
    if side.stream_of is None:
        return None
    path = side.stream_of(run, verdict)
    if path is None:
        return None
    from evalkit.store.reader import read_events_file  # only flips that touch grounding pay

    try:
        records = read_events_file(path).records
    except EvalkitError:
        return None
    last = None
    for record in records:
        if record.get("event") == "grounding" and record.get("repairing") is not True:
            last = record
    return last


def grounding_change(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any]:
    """Which grounding tokens and checks differ between two grounding records."""
    out: dict[str, Any] = {"a": _grounding_view(a), "b": _grounding_view(b),
                           "tokens": {}, "checks": []}
    for name in GROUNDING_TOKENS:
        ta, tb = _tokens(a, name), _tokens(b, name)
        gained, lost = [t for t in tb if t not in ta], [t for t in ta if t not in tb]
        if gained or lost:
            out["tokens"][name] = {"gained": gained, "lost": lost}
    ca, cb = _check_verdicts(a), _check_verdicts(b)
    for name in dict.fromkeys([*ca, *cb]):
        if ca.get(name) != cb.get(name):
            out["checks"].append({"check": name, "a": ca.get(name), "b": cb.get(name)})
    return out


def _grounding_view(record: dict[str, Any] | None) -> dict[str, Any] | None:
    if record is None:
        return None
    view = {k: record.get(k) for k in ("grounded", "verified", "repairs")}
    view.update({name: _tokens(record, name) for name in GROUNDING_TOKENS})
    view["checks"] = _check_verdicts(record)
    return view


def _tokens(record: dict[str, Any] | None, name: str) -> list[str]:
    value = (record or {}).get(name)
    if not isinstance(value, list):
        return []
    return [v if isinstance(v, str) else str(v) for v in value]


def _check_verdicts(record: dict[str, Any] | None) -> dict[str, str | None]:
    """``checks[]`` as name -> verdict; a check's name is its ``check``/``name``/``kind``."""
    out: dict[str, str | None] = {}
    checks = (record or {}).get("checks")
    for i, entry in enumerate(checks if isinstance(checks, list) else ()):
        if isinstance(entry, dict):
            name = entry.get("check") or entry.get("name") or entry.get("kind") or f"check {i + 1}"
            out[str(name)] = entry.get("verdict")
    return out


def _cells(side: Side) -> list[str]:
    return [f"{c or '(one configuration)'}{'/' + r if r else ''}" for c, r in sorted(side.cells())]


def _some(items: list[str], shown: int = 5) -> str:
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more
