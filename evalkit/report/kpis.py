"""What a report shows, computed from a scoring: per half, never blended.

Means and sums of KPIs (steps, calls, tokens, wall, interventions, rejected
replies, grounded) are plain arithmetic over verdicts. Every rate, interval,
pass@k, stability word and paired comparison comes from ``evalkit.eval.stats``,
the one owner of statistics: the cell ``measure`` wrote into ``matrix.json``
(``stats.describe_cell`` and its ``vs_baseline``, ``stats.compare``) when it is
there, else the same two functions called here on the same verdicts — so a lone
score folder's interval is ``stats.wilson`` over its missions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalkit.eval import stats
from evalkit.eval.diff import INFRA_PREFIX
from evalkit.eval.harness_files import MATRIX_FILE
from evalkit.eval.taxonomy import load_capture
from evalkit.report.folders import Configuration, Scoring

PASS, FAIL, FLAKY, MISSING, INFRA = "pass", "fail", "flaky", "missing", "infra"
STATUS_OF_STABILITY = {"stable_pass": PASS, "stable_fail": FAIL, "flaky": FLAKY, "infra": INFRA}
#: Status order in tables, charts and legends.
STATUSES = (PASS, FAIL, FLAKY, INFRA, MISSING)


@dataclass
class KpiRow:
    """One configuration in one half, its repeats pooled."""

    name: str
    baseline: bool
    runs: int
    missions: int
    passed: int
    missing: int
    infra: int
    rate: float | None
    interval: tuple[float, float] | None  # Wilson 95% over all runs
    bootstrap: tuple[float, float] | None  # 95% resampling missions (repeats > 1)
    rate_without_infra: float | None
    mean_steps: float | None
    mean_calls: float | None
    mean_tokens: float | None
    mean_cost: float | None
    mean_wall_s: float | None  # the loop's own elapsed_s (mission_finished)
    human_interventions: int
    reply_rejected: int
    grounded: int
    grounding_verdicts: int
    source: str  # MATRIX_FILE ("matrix.json") or "evalkit.eval.stats"
    pass_at_k: float | None = None
    pass_hat_k: float | None = None
    k: int | None = None
    versus: str | None = None  # the paired verdict against the baseline
    #: The agent process's wall time as the harness measured it (command.json), start-up
    #: included; None for runs the harness did not spawn (a score of recordings).
    mean_process_s: float | None = None
    #: What this configuration fails by construction (a row without grounding).
    caveat: str | None = None
    #: 95% bootstrap over missions of the mean cost per mission (``stats.describe_cost``).
    cost_interval: tuple[float, float] | None = None

    @property
    def whiskers(self) -> tuple[float, float] | None:
        """The interval a chart draws: the mission bootstrap when there are repeats."""
        return self.bootstrap or self.interval


@dataclass
class PairedRow:
    name: str
    missions: int
    baseline_only: int
    row_only: int
    delta: float
    interval: tuple[float, float]
    p_value: float
    verdict: str
    pairing: str
    excluded: list[str]
    source: str
    #: The paired cost difference per mission against the baseline and its 95% interval
    #: (``stats.compare_cost``); None when either side was not priced.
    cost_delta: float | None = None
    cost_interval: tuple[float, float] | None = None

    @property
    def quality_and_cost(self) -> str | None:
        """"better on quality, and costs more …": both halves of the choice, said together."""
        if self.cost_delta is None:
            return None
        return stats.quality_and_cost(self.verdict, {"delta": self.cost_delta,
                                                     "interval": self.cost_interval})

    @property
    def tone(self) -> str:
        """The CSS class of the verdict's word (a verdict of several words is no class)."""
        return {"better": "better", "worse": "worse", stats.SUGGESTIVE: "suggestive"}.get(
            self.verdict, "")

    @property
    def disagreement(self) -> str | None:
        return stats.disagreement(self.verdict, self.p_value)


