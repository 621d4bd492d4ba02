"""``measure``: one suite over a matrix of configurations, with repeats and statistics.

The matrix is data (``MATRIX``): each row names the question it answers and the
one delta it applies to the baseline — flags added to the spawn line, or a
manifest variant (its ``grounding:`` frontmatter edited, written to
``DIR/<row>/skill.md`` and passed as the primary ``--skill``). ``direct`` is
the baseline: the ordinary loop with every grounding tier stripped; every
other row is the baseline plus exactly one change, so a difference between a
row and ``direct`` is that change's doing.

A row the manifest or the agent cannot honour is **skipped with the reason**,
never run under a false name: a grounding row with no manifest (or no block to
derive the tier from), a row whose flag the agent refuses at startup. The
refusal is learnt from a probe — the row's first mission of rep 1, which is
kept as a real run when the agent accepts it — so nothing is spent twice.

Runs land in ``DIR/<row>/rep<n>/<key>/`` exactly as ``run`` lays them out, each
rep scored into ``DIR/<row>/rep<n>/report.json``; ``evalkit score --runs
DIR/<row>/rep<n>`` re-derives any of them offline, and ``measure --rescore``
re-derives the whole matrix. ``DIR/matrix.json`` holds provenance, the rows and
the statistics (all computed by ``evalkit.eval.stats``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from evalkit import __version__
from evalkit.errors import EvalkitError
from evalkit.eval import staging, stats
from evalkit.eval.check import gradeable
from evalkit.eval.harness_files import (
    MATRIX_FILE,
    MATRIX_FORMAT,
    MATRIX_MD,
    MATRIX_VERSION,
    REPORT_FILE,
)
from evalkit.eval.runner import (
    Agent,
    Job,
    Progress,
    ReportWriter,
    Spending,
    agent_for,
    agent_identity,
    check_executor,
    commit,
    execute,
    executor_session,
    fresh_folder,
    gate,
    json_text,
    make_jobs,
    now,
    refusal,
    score_folder,
    spawn_skill,
    spawn_value,
)
from evalkit.eval.score import missions_in
from evalkit.eval.suite import SPLITS, Mission, Suite
from evalkit.store.replace import replace_file, replace_files

if TYPE_CHECKING:
    from evalkit.pricing import Pricing

BASELINE = "direct"

#: Grounding keys that are tiers of their own; the basic tier is everything else.
DEEP_TIERS: tuple[str, ...] = ("must_cite", "claim_table", "planes")

# How a row edits the manifest's grounding block.
STRIP, BASIC, MUST_CITE, CLAIM_TABLE, PLANES = (
    "strip", "basic", "must_cite", "claim_table", "planes")


@dataclass(frozen=True)
class Row:
    """One configuration: its name, the question it answers, the delta it applies."""

    name: str
    question: str
    #: Flags added to the spawn line (before the mission's own flags).
    flags: tuple[str, ...] = ()
    #: How the manifest's ``grounding:`` block is edited (one of STRIP ... PLANES).
    grounding: str = STRIP
    #: The row changes what the model is asked (a triage call, function calls), so a
    #: scripted agent written for the json direct loop cannot honour it: the built-in
    #: agent runs it only from scripts shaped for it, ``<agents>/<row>/<key>.yaml``.
    shaped: bool = False

    def delta(self) -> dict[str, Any]:
        return {"flags": list(self.flags), "manifest": _MANIFEST_DELTA[self.grounding]}


_MANIFEST_DELTA = {
    STRIP: "grounding block removed",
    BASIC: "grounding block kept, deeper tiers (must_cite, claim_table, planes) removed",
    MUST_CITE: "basic grounding + must_cite",
    CLAIM_TABLE: "basic grounding + claim_table: true",
    PLANES: "basic grounding + the manifest's planes",
}

MATRIX: tuple[Row, ...] = (
    Row(BASELINE, "The baseline every other row is compared with: the ordinary loop, json "
                  "protocol, no grounding."),
    Row("swarm", "Does staged decomposition (triage, plan, steps, synthesis) beat the direct "
                 "loop?", flags=("--swarm",), shaped=True),
    Row("native", "Do native function calls beat the json protocol?",
        flags=("--protocol", "native"), shaped=True),
    Row("grounding", "Is basic grounding (identifiers and figures checked against tool output, "
                     "one repair turn) worth its calls?", grounding=BASIC),
    Row("must-cite", "Does requiring citations on top of basic grounding pay for itself?",
        grounding=MUST_CITE),
    Row("claim-table", "Does a checked claim table on top of basic grounding pay for itself?",
        grounding=CLAIM_TABLE),
    Row("planes", "Does checking claims of work against dispatched tools (planes) pay for "
                  "itself?", grounding=PLANES),
)
ROWS: dict[str, Row] = {row.name: row for row in MATRIX}


def select(names: Sequence[str]) -> list[Row]:
    """The rows asked for, in matrix order, the baseline always first; all when none named."""
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        raise EvalkitError(f"unknown --config {', '.join(map(repr, unknown))}; "
                           f"the matrix has {', '.join(ROWS)}")
    wanted = set(names) | {BASELINE} if names else set(ROWS)
    return [row for row in MATRIX if row.name in wanted]


# -- manifests --------------------------------------------------------------------------------


def split_manifest(text: str) -> tuple[dict[str, Any], str]:
    """A SKILL.md as (frontmatter mapping, body); no frontmatter is an empty mapping."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return {}, text
    for end in range(1, len(lines)):
        if lines[end].strip() == "---":
            try:
                front = yaml.safe_load("".join(lines[1:end])) or {}
            except yaml.YAMLError as exc:
                raise EvalkitError(f"the skill manifest's frontmatter is not YAML: {exc}") from None
            if not isinstance(front, dict):
                raise EvalkitError("the skill manifest's frontmatter is not a mapping")
            return front, "".join(lines[end + 1:])
    raise EvalkitError("the skill manifest opens a frontmatter block (---) and never closes it")


