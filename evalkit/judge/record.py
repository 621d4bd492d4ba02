"""Asking the judge for every judged mission of a suite, and recording each judgment.

A judgment is filed under its key (``evalkit.eval.judging.key_of``); a key already
in the run's ``judge/judge.jsonl`` is never asked again, so running ``evalkit
judge`` twice costs the second time nothing, and a judgment once recorded is the
one every later ``score`` reads. Each line is redacted like any recording and
written whole (flushed and fsync'd) before the next question; after each run
the folder is sealed with a manifest of its own (kind ``judgments``), so
``verify`` checks the judgments and the run's own seal stays as the run left it.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.eval import judging
from evalkit.eval.score import Altered, fold, locate, missions_in
from evalkit.eval.suite import Mission, Suite
from evalkit.judge.models import Endpoint, Judge, Scripted
from evalkit.redact import redact_obj
from evalkit.store import layout
from evalkit.store.seal import Checker, entry_of, write_manifest
from evalkit.store.signing import Signer

#: The manifest kind of a judgments folder's seal.
SEAL_KIND = "judgments"
#: The ``judge:`` settings ``--model``/``--scripted`` replace: which judge, not what it grades.
JUDGE_SETTINGS = ("model", "base_url", "api_key_env", "scripted")


@dataclass
class Outcome:
    """What one ``evalkit judge`` did, mission by mission."""

    asked: list[str] = field(default_factory=list)
    recorded_already: list[str] = field(default_factory=list)
    #: Mission key -> why it was not judged this time (no run, no answer, …).
    skipped: dict[str, str] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)
    #: Judgments folders sealed, and whether a signer was there to sign them.
    sealed: int = 0
    signed: bool = True

    def summary(self) -> str:
        parts = [f"asked {len(self.asked)}", f"{len(self.recorded_already)} already recorded"]
        if self.skipped:
            parts.append(f"{len(self.skipped)} not judged")
        if self.unreadable:
            parts.append(f"{len(self.unreadable)} replies could not be read")
        return "judged: " + ", ".join(parts)


def judge_runs(suite: Suite, runs: Path, *, override: Mapping[str, Any] | None = None,
               endpoint: str | None = None, split: str = "all", signer: Signer | None,
               checker: Checker | None = None,
               on_asked: Callable[[str, dict[str, Any]], None] = lambda *_: None) -> Outcome:
    """Ask the judge of every judged mission of ``suite`` whose run under ``runs`` has an
    answer with no judgment recorded under its key, and record what it says.

    ``override``: judge settings laid over each mission's (``--model``, ``--scripted``:
    another judge of the same rubric, e.g. to measure two judges' agreement);
    ``endpoint``: the base URL for a model judge whose settings give none.
    """
    if not runs.is_dir():
        raise EvalkitError(f"{runs} is not a folder of runs")
    override = dict(override or {})
    if override.keys() & {"model", "scripted"}:  # another judge: none of the old one's wire
        override = {k: None for k in JUDGE_SETTINGS} | override
    outcome = Outcome(signed=signer is not None)
    judges: dict[tuple[str, str | None], Judge] = {}
    for m in missions_in(suite, split):
        if "judge" not in m.settings:
            continue
        settings = {k: v for k, v in {**m.judge, **override}.items() if v is not None}
        problem = next(judging.problems(settings, suite_dir=suite.path.parent), None)
        if problem is not None:
            raise EvalkitError(f"mission {m.key!r} field 'judge' {problem}")
        spec = judging.spec_of(settings)
        one = _judge_one(m, spec, runs, checker, lambda s=spec: _judge_for(
            judges, s, suite, endpoint), outcome, signer)
        if one is not None:
            on_asked(m.key, one)
    return outcome


def _judge_for(judges: dict[tuple[str, str | None], Judge], spec: judging.Spec, suite: Suite,
               endpoint: str | None) -> Judge:
    """One judge object per judge, made when first needed (no endpoint is dialled, and no
    SDK imported, for a run in which every key was recorded already)."""
    url = endpoint or spec.base_url
    ident = (spec.judge_id, spec.scripted or url)
    if ident not in judges:
        judges[ident] = (Scripted(suite.path.parent / spec.scripted) if spec.scripted
                         else Endpoint(spec, url))
    return judges[ident]


def _judge_one(m: Mission, spec: judging.Spec, runs: Path, checker: Checker | None,
               judge: Callable[[], Judge], outcome: Outcome,
               signer: Signer | None) -> dict[str, Any] | None:
    loc = locate(runs, m.key)
    if loc.events is None:
        outcome.skipped[m.key] = loc.missing or "no stream"
        return None
    found = fold(loc, checker)
    if isinstance(found, Altered):
        outcome.skipped[m.key] = found.reason
        return None
    if found is None or isinstance(found, str):
        outcome.skipped[m.key] = found or "no stream"
        return None
    if not found.answered or found.answer is None:
        outcome.skipped[m.key] = "no answer was recorded"
        return None
    answer = found.answer
    rubric = judging.rubric_of(spec, m.prompt, m.must, m.must_not)
    rubric_digest = judging.digest(rubric)
    version = judging.prompt_version(spec.template)
    key = judging.key_of(rubric_digest, answer, spec.judge_id, version)
    if key in (found.judgments or {}):
        outcome.recorded_already.append(m.key)
        return None
    messages = judging.messages(spec, rubric, answer)
    said = judge().ask(messages, mission=m.key, answer=answer)
    if said is None:
        outcome.skipped[m.key] = f"the scripted judge {spec.scripted} has no judgment for it"
        return None
    grade, problem = judging.parse_grade(said.content)
    line = {
        "key": key, "at": _now(), "mission": m.key, "judge": spec.judge_id, "prompt": version,
        "rubric": rubric_digest, "answer": judging.answer_digest(answer),
        "request": {"model": spec.model, "messages": messages, **(said.request or {})},
        "reply": {"content": said.content, "usage": said.usage},
        "grade": grade["grade"] if grade else None,
        "score": grade["score"] if grade else None,
        "reasons": grade["reasons"] if grade else [],
        "usage": said.usage, "problem": problem,
    }
    line = redact_obj(line)
    assert loc.events is not None
    path = judging.judgments_path(loc.events)
    if signer is None and (path.parent / layout.MANIFEST_FILE).exists():
        raise EvalkitError(f"{path.parent} is sealed and there is no key to seal it again "
                           "(a judgment added unsigned would read as tampering)")
    _append(path, line)
    outcome.asked.append(m.key)
    if problem is not None:
        outcome.unreadable.append(m.key)
    _seal(path, signer, outcome)
    return line


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _append(path: Path, line: dict[str, Any]) -> None:
    """One canonical JSON line, flushed and fsync'd (a torn last line is the reader's to skip)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(line, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            + "\n").encode("utf-8")
    try:
        with open(path, "ab") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        raise EvalkitError(f"cannot record the judgment in {path}: "
                           f"{exc.strerror or exc}") from None


def _seal(path: Path, signer: Signer | None, outcome: Outcome) -> None:
    if signer is None:
        return
    with open(path, "rb") as handle:
        data = handle.read()
    write_manifest(path.parent, {layout.JUDGE_FILE: entry_of(data, chained=True)}, signer,
                   kind=SEAL_KIND)
    outcome.sealed += 1