@dataclass
class MissionRow:
    key: str
    flag: str
    #: Per configuration, in report order: (status, passed, runs).
    cells: list[tuple[str, int, int]]
    #: Reason -> where it happened ("direct rep1, rep2; swarm rep3"), in first-seen order.
    reasons: list[tuple[str, str]]
    must: list[str] = field(default_factory=list)
    must_not: list[str] = field(default_factory=list)
    prompt: str | None = None
    because: str | None = None


@dataclass
class Half:
    name: str
    kpis: list[KpiRow]
    paired: list[PairedRow]
    missions: list[MissionRow]
    configurations: list[str]

    @property
    def failing(self) -> list[MissionRow]:
        return [m for m in self.missions if m.reasons]


def halves(scoring: Scoring, prompts: dict[str, tuple[str, str]] | None = None) -> list[Half]:
    """Per half: the KPI table, the paired comparison and the missions, never blended."""
    prompts = prompts or {}
    out = []
    for half in scoring.halves:
        configs = scoring.ran
        verdicts = {c.name: [_in_half(r.report, half) for r in c.reps] for c in configs}
        if not any(rep for reps in verdicts.values() for rep in reps):
            continue  # a half with no missions at all: nothing to show, nothing to rate
        words = {name: outcome_words(reps) for name, reps in verdicts.items()}
        spent = {name: cost_words(reps) for name, reps in verdicts.items()}
        cells = {c.name: _cell(scoring, c.name, half, words[c.name], spent[c.name])
                 for c in configs}
        paired = _paired(scoring, half, words, cells, spent)
        versus = {p.name: p.verdict for p in paired}
        rows = [_kpi_row(scoring, c, verdicts[c.name], cells[c.name], versus.get(c.name))
                for c in configs]
        missions = _missions(scoring, configs, verdicts, cells, prompts)
        out.append(Half(half, rows, paired, missions, [scoring.name_of(c) for c in configs]))
    return out


def _in_half(report: dict[str, Any], half: str) -> list[dict[str, Any]]:
    return [v for v in report.get("verdicts", ()) if v.get("split") == half]


def category(verdict: dict[str, Any]) -> str:
    """pass / fail / missing / infra: the failure taxonomy's word, or derived without it."""
    word = verdict.get("category")
    if word in stats.OUTCOME_WORDS:
        return word
    if verdict.get("passed"):
        return PASS
    return MISSING if verdict.get("missing") else FAIL


def outcome_words(reps: Sequence[Sequence[dict[str, Any]]]) -> dict[str, list[str]]:
    """Mission key -> its outcome word per repeat, in repeat order (``describe_cell``'s input)."""
    out: dict[str, list[str]] = {}
    for rep in reps:
        for v in rep:
            out.setdefault(v["key"], []).append(category(v))
    return out


def cost_words(reps: Sequence[Sequence[dict[str, Any]]]) -> dict[str, list[Any]]:
    """Mission key -> its cost per repeat (None: unknown), ``stats.describe_cost``'s input."""
    out: dict[str, list[Any]] = {}
    for rep in reps:
        for v in rep:
            out.setdefault(v["key"], []).append((v.get("kpis") or {}).get("cost"))
    return out


# -- statistics: matrix.json's cell when measure wrote it, else evalkit.eval.stats here -------


def _cell(scoring: Scoring, config: str, half: str, words: dict[str, list[str]],
          spent: dict[str, list[Any]]) -> tuple[dict[str, Any], str]:
    # shapes.check_matrix has refused any cell of another shape: absent is the only other case.
    written = (scoring.statistics.get(config) or {}).get(half)
    if written is not None:
        if "cost" not in written:  # a matrix measured before cost was: priced here
            written = {**written, "cost": stats.describe_cost(spent)}
        return written, MATRIX_FILE
    return {**stats.describe_cell(words), "cost": stats.describe_cost(spent)}, \
        "evalkit.eval.stats"