def join_manifest(front: dict[str, Any], body: str) -> str:
    dumped = yaml.safe_dump(front, sort_keys=False, allow_unicode=True) if front else ""
    return f"---\n{dumped}---\n{body}"


def derive_manifest(text: str, how: str) -> tuple[str | None, str | None]:
    """(the row's manifest text, None) or (None, why this row cannot be derived)."""
    front, body = split_manifest(text)
    block = front.get("grounding")
    if how == STRIP:
        front.pop("grounding", None)
        return join_manifest(front, body), None
    if not isinstance(block, dict):
        return None, ("the skill manifest has no grounding: block to derive grounding tiers from")
    basic = {k: v for k, v in block.items() if k not in DEEP_TIERS}
    if how == BASIC:
        tier: dict[str, Any] = {}
    elif how == MUST_CITE:
        tier = {"must_cite": block.get("must_cite") or True}
    elif how == CLAIM_TABLE:
        tier = {"claim_table": True}
    elif how == PLANES:
        if not block.get("planes"):
            return None, "the skill manifest's grounding block declares no planes to check"
        tier = {"planes": block["planes"]}
    else:  # pragma: no cover - the matrix is data checked by tests
        raise ValueError(how)
    front["grounding"] = {**basic, **tier}
    return join_manifest(front, body), None


# -- planning ---------------------------------------------------------------------------------


@dataclass
class RowPlan:
    row: Row
    agent: Agent
    status: str = "ran"
    reason: str | None = None
    skill: str | None = None
    notes: list[str] = field(default_factory=list)
    #: rep number -> the jobs of that rep (in mission order).
    jobs: dict[int, list[Job]] = field(default_factory=dict)
    captures: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)

    @property
    def ran(self) -> bool:
        return self.status == "ran"


