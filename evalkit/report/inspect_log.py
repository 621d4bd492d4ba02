"""Scored runs as Inspect AI eval logs, so ``inspect view`` shows evalkit's missions.

Many teams read agent transcripts in Inspect's viewer. One score report (one suite
run: a ``run --out`` folder, a rep of a matrix, a folder of recordings) becomes one
eval log: a sample per mission, whose input is the objective, whose messages are the
recorded conversation as the stream tells it (tool calls and their results
included), whose output is the answer, whose score is the verdict (C or I, the
reasons as the explanation) and whose model usage is the run's recorded tokens.

Everything comes from the report and the streams it names; nothing is judged again.
The log is built from inspect_ai's own types and written by its own writer, so the
format is whatever the installed Inspect reads (the ``inspect`` extra).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.eval.harness_files import REPORT_FILE, RUN_FILE, begins_as_ours
from evalkit.store.reader import read_events_file

#: The scorer name the samples' scores and the results are filed under.
SCORER = "evalkit"
#: The model Inspect is told about when the stream does not name one.
UNKNOWN_MODEL = "evalkit/unknown"


@dataclass(frozen=True)
class Written:
    report: Path
    log: Path
    samples: int


def find_reports(runs: Path) -> list[Path]:
    """Every score report evalkit wrote under ``runs`` (one per suite run), sorted."""
    if not runs.is_dir():
        raise EvalkitError(f"no runs at {runs}: give a folder that `evalkit run`, `measure` "
                           "or `score --report` wrote into")
    found = []
    for path in sorted(runs.rglob(REPORT_FILE)):
        if any(part.startswith(".") for part in path.relative_to(runs).parts):
            continue
        with open(path, "rb") as file:
            if begins_as_ours(path.name, file.read(4096)):
                found.append(path)
    if not found:
        raise EvalkitError(f"no score report under {runs}: run `evalkit score --report` "
                           "over the runs first")
    return found


def export(runs: Path, out: Path) -> list[Written]:
    """Write one ``.eval`` log per score report under ``runs`` into ``out``."""
    from inspect_ai.log import write_eval_log

    reports = find_reports(runs)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in reports:
        try:
            report = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise EvalkitError(f"cannot read the score report {path}: {exc}") from None
        where = path.parent.relative_to(runs).as_posix()
        log = eval_log(report, path.parent, label=where)
        name = "_".join(p for p in (str(report.get("suite")), *Path(where).parts) if p != ".")
        target = out / f"{_safe(name)}.eval"
        write_eval_log(log, str(target))
        written.append(Written(path, target, len(log.samples or [])))
    return written


def eval_log(report: Mapping[str, Any], folder: Path, *, label: str) -> Any:
    """The ``inspect_ai.log.EvalLog`` of one score report whose runs are under ``folder``."""
    from inspect_ai.log import (
        EvalConfig,
        EvalDataset,
        EvalLog,
        EvalMetric,
        EvalResults,
        EvalScore,
        EvalSpec,
        EvalStats,
    )
    from inspect_ai.model import ModelUsage

    created = _created(folder)
    samples, models = [], []
    usage: dict[str, ModelUsage] = {}
    for verdict in report.get("verdicts") or []:
        sample, model = _sample(verdict, folder)
        samples.append(sample)
        models.append(model)
        for name, used in (sample.model_usage or {}).items():
            usage[name] = usage[name] + used if name in usage else used
    model = next((m for m in models if m != UNKNOWN_MODEL), UNKNOWN_MODEL)
    passed = sum(1 for v in report.get("verdicts") or [] if v.get("passed"))
    total = len(samples)
    suite = str(report.get("suite"))
    spec = EvalSpec(
        created=created, task=suite, task_id=f"{suite}:{label}",
        dataset=EvalDataset(name=suite, samples=total,
                            sample_ids=[s.id for s in samples]),
        model=model, config=EvalConfig(),
        metadata={"evalkit_report": label, "split": report.get("split"),
                  "verified": report.get("verified")})
    results = EvalResults(total_samples=total, completed_samples=total, scores=[EvalScore(
        name=SCORER, scorer=SCORER,
        metrics={"accuracy": EvalMetric(name="accuracy",
                                        value=passed / total if total else 0.0)})])
    return EvalLog(status="success", eval=spec, results=results,
                   stats=EvalStats(started_at=created, completed_at=created, model_usage=usage),
                   samples=samples)


def _sample(verdict: Mapping[str, Any], folder: Path) -> tuple[Any, str]:
    from inspect_ai.log import EvalSample
    from inspect_ai.model import ChatMessageUser, ModelOutput, ModelUsage
    from inspect_ai.scorer import CORRECT, INCORRECT, Score

    records = _records(verdict, folder)
    started = next((r for r in records if r.get("event") == "mission_started"), {})
    model = _model(started)
    objective = str(started.get("objective") or "")
    messages = [ChatMessageUser(content=objective), *_conversation(records)]
    answers = [r for r in records if r.get("event") == "answer"]
    answer = str(answers[-1].get("text") or "") if answers else ""
    kpis = verdict.get("kpis") or {}
    reasons = [str(r) for r in verdict.get("reasons") or []]
    score = Score(value=CORRECT if verdict.get("passed") else INCORRECT, answer=answer or None,
                  explanation="; ".join(reasons) or "passed",
                  metadata={"checks": list(verdict.get("checks") or []),
                            "category": verdict.get("category"), "infra": verdict.get("infra"),
                            "missing": bool(verdict.get("missing"))})
    usage = {}
    tokens = [kpis.get(k) for k in ("prompt_tokens", "completion_tokens", "tokens")]
    if any(isinstance(t, (int, float)) for t in tokens):
        prompt, completion, total = (int(t) if isinstance(t, (int, float)) else 0 for t in tokens)
        usage[model] = ModelUsage(input_tokens=prompt, output_tokens=completion,
                                  total_tokens=total or prompt + completion,
                                  total_cost=kpis.get("cost"))
    elapsed = kpis.get("elapsed_s")
    sample = EvalSample(
        id=str(verdict.get("key")), epoch=1, input=objective or "(no recorded objective)",
        target="", messages=messages,
        output=ModelOutput.from_content(model=model, content=answer),
        scores={SCORER: score}, model_usage=usage,
        total_time=float(elapsed) if isinstance(elapsed, (int, float)) else None,
        metadata={"flag": verdict.get("flag"), "split": verdict.get("split"),
                  "source": verdict.get("source"), "outcome": kpis.get("outcome"),
                  "run_id": kpis.get("run_id"), "needs_reader": verdict.get("needs_reader")})
    return sample, model


def _conversation(records: list[dict[str, Any]]) -> Iterator[Any]:
    """The assistant's turns and the tools' replies, in the order the stream recorded them."""
    from inspect_ai.model import ChatMessageAssistant, ChatMessageTool
    from inspect_ai.tool import ToolCall, ToolCallError

    pending: dict[tuple[Any, str], list[str]] = {}
    for n, record in enumerate(records):
        event = record.get("event")
        if event == "tool_call":
            tool = str(record.get("tool"))
            call_id = f"call_{record.get('index')}_{n}"
            pending.setdefault((record.get("index"), tool), []).append(call_id)
            arguments = record.get("arguments")
            yield ChatMessageAssistant(content="", tool_calls=[ToolCall(
                id=call_id, function=tool,
                arguments=arguments if isinstance(arguments, dict) else {})])
        elif event == "tool_result":
            tool = str(record.get("tool"))
            waiting = pending.get((record.get("index"), tool)) or []
            call_id = waiting.pop(0) if waiting else f"call_{record.get('index')}_{n}"
            error = None if record.get("ok") else ToolCallError(
                type="unknown", message=str(record.get("error") or "the tool failed"))
            yield ChatMessageTool(content=str(record.get("output") or record.get("error") or ""),
                                  tool_call_id=call_id, function=tool, error=error)
        elif event == "answer":
            yield ChatMessageAssistant(content=str(record.get("text") or ""))


def _records(verdict: Mapping[str, Any], folder: Path) -> list[dict[str, Any]]:
    source = verdict.get("source")
    if not source or verdict.get("missing"):
        return []
    path = Path(source) if Path(source).is_absolute() else folder / source
    try:
        return list(read_events_file(path).records)
    except EvalkitError:
        return []


def _model(started: Mapping[str, Any]) -> str:
    """Inspect names a model ``provider/name``; the stream says it where the agent did."""
    provider, name = started.get("provider"), started.get("model")
    if isinstance(name, str) and name:
        return name if "/" in name else f"{provider or 'evalkit'}/{name}"
    return UNKNOWN_MODEL


def _created(folder: Path) -> str:
    """When the suite ran: ``run.json``'s date where the harness wrote one, else the
    report's own time (a folder of recordings scored later)."""
    for candidate in (folder / RUN_FILE, folder.parent / RUN_FILE):
        try:
            date = json.loads(candidate.read_text(encoding="utf-8")).get("date")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(date, str) and date:
            return date
    stamp = (folder / REPORT_FILE).stat().st_mtime
    return datetime.fromtimestamp(stamp, tz=timezone.utc).isoformat()


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name)


__all__ = ["SCORER", "Written", "eval_log", "export", "find_reports"]