def _pair(value: Any) -> tuple[float, float] | None:
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in value):
        return (float(value[0]), float(value[1]))
    return None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def _kpi_row(scoring: Scoring, config: Configuration, reps: list[list[dict[str, Any]]],
             found: tuple[dict[str, Any], str], versus: str | None) -> KpiRow:
    cell, source = found
    flat = [v for rep in reps for v in rep]
    scored = [v["kpis"] for v in flat if not v.get("missing")]
    grounding = [k["grounded"] for k in scored if k.get("grounded") is not None]
    counts = cell.get("counts") or {}
    rate = cell.get("rate") or {}
    clean = cell.get("rate_without_infra") or {}
    repeat = int(cell.get("repeat") or len(reps))
    row = KpiRow(
        name=scoring.name_of(config), baseline=config.name == scoring.baseline,
        caveat=config.caveat,
        runs=int(rate.get("n", len(flat))), missions=int(cell.get("missions", 0)),
        passed=int(rate.get("passed", 0)), missing=int(counts.get(MISSING, 0)),
        infra=int(counts.get(INFRA, 0)), rate=_number(rate.get("value")),
        interval=_pair(rate.get("wilson")), bootstrap=_pair(cell.get("bootstrap")),
        rate_without_infra=_number(clean.get("value")),
        mean_steps=_mean(k.get("steps") for k in scored),
        mean_calls=_mean(k.get("model_calls") for k in scored),
        mean_tokens=_mean(k.get("tokens") for k in scored),
        mean_cost=_cost_mean(cell) if _cost_mean(cell) is not None
        else _mean(k.get("cost") for k in scored),
        cost_interval=_pair((cell.get("cost") or {}).get("bootstrap")
                            if isinstance(cell.get("cost"), dict) else None),
        mean_wall_s=_mean(k.get("elapsed_s") for k in scored),
        human_interventions=sum(k.get("human_interventions") or 0 for k in scored),
        reply_rejected=sum(k.get("reply_rejected") or 0 for k in scored),
        grounded=sum(1 for g in grounding if g), grounding_verdicts=len(grounding),
        source=source, versus=versus, mean_process_s=_mean(_process_seconds(config)),
    )
    if repeat >= 2:
        row.k = repeat
        row.pass_at_k = _number((cell.get("pass_at_k") or {}).get(str(repeat)))
        row.pass_hat_k = _number((cell.get("pass_hat_k") or {}).get(str(repeat)))
    return row


def _cost_mean(cell: dict[str, Any]) -> float | None:
    """The cell's mean cost per mission (``stats.describe_cost``), when it has one."""
    cost = cell.get("cost")
    return _number(cost.get("mean")) if isinstance(cost, dict) else None


def _process_seconds(config: Configuration) -> list[Any]:
    """Each spawned run's process wall time, from the ``command.json`` the harness left."""
    found = []
    for rep in config.reps:
        if rep.runs_root is None:
            continue
        for v in rep.report.get("verdicts", ()):
            capture = load_capture(rep.runs_root / str(v.get("key"))) \
                if not v.get("missing") else None
            if capture is not None:
                found.append(capture.get("wall_s"))
    return found


def _mean(values: Iterable[Any]) -> float | None:
    present = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return sum(present) / len(present) if present else None


def _paired(scoring: Scoring, half: str, words: dict[str, dict[str, list[str]]],
            cells: dict[str, tuple[dict[str, Any], str]],
            spent: dict[str, dict[str, list[Any]]]) -> list[PairedRow]:
    base = scoring.baseline
    if base is None or base not in words or len(words) < 2:
        return []
    out = []
    for config in scoring.ran:
        if config.name == base:
            continue
        cell, source = cells[config.name]
        found = cell.get("vs_baseline") if source == MATRIX_FILE else None
        if not isinstance(found, dict):
            found, source = stats.compare(words[base], words[config.name]), "evalkit.eval.stats"
        cost = cell.get("cost_vs_baseline") if "cost_vs_baseline" in cell else \
            stats.compare_cost(spent[base], spent[config.name])
        cost = cost if isinstance(cost, dict) else {}
        # stats.compare's shape, checked by shapes.check_matrix when matrix.json wrote it.
        out.append(PairedRow(
            scoring.name_of(config), int(found["missions"]), int(found["baseline_only"]),
            int(found["row_only"]), float(found["delta"]),
            _pair(found.get("interval")) or (float("nan"), float("nan")),
            float(found["p_value"]),
            stats.settle(str(found["verdict"]), _pair(found.get("interval"))),
            str(found.get("pairing") or "paired by mission"),
            [str(k) for k in found.get("excluded") or ()], source,
            cost_delta=_number(cost.get("delta")), cost_interval=_pair(cost.get("interval"))))
    return out