def _plan_rows(suite: Suite, rows: Sequence[Row], agent: Agent, out: Path,
               spawn: Sequence[str] | None, missions: Sequence[Mission] = ()) -> list[RowPlan]:
    source = agent.skill if agent.builtin else _spawn_manifest(suite, spawn)
    text = None
    if source is not None:
        try:
            text = Path(source).read_text(encoding="utf-8")
        except OSError as exc:
            raise EvalkitError(f"cannot read the skill manifest {source}: "
                               f"{exc.strerror or exc}") from None
    plans = []
    for row in rows:
        plan = RowPlan(row, agent.with_skill(None))
        if row.shaped and agent.builtin:
            unshaped = _unshaped(agent, row, missions)
            if unshaped:
                plan.status, plan.reason = "skipped", unshaped
                plans.append(plan)
                continue
            agent_of_row = agent.shaped_for(row.name)
        else:
            agent_of_row = agent
        plan.agent = agent_of_row.with_skill(None)
        if text is None:
            if row.grounding != STRIP:
                plan.status, plan.reason = "skipped", (
                    "no skill manifest to derive this grounding tier from (the suite has no "
                    "skill: and the spawn line no --skill)")
            plans.append(plan)
            continue
        derived, why = derive_manifest(text, row.grounding)
        if derived is None:
            plan.status, plan.reason = "skipped", why
        else:
            folder = out / row.name
            folder.mkdir(parents=True, exist_ok=True)
            replace_file(folder / "skill.md", derived)
            plan.skill = f"{row.name}/skill.md"
            plan.agent = agent_of_row.with_skill((folder / "skill.md").resolve())
        plans.append(plan)
    return plans


def _unshaped(agent: Agent, row: Row, missions: Sequence[Mission]) -> str | None:
    """Why the suite's scripted agents cannot honour ``row``, or None when they can.

    Run from the direct loop's scripts, a swarm row loses each script's first reply to
    the triage call and a native row reads json text where it wants function calls: the
    row would report the scripts' shape, not its mechanism.
    """
    folder = (agent.agents or Path("agents")) / row.name
    if folder.is_dir():
        shaped = agent.shaped_for(row.name)
        if not missions or any(shaped.script(m.key) for m in missions):
            return None
        stem = "<key>" if agent.variant is None else f"<key>.{agent.variant}"
        return (f"{folder} holds no {stem}.yaml for these missions: this row has no scripted "
                f"agent of the chosen variant shaped for it")
    return (f"the suite's scripted agents are written for the json direct loop, and this row "
            f"changes what the model is asked ({' '.join(row.flags)}); scripts shaped for it "
            f"belong in {folder}/<key>.yaml, and there are none")


def grounding_caveat(row: dict[str, Any], missions: Sequence[Mission]) -> str | None:
    """What a row without grounding cannot pass, said beside the row.

    ``direct`` (and every row built on it without a grounding tier) removes the manifest's
    grounding block, so a mission that expects a grounding verdict fails there whatever
    the agent does: a failure of the configuration, not of the agent.
    """
    if (row.get("delta") or {}).get("manifest") != _MANIFEST_DELTA[STRIP]:
        return None
    keys = [m.key for m in missions if m.settings.get("expects_grounded") is True]
    if not keys:
        return "grounding removed"
    return (f"grounding removed: {', '.join(keys)} expect{'s' if len(keys) == 1 else ''} a "
            f"grounded answer and fail{'s' if len(keys) == 1 else ''} here by construction")


def _spawn_manifest(suite: Suite, spawn: Sequence[str] | None) -> Path | None:
    given = spawn_skill(spawn or ())
    return Path(given) if given is not None else suite.resolve("skill")


# -- measuring --------------------------------------------------------------------------------


@dataclass
class MeasureResult:
    out: Path
    matrix: dict[str, Any]


