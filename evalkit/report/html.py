"""The HTML report and the HTML diff: one self-contained file each.

Everything is inline (CSS, a few lines of JavaScript that sort tables and
filter transcripts, the charts as SVG): no network, no CDN, and the page reads in full
with JavaScript off. Rendered by jinja2 with autoescaping on; the only markup
not escaped is the SVG matplotlib drew. The output is a pure function of the
folders read — no timestamp beyond the provenance they carry — so the same
input gives the same bytes.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.eval.diff import FIX, REGRESSION, Diff
from evalkit.eval.suite import SPLITS, Suite, SuiteError, load_suite
from evalkit.redact import redact, redact_obj
from evalkit.report import charts
from evalkit.report.folders import TEXT_DEPTH, Scoring
from evalkit.report.kpis import category, halves
from evalkit.report.markdown import too_small, write_file
from evalkit.report.overwrite import Output
from evalkit.report.transcript import Limits, Transcript, transcript
from evalkit.store.layout import as_text

#: How many rubric changes the report lists, newest first.
RUBRIC_CHANGES_SHOWN = 10

#: The ``<meta name="generator">`` in the head of every page evalkit writes
#: (templates/_base.html.j2): how a file is known to be one of them.
GENERATOR = "evalkit"
GENERATOR_MARKER = f'<meta name="generator" content="{GENERATOR}">'.encode()
#: How much of an existing file is read to find the marker: it sits a few lines in.
MARKER_WITHIN = 4096

_ENV = None


def environment():
    """The jinja2 environment: package templates, autoescape on, undefined names are errors."""
    global _ENV
    if _ENV is None:
        import jinja2

        env = jinja2.Environment(
            loader=jinja2.PackageLoader("evalkit.report", "templates"),
            autoescape=True, undefined=jinja2.StrictUndefined,
            trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        )
        env.filters.update(pct=pct, num=num, interval=interval, sortkey=sortkey, plain=plain)
        env.globals["generator"] = GENERATOR
        _ENV = env
    return _ENV


def pct(value: float | None, signed: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value * 100:+.1f}%" if signed else f"{value * 100:.1f}%"


def num(value: float | int | None, digits: int = 1) -> str:
    if value is None:
        return "—"
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.{digits}f}"


def interval(value: tuple[float, float] | None, signed: bool = False) -> str:
    if value is None:
        return "—"
    return f"[{pct(value[0], signed)}, {pct(value[1], signed)}]"


def plain(value: Any, depth: int = 0) -> str:
    """A JSON value for a person: lists joined, mappings as ``key: value``, nothing as —;
    "…" below ``TEXT_DEPTH`` levels, as provenance is shown."""
    if value is None or value == "" or value == [] or value == {}:
        return "—"
    if isinstance(value, (dict, list, tuple)) and depth >= TEXT_DEPTH:
        return "…"
    if isinstance(value, dict):
        shown = [f"{k}: {plain(v, depth + 1)}" for k, v in sorted(value.items())
                 if v not in (None, "", [], {})]
        return "; ".join(shown) or "—"
    if isinstance(value, (list, tuple)):
        return " ".join(plain(v, depth + 1) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def sortkey(value: Any) -> str:
    """A ``data-sort`` value: numbers as plain numbers, nothing as an empty string."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float)):
        return repr(value)
    return str(value)


def suite_for(scoring: Scoring, suite: Suite | None) -> tuple[Suite | None, str | None]:
    """The suite the scoring was made from (for prompts and rubric changes), or why not."""
    if suite is not None:
        return suite, None
    if scoring.suite_path is None:
        return None, "give --suite to list the suite's rubric changes and prompts"
    try:
        return load_suite(scoring.suite_path), None
    except SuiteError as exc:
        return None, f"the suite at {scoring.suite_path} cannot be loaded: {exc.message}"