# -- missions -------------------------------------------------------------------------------


def status_of(words: Sequence[str], stability: str | None = None) -> str:
    """pass / fail / flaky / infra / missing for one mission in one configuration.

    ``stability`` is the statistics' word for it (over non-infra tries); a mission
    that never ran at all is ``missing`` whatever the statistics call it.
    """
    if not words or all(w == MISSING for w in words):
        return MISSING
    if stability is None:
        clean = [w == PASS for w in words if w != INFRA]
        stability = stats.stability(clean) if clean else "infra"
    return STATUS_OF_STABILITY.get(stability, FAIL)


def _missions(scoring: Scoring, configs: list[Configuration],
              verdicts: dict[str, list[list[dict[str, Any]]]],
              cells: dict[str, tuple[dict[str, Any], str]],
              prompts: dict[str, tuple[str, str]]) -> list[MissionRow]:
    by_key: dict[str, dict[str, list[tuple[str, dict[str, Any]]]]] = {}
    first: dict[str, dict[str, Any]] = {}
    for config in configs:
        for rep, rep_verdicts in zip(config.reps, verdicts[config.name], strict=True):
            for v in rep_verdicts:
                first.setdefault(v["key"], v)
                by_key.setdefault(v["key"], {}).setdefault(config.name, []).append((rep.label, v))
    rows = []
    for key, per_config in by_key.items():
        status_cells = []
        reasons: dict[str, dict[str, list[str]]] = {}
        repeats = {scoring.name_of(c) if len(configs) > 1 else "": len(c.reps) for c in configs}
        for config in configs:
            runs = per_config.get(config.name, [])
            per_mission = (cells[config.name][0].get("per_mission") or {}).get(key) or {}
            status = status_of([category(v) for _, v in runs], per_mission.get("stability"))
            status_cells.append((status, sum(1 for _, v in runs if v.get("passed")), len(runs)))
            where = scoring.name_of(config) if len(configs) > 1 else ""
            for label, v in runs:
                said = list(v.get("reasons") or ())
                if v.get("infra"):
                    said.append(f"{INFRA_PREFIX}{v['infra']}")
                for reason in said:
                    reasons.setdefault(reason, {}).setdefault(where, []).append(label)
        reader = first[key].get("needs_reader") or {}
        prompt, because = prompts.get(key, (None, None))
        rows.append(MissionRow(key=key, flag=str(first[key].get("flag", "")), cells=status_cells,
                               reasons=[(r, _where(w, repeats)) for r, w in reasons.items()],
                               must=list(reader.get("must") or ()),
                               must_not=list(reader.get("must_not") or ()),
                               prompt=prompt, because=because))
    return rows


def _where(where: dict[str, list[str]], repeats: dict[str, int]) -> str:
    """Where a reason was given: "direct rep1, rep3; native, every repeat"."""
    parts = []
    for config, labels in where.items():
        if len(labels) > 1 and len(labels) == repeats.get(config):
            reps = "every repeat"
        else:
            reps = ", ".join(label for label in labels if label)
        parts.append(", ".join(p for p in (config, reps) if p) if reps == "every repeat"
                     else " ".join(p for p in (config, reps) if p))
    return "; ".join(p for p in parts if p)