def measure_suite(suite_path: str | Path, out: Path, *, write: ReportWriter,
                  spawn: Sequence[str] | None = None, configs: Sequence[str] = (),
                  repeat: int = 1, jobs: int = 1, timeout_s: float = 600.0, split: str = "all",
                  variant: str | None = None, executor: str = "local",
                  ray_address: str | None = None, progress: bool = True,
                  warn: Callable[[str], None] = lambda _: None,
                  secrets: Sequence[str] = (), overwrite: bool = False,
                  spending: Spending | None = None) -> MeasureResult:
    """Run the matrix, score every rep, write ``matrix.json`` and ``matrix.md``.

    ``spending``: the prices every run is costed at (and passed to the built-in agent,
    with its token and cost budgets).
    """
    suite = gate(suite_path, strict=True)  # a comparison needs a held-out half
    if repeat < 1:
        raise EvalkitError(f"--repeat must be 1 or more, not {repeat}")
    if timeout_s <= 0:
        raise EvalkitError(f"--timeout must be more than 0 seconds, not {timeout_s:g}")
    check_executor(executor)
    rows = select(configs)
    missions = missions_in(suite, split)
    agent = agent_for(suite, spawn, variant, secrets)
    spending = spending or Spending()
    pricing = spending.check(agent, missions)
    agent = spending.agent(agent)
    staging.fixture_plan(suite, missions)  # refused before --out is made
    staging.serve_spec(suite)
    out = fresh_folder(out, overwrite)
    plans = _plan_rows(suite, rows, agent, out, spawn, missions)
    said: set[str] = set()
    env: dict[str, str] = {}  # what the suite's server (if any) adds to every agent's

    def jobs_of(plan: RowPlan, rep: int) -> list[Job]:
        planned, skipped = make_jobs(suite, missions, plan.agent, out / plan.row.name / f"rep{rep}",
                                     timeout_s=timeout_s, flags=plan.row.flags,
                                     label=f"{plan.row.name}/rep{rep}/", env=env)
        if rep == 1:
            for key, why in skipped.items():
                line = f"warning: {plan.row.name}: mission {key!r} is not run: {why}"
                if line not in said:
                    said.add(line)
                    warn(line)
        return planned

    with staging.serving(suite) as served, executor_session(executor, ray_address), \
            Progress(0, f"measure {suite.name}", enabled=progress) as shown:
        env.update(served.env)
        run = _Runner(jobs, executor, ray_address, shown)
        _probe(plans, jobs_of, run, warn, repeat)
        rest: list[tuple[RowPlan, int, Job]] = []
        for plan in plans:
            if not plan.ran:
                continue
            for rep in range(1, repeat + 1):
                if rep not in plan.jobs:
                    plan.jobs[rep] = jobs_of(plan, rep)
                rest += [(plan, rep, job) for job in plan.jobs[rep]
                         if (rep, job.key) not in plan.captures]
        for (plan, rep, job), capture in zip(rest, run([j for _, _, j in rest]), strict=True):
            plan.captures[(rep, job.key)] = capture
    for plan in plans:
        if plan.status == "skipped":
            warn(f"note: row {plan.row.name!r} skipped: {plan.reason}")
    provenance = _provenance(suite, agent, spawn, repeat=repeat, timeout_s=timeout_s,
                             split=split, jobs=jobs, executor=executor, variant=variant)
    if pricing is not None or spending.max_tokens is not None or spending.max_cost is not None:
        provenance["spending"] = spending.describe()
    rows_out = [_row_entry(plan, repeat) for plan in plans]
    for entry in rows_out:
        caveat = grounding_caveat(entry, missions) if entry["status"] == "ran" else None
        if caveat:
            entry["caveat"] = caveat
    matrix = assemble(suite, out, provenance, rows_out, split, write,
                      {p.row.name: p.captures for p in plans}, pricing)
    return MeasureResult(out, matrix)


class _Runner:
    def __init__(self, workers: int, executor: str, address: str | None, shown: Progress) -> None:
        self.workers, self.executor, self.address, self.shown = workers, executor, address, shown

    def __call__(self, jobs: list[Job]) -> list[dict[str, Any]]:
        return execute(jobs, workers=self.workers, executor=self.executor, progress=self.shown,
                       ray_address=self.address)


def _probe(plans: list[RowPlan], jobs_of: Callable[[RowPlan, int], list[Job]], run: _Runner,
           warn: Callable[[str], None], repeat: int) -> None:
    """Run each row's first mission (rep 1) and learn whether the agent accepts the row.

    A refusal that names --skill on a row that only passed the manifest to strip it
    (direct, swarm, native) is not the row's fault: the row runs without the manifest,
    noted, and is probed again. Any other refusal skips the row — except on the
    baseline, where it means the agent cannot run at all.

    The progress total is every mission the rows plan to run, known once rep 1 is
    planned: a skipped row takes its missions off it, a probe run again adds one.
    """
    pending = [p for p in plans if p.ran]
    for attempt in range(2):
        probes = []
        for plan in pending:
            first = jobs_of(plan, 1)
            plan.jobs[1] = first
            run.shown.add(len(first) * repeat if attempt == 0 else (1 if first else 0))
            if first:
                probes.append((plan, first[0]))
        captures = run([job for _, job in probes])
        pending = []
        for (plan, job), capture in zip(probes, captures, strict=True):
            said = refusal(capture, Path(job.out))
            if said is None:
                plan.captures[(1, job.key)] = capture
                continue
            skill_refused = "--skill" in said and plan.skill is not None
            if skill_refused and plan.row.grounding == STRIP:
                note = f"the agent refused --skill ({said}); the row ran without the manifest"
                warn(f"note: {plan.row.name}: {note}")
                plan.notes.append(note)
                shutil.rmtree(Path(job.out).parent)
                (Path(job.out).parent.parent / "skill.md").unlink(missing_ok=True)
                plan.skill = None
                plan.agent = plan.agent.with_skill(None, note)
                pending.append(plan)
            elif plan.row.name == BASELINE:
                raise EvalkitError(f"the agent refused the baseline row at startup: {said}")
            else:
                run.shown.add(1 - len(plan.jobs[1]) * repeat)
                rep1 = Path(job.out).parent
                rep1.rename(rep1.parent / "probe")
                plan.status = "skipped"
                plan.reason = (f"the agent refused this row at startup: {said} "
                               f"(see {plan.row.name}/probe)")
                plan.jobs.clear()
        if not pending:
            return