def report_html(scoring: Scoring, suite: Suite | None = None) -> str:
    """The KPI report of a score, run or measure folder."""
    suite, suite_note = suite_for(scoring, suite)
    # The suite's own words were never through an emitter: scrubbed here, like the streams.
    prompts = {m.key: (redact(m.prompt), redact(m.because))
               for m in suite.missions} if suite else {}
    parts = []
    limits = Limits.for_runs(sum(len(r.report.get("verdicts", ())) for c in scoring.ran
                                 for r in c.reps))
    for half in halves(scoring, prompts):
        costed = any(r.mean_cost is not None or r.mean_tokens is not None for r in half.kpis)
        drawn = {"pass_rates": charts.pass_rates(half.kpis, half.name),
                 "quality_cost": charts.quality_cost(half.kpis, half.name) if costed else None}
        if half.paired:
            drawn["paired"] = charts.paired(half.paired, scoring.name_of(scoring.baseline or ""),
                                            half.name)
        shown, runs = transcripts(scoring, half.name, len(parts), limits)
        parts.append({"half": half, "charts": drawn, "transcripts": shown, "runs": runs,
                      "repeated": any(len(ran) > 1 for ran in runs.values()),
                      "show_cost": any(r.mean_cost is not None for r in half.kpis),
                      "show_k": max((r.k or 0 for r in half.kpis), default=0),
                      "show_infra": any(r.infra for r in half.kpis),
                      "show_process": any(r.mean_process_s is not None for r in half.kpis),
                      "show_boot": any(r.bootstrap for r in half.kpis)})
    changes = sorted(redact_obj(list(suite.rubric_changes)) if suite else (),
                     key=lambda c: str(c.get("date") or ""), reverse=True)
    return environment().get_template("report.html.j2").render(
        scoring=scoring, halves=parts, suite=suite, suite_note=suite_note, judged=judged(scoring),
        limits=limits, small=next((too_small(r.report) for c in scoring.ran for r in c.reps), None),
        rubric_changes=changes[:RUBRIC_CHANGES_SHOWN], rubric_total=len(changes),
        newest={c.get("key"): c for c in reversed(changes)},
        rows=[c for c in scoring.configurations if c.question or c.delta or c.status != "ran"],
    )


def judged(scoring: Scoring) -> list[tuple[str, dict[str, Any]]]:
    """Per configuration that ran, the judge's agreement with the machine checks and with
    other judges (``evalkit.eval.judging.agreement``), over all its repeats; only those
    with a judged verdict."""
    from evalkit.eval.judging import agreement

    found = []
    for config in scoring.ran:
        seen = agreement([v for rep in config.reps for v in rep.report.get("verdicts") or ()])
        if seen["machine"] or seen["judges"]:
            found.append((scoring.name_of(config), seen))
    return found


def transcripts(scoring: Scoring, half: str, part: int, limits: Limits | None = None
                ) -> tuple[list[Transcript], dict[tuple[str, str], list[Transcript]]]:
    """Every run of the half as a transcript, and each (configuration, mission)'s runs in
    repeat order: a cell of the grid or the missions table is only as good as the runs it
    lets a reader open."""
    shown: list[Transcript] = []
    runs: dict[tuple[str, str], list[Transcript]] = {}
    for config in scoring.ran:
        name = scoring.name_of(config) if len(scoring.ran) > 1 else ""
        for rep in config.reps:
            for verdict in rep.report.get("verdicts", ()):
                if verdict.get("split") != half:
                    continue
                t = transcript(f"t{part}-{len(shown)}", verdict, rep.runs_root, name, rep.label,
                               category(verdict), limits)
                runs.setdefault((scoring.name_of(config), str(verdict.get("key"))), []).append(t)
                shown.append(t)
    return shown, runs


def diff_html(diff: Diff) -> str:
    """The flip table of a diff, per half."""
    order = {half: i for i, half in enumerate(SPLITS)}
    by_half: dict[str, list[Any]] = {}
    for flip in sorted(diff.flips, key=lambda f: order.get(f.split, len(order))):
        by_half.setdefault(flip.split, []).append(flip)
    return environment().get_template("diff.html.j2").render(
        diff=diff, by_half=by_half, REGRESSION=REGRESSION, FIX=FIX,
        show_config=any(f.configuration or f.rep for f in (*diff.flips, *diff.changed)))


#: A page: written only over nothing, an empty file, or a page evalkit wrote
#: (``evalkit.report.overwrite``).
PAGE = Output("the HTML", "report.html", GENERATOR_MARKER, MARKER_WITHIN,
              "it is not an HTML page evalkit wrote")


def check_target(path: Path) -> None:
    """Refuse ``path`` as where a page goes unless writing it there loses nothing."""
    PAGE.check_target(path)


def write(text: str, path: Path) -> Path:
    """Write a page to ``path`` whole, if ``check_target`` lets it replace what is there."""
    check_target(path)
    try:
        if path.parent and not path.parent.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, [as_text(text).encode("utf-8")])  # a folder's name may not be UTF-8
    except OSError as exc:
        raise EvalkitError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path