def _row_entry(plan: RowPlan, repeat: int) -> dict[str, Any]:
    name = plan.row.name
    reps = [f"{name}/rep{n}" for n in range(1, repeat + 1)] if plan.ran else []
    delta = plan.row.delta()
    delta["skill"] = plan.skill
    if plan.skill is None and plan.ran:
        delta["manifest"] = None
    entry: dict[str, Any] = {"name": name, "question": plan.row.question, "delta": delta,
                             "status": plan.status, "dir": name, "reps": reps,
                             "reports": [f"{r}/{REPORT_FILE}" for r in reps]}
    if plan.reason is not None:
        entry["reason"] = plan.reason
    if plan.notes:
        entry["notes"] = list(plan.notes)
    return entry


def _provenance(suite: Suite, agent: Agent, spawn: Sequence[str] | None, **settings: Any
                ) -> dict[str, Any]:
    line = list(spawn or ())
    provider, model, endpoint = agent_identity(agent, spawn, settings["variant"])
    steps = spawn_value(line, "--mission-steps")
    seconds = spawn_value(line, "--mission-seconds")
    return {
        "suite": suite.name, "suite_path": str(suite.path), "commit": commit(), "date": now(),
        "evalkit": __version__, "provider": provider, "model": model,
        "endpoint": endpoint,
        "spawn": agent.describe(), "agent": (settings["variant"] or "good")
        if agent.builtin else None,
        "repeat": settings["repeat"], "split": settings["split"],
        "bounds": {"timeout_s": settings["timeout_s"], "mission_steps": steps,
                   "mission_seconds": seconds},
        "jobs": settings["jobs"], "executor": settings["executor"],
    }


# -- scoring and statistics -------------------------------------------------------------------


def assemble(suite: Suite, out: Path, provenance: dict[str, Any], rows: list[dict[str, Any]],
             split: str, write: ReportWriter,
             captures: dict[str, dict[tuple[int, str], dict[str, Any]]] | None = None,
             pricing: Pricing | None = None) -> dict[str, Any]:
    """Score every rep of every row that ran, then the statistics; write matrix.json/.md.

    ``captures`` are what the harness saw per (rep, key); without them (``--rescore``)
    each mission's ``command.json`` is read back. ``pricing`` costs every run again from
    its recorded tokens; without it each run's cost is what its stream recorded.
    """
    missions = missions_in(suite, split)
    outcomes: dict[str, dict[str, dict[str, list[str]]]] = {}
    costs: dict[str, dict[str, dict[str, list[Any]]]] = {}
    for row in rows:
        if row["status"] != "ran":
            continue
        halves: dict[str, dict[str, list[str]]] = {}
        spent: dict[str, dict[str, list[Any]]] = {}
        seen = (captures or {}).get(row["name"])
        for n, rep in enumerate(row["reps"], start=1):
            folder = out / rep
            rep_captures = None
            if seen is not None:
                rep_captures = {m.key: seen.get((n, m.key)) for m in missions}
            report = score_folder(suite, folder, split, rep_captures, pricing)
            write(report, folder)
            for verdict in report["verdicts"]:
                halves.setdefault(verdict["split"], {}).setdefault(
                    verdict["key"], []).append(verdict["category"])
                spent.setdefault(verdict["split"], {}).setdefault(
                    verdict["key"], []).append((verdict.get("kpis") or {}).get("cost"))
        outcomes[row["name"]] = halves
        costs[row["name"]] = spent
    matrix = {"format": MATRIX_FORMAT, "version": MATRIX_VERSION, "provenance": provenance,
              "baseline": BASELINE, "rows": rows,
              "statistics": statistics(outcomes, _halves(missions), costs)}
    # Together or not at all: a matrix.md beside the matrix.json of another run misleads.
    replace_files([(out / MATRIX_FILE, json_text(matrix)), (out / MATRIX_MD, to_markdown(matrix))])
    return matrix


def _halves(missions: Sequence[Mission]) -> list[str]:
    return [h for h in SPLITS if any(m.split == h for m in missions)]


def statistics(outcomes: dict[str, dict[str, dict[str, list[str]]]],
               halves: Sequence[str],
               costs: dict[str, dict[str, dict[str, list[Any]]]] | None = None) -> dict[str, Any]:
    """Per row and half: ``stats.describe_cell``, and ``vs_baseline`` (``stats.compare``);
    with ``costs`` (row -> half -> mission -> per-repeat cost), ``cost``
    (``stats.describe_cost``) and ``cost_vs_baseline`` (``stats.compare_cost``), null
    when no run of the cell was priced."""
    out: dict[str, Any] = {}
    base = outcomes.get(BASELINE, {})
    base_costs = (costs or {}).get(BASELINE, {})
    for name, by_half in outcomes.items():
        out[name] = {}
        mine = (costs or {}).get(name, {})
        for half in halves:
            cell = stats.describe_cell(by_half.get(half, {}))
            cell["vs_baseline"] = (None if name == BASELINE
                                   else stats.compare(base.get(half, {}), by_half.get(half, {})))
            if costs is not None:
                cell["cost"] = stats.describe_cost(mine.get(half, {}))
                cell["cost_vs_baseline"] = (
                    None if name == BASELINE
                    else stats.compare_cost(base_costs.get(half, {}), mine.get(half, {})))
            out[name][half] = cell
    return out


def rescore(suite_path: str | Path, out: Path, *, write: ReportWriter,
            pricing: Path | None = None) -> MeasureResult:
    """Re-derive every rep's report and the statistics from the runs on disk (no agent);
    ``pricing`` costs every run at that file's prices."""
    path = out / MATRIX_FILE
    try:
        matrix = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EvalkitError(f"no matrix to rescore at {path}: {exc}") from None
    if matrix.get("format") != MATRIX_FORMAT:
        raise EvalkitError(f"{path} is not an evalkit matrix")
    suite = gradeable(suite_path, refusing="nothing rescored", strict=True)
    provenance = dict(matrix["provenance"])
    provenance["rescored"] = now()
    prices = None
    if pricing is not None:
        from evalkit.pricing import load

        prices = load(pricing)
        provenance["spending"] = {**(provenance.get("spending") or {}), "pricing": str(pricing)}
    result = assemble(suite, out, provenance, matrix["rows"], provenance.get("split", "all"),
                      write, pricing=prices)
    return MeasureResult(out, result)


# -- for people -------------------------------------------------------------------------------


def _pct(value: Any) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def _span(bounds: Any) -> str:
    return "" if not bounds else f" [{bounds[0] * 100:.0f}–{bounds[1] * 100:.0f}%]"


def _delta(vs: dict[str, Any]) -> str:
    """A difference of rates in signed points, its interval in the same unit:
    ``-50 pts [-100, +24]`` (a range written ``-100–24%`` read as two rates)."""
    text = f"{vs['delta'] * 100:+.0f} pts"
    bounds = vs["interval"]
    return text if not bounds else f"{text} [{bounds[0] * 100:+.0f}, {bounds[1] * 100:+.0f}]"


def to_markdown(matrix: dict[str, Any]) -> str:
    """``matrix.md``: the rows, then per half one table of rates and comparisons."""
    p = matrix["provenance"]
    lines = [f"# Matrix — suite `{p['suite']}`", "",
             f"provider {p.get('provider') or '—'}, model {p.get('model') or '—'}, "
             f"repeat {p['repeat']}, split {p['split']}, date {p['date']}, "
             f"commit {p.get('commit') or '—'}", "",
             "| row | question | status |", "|---|---|---|"]
    for row in matrix["rows"]:
        status = row["status"] if row["status"] == "ran" else f"skipped: {row.get('reason')}"
        if row.get("caveat"):
            status += f"; {row['caveat']}"
        lines.append(f"| {row['name']} | {row['question']} | {status} |")
    for half in SPLITS:
        cells = [(name, by_half[half]) for name, by_half in matrix["statistics"].items()
                 if half in by_half]
        if not cells:
            continue
        repeat = max(c["repeat"] for _, c in cells)
        lines += ["", f"## {half}", "",
                  "| row | pass | fail | missing | infra | rate [Wilson 95%] | without infra | "
                  f"bootstrap | pass@{repeat} | pass^{repeat} | stable pass / fail / flaky | "
                  "vs baseline: delta [95%], p | verdict |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        said: list[str] = []
        for name, c in cells:
            counts, vs = c["counts"], c["vs_baseline"]
            s = c["stability"]
            versus, verdict = "baseline", "—"
            if vs is not None:
                versus = (f"{_delta(vs)}, "
                          f"p={vs['p_value']:.3g} ({vs['baseline_only']}↓ {vs['row_only']}↑)")
                verdict = stats.settle(vs["verdict"], vs["interval"])
                why = stats.disagreement(verdict, vs["p_value"])
                if why:
                    said.append(f"- **{name}**: {why}")
            lines.append(
                f"| {name} | {counts['pass']} | {counts['fail']} | {counts['missing']} | "
                f"{counts['infra']} | {_pct(c['rate']['value'])}{_span(c['rate']['wilson'])} | "
                f"{_pct(c['rate_without_infra']['value'])}"
                f"{_span(c['rate_without_infra']['wilson'])} | {_span(c['bootstrap']) or '—'} | "
                f"{_pct(c['pass_at_k'].get(str(repeat)))} | "
                f"{_pct(c['pass_hat_k'].get(str(repeat)))} | "
                f"{s['stable_pass']} / {s['stable_fail']} / {s['flaky']} | {versus} | {verdict} |")
        if said:
            lines += ["", *said]
        lines += _cost_lines(cells)
    lines += ["", "Comparisons pair each mission with itself: its outcome on each side is the "
              "majority of its non-infra repeats; p is the exact McNemar test on the missions "
              "that differ. A row is better or worse only when p < 0.05; suggestive, not "
              "significant when its interval excludes 0 and p is not below 0.05.", ""]
    return "\n".join(lines)


def _money(value: Any) -> str:
    return "—" if value is None else f"{value:.6g}"


def _money_span(bounds: Any) -> str:
    return "" if not bounds else f" [{bounds[0]:.6g}, {bounds[1]:.6g}]"


def _cost_lines(cells: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The half's cost table (when any row was priced), and "better but costs more"."""
    if not any(c.get("cost") for _, c in cells):
        return []
    lines = ["", "| row | mean cost per mission [bootstrap 95%] | runs without a cost | "
             "vs baseline: cost delta per mission [95%] |", "|---|---|---|---|"]
    said = []
    for name, c in cells:
        cost, vs = c.get("cost") or {}, c.get("cost_vs_baseline")
        versus = "baseline" if c.get("vs_baseline") is None else (
            "—" if not vs else f"{vs['delta']:+.6g}{_money_span(vs.get('interval'))}")
        lines.append(f"| {name} | {_money(cost.get('mean'))}{_money_span(cost.get('bootstrap'))}"
                     f" | {cost.get('unknown', '—')} | {versus} |")
        pass_vs = c.get("vs_baseline")
        if pass_vs is not None:
            both = stats.quality_and_cost(stats.settle(pass_vs["verdict"], pass_vs["interval"]),
                                          vs)
            if both:
                said.append(f"- **{name}**: {both}")
    return lines + (["", *said] if said else [])


__all__ = ["BASELINE", "DEEP_TIERS", "MATRIX", "ROWS", "MeasureResult", "Row", "assemble",
           "derive_manifest", "grounding_caveat", "measure_suite", "rescore", "select", "split_manifest",
           "statistics", "to_markdown"]
