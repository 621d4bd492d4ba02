"""Reading the folders the harness writes, as one shape: a scoring.

Four kinds of folder are read (docs/INTERFACES.md, "Folders the harness writes"):

* a ``score --report`` folder: ``report.json``;
* a ``run --out`` folder: ``report.json`` beside ``run.json`` (provenance);
* a ``measure --out`` folder: ``matrix.json`` and one ``report.json`` per row and repeat;
* a folder of bare runs (a ``regrade`` output, or any ``--runs`` folder), scored here
  with ``evalkit.eval.score`` when the suite is given; ``<row>/rep<n>/`` below it is read
  as a measure's layout.

A scoring is a list of configurations, each with its repeats, each repeat an
``evalkit-score`` report (``ScoreReport.to_dict()``). A lone scoring is one
configuration named ``""`` with one repeat named ``""``. Formats newer than
this evalkit reads are refused with one sentence; nothing here writes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from evalkit.errors import EvalkitError
from evalkit.eval.diff import RunKey, Side
from evalkit.eval.harness_files import (
    MATRIX_FILE,
    MATRIX_FORMAT,
    MATRIX_VERSION,
    REPORT_FILE,
    REPORT_FORMAT,
    REPORT_VERSION,
    RUN_FILE,
)
from evalkit.eval.suite import SPLITS, Suite
from evalkit.redact import redact
from evalkit.report.shapes import check_matrix, check_report

DEFAULT_BASELINE = "direct"

_REP = re.compile(r"rep(\d+)")
_USERINFO = re.compile(r"\A([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")


@dataclass
class Rep:
    label: str  # "rep1", or "" for a lone scoring
    report: dict[str, Any]
    #: The folder verdict ``source`` paths are relative to, when known.
    runs_root: Path | None = None


@dataclass
class Configuration:
    name: str  # "" for a lone scoring
    reps: list[Rep] = field(default_factory=list)
    question: str | None = None
    delta: Any = None
    status: str = "ran"
    reason: str | None = None
    #: What the configuration cannot pass whatever the agent does (measure's ``caveat``).
    caveat: str | None = None


@dataclass
class Scoring:
    path: Path
    kind: str  # "score", "run", "measure" or "runs" (scored here)
    suite: str
    split: str
    configurations: list[Configuration]
    #: Ordered (label, value) pairs for a person; values are already credential-free.
    provenance: list[tuple[str, str]] = field(default_factory=list)
    baseline: str | None = None
    #: matrix.json ``statistics``: {row: {half: {...}}}, as the measure wrote it.
    statistics: dict[str, Any] = field(default_factory=dict)
    suite_path: Path | None = None

    @property
    def ran(self) -> list[Configuration]:
        return [c for c in self.configurations if c.status == "ran" and c.reps]

    @property
    def halves(self) -> list[str]:
        present = {half for c in self.ran for r in c.reps for half in r.report.get("halves") or {}}
        return [half for half in SPLITS if half in present]

    @property
    def repeats(self) -> int:
        return max((len(c.reps) for c in self.ran), default=0)

    def name_of(self, config: Configuration | str) -> str:
        """A configuration's name for a person (a lone scoring is named after its folder)."""
        name = config if isinstance(config, str) else config.name
        return name or self.path.name or str(self.path)

    def side(self) -> Side:
        """This scoring as ``evalkit.eval.diff`` compares it."""
        verdicts: dict[RunKey, dict[str, Any]] = {}
        roots: dict[tuple[str, str], Path | None] = {}
        for config in self.ran:
            for rep in config.reps:
                roots[(config.name, rep.label)] = rep.runs_root
                for v in rep.report.get("verdicts", ()):
                    verdicts[(config.name, rep.label, v["key"])] = v

        def stream_of(run: RunKey, verdict: dict[str, Any]) -> Path | None:
            root, source = roots.get(run[:2]), verdict.get("source")
            if root is None or not source:
                return None
            path = root / source
            return path if path.is_file() else None

        return Side(label=str(self.path), suite=self.suite, verdicts=verdicts,
                    stream_of=stream_of)


def load(path: str | Path, suite: Suite | None = None) -> Scoring:
    """The scoring a folder holds; a folder of bare runs needs ``suite`` to be scored."""
    folder = Path(path)
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise EvalkitError(f"{folder} {what}; give a score, run or measure folder")
    if (folder / MATRIX_FILE).is_file():
        return _measure(folder, suite)
    if (folder / REPORT_FILE).is_file():
        return _scored(folder)
    if suite is None:
        raise EvalkitError(f"{folder} has no {REPORT_FILE} or {MATRIX_FILE}; "
                           "give --suite to score the runs in it")
    return _runs(folder, suite)


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``, or one sentence saying why it cannot be one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise EvalkitError(f"cannot read {path}: {exc.strerror or exc}") from None
    except RecursionError:
        raise EvalkitError(f"{path} nests its JSON too deeply to read; "
                           "it is not a file evalkit wrote") from None
    except (ValueError, UnicodeDecodeError) as exc:  # ValueError: bad JSON, or an int of 4300+ digits
        raise EvalkitError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise EvalkitError(f"{path} is not a JSON object")
    return data


def read_report(path: Path) -> dict[str, Any]:
    """One ``report.json``, refused when it is not a score report this evalkit reads."""
    report = read_json(path)
    _check_format(path, report, REPORT_FORMAT, REPORT_VERSION)
    if not isinstance(report.get("verdicts"), list):
        raise EvalkitError(f"{path} has no verdicts list; it is not a score report")
    check_report(report, f"{path} is not a score report evalkit reads")
    return report


def read_matrix(path: Path) -> dict[str, Any]:
    """One ``matrix.json``, refused when it is not a measure matrix this evalkit reads."""
    matrix = read_json(path)
    _check_format(path, matrix, MATRIX_FORMAT, MATRIX_VERSION)
    check_matrix(matrix, f"{path} is not a measure matrix evalkit reads")
    return matrix


def _check_format(path: Path, data: dict[str, Any], fmt: str, version: int) -> None:
    if data.get("format") != fmt:
        raise EvalkitError(f"{path} is not an {fmt} file (format {data.get('format')!r})")
    found = data.get("version")
    if not isinstance(found, int) or isinstance(found, bool):
        raise EvalkitError(f"{path} carries no {fmt} version number; it is not a file evalkit wrote")
    if found > version:
        raise EvalkitError(f"{path} is {fmt} version {found!r}, newer than this evalkit reads "
                           f"(up to {version}); upgrade evalkit")


def _scored(folder: Path) -> Scoring:
    report = read_report(folder / REPORT_FILE)
    run = read_json(folder / RUN_FILE) if (folder / RUN_FILE).is_file() else {}
    suite = str(report.get("suite", ""))
    about = run.get("suite") if isinstance(run.get("suite"), dict) else {}
    suite_path = run.get("suite_path") or about.get("path")
    spawn = next((run[k] for k in ("spawn", "spawn_line", "command") if run.get(k)), None)
    extra = {"spawn line": spawn, "jobs": run.get("jobs"), "timeout": run.get("timeout"),
             "split": report.get("split", "all"), "recordings": seals_word([report])}
    return Scoring(path=folder, kind="run" if run else "score", suite=suite,
                   split=str(report.get("split", "all")),
                   configurations=[Configuration("", [Rep("", report, folder)])],
                   provenance=provenance(run, suite, 1, extra),
                   suite_path=_suite_path(suite_path, folder))


def _measure(folder: Path, suite: Suite | None) -> Scoring:
    matrix = read_matrix(folder / MATRIX_FILE)
    prov = matrix.get("provenance") or {}
    configurations = []
    for row in matrix["rows"]:
        config = Configuration(name=row["name"], question=row.get("question"),
                               delta=row.get("delta"), status=row["status"],
                               reason=row.get("reason"),
                               caveat=row["caveat"] if isinstance(row.get("caveat"), str) else None)
        if config.status == "ran":
            for rel in row["reps"]:
                config.reps.append(_rep(folder, rel, suite))
        configurations.append(config)
    suite_name = prov.get("suite") or next(
        (r.report.get("suite") for c in configurations for r in c.reps), None) or ""
    repeats = prov.get("repeat", max((len(c.reps) for c in configurations), default=0))
    return Scoring(path=folder, kind="measure", suite=suite_name,
                   split=prov.get("split") or "all", configurations=configurations,
                   provenance=provenance(prov, suite_name, repeats,
                                         {"bounds": prov.get("bounds"), "split": prov.get("split"),
                                          "recordings": seals_word(
                                              [r.report for c in configurations for r in c.reps])}),
                   baseline=matrix.get("baseline") or DEFAULT_BASELINE,
                   statistics=matrix.get("statistics") or {},
                   suite_path=_suite_path(prov.get("suite_path"), folder))


def _rep(folder: Path, rel: str, suite: Suite | None) -> Rep:
    where = folder / rel
    label = Path(rel).name
    if (where / REPORT_FILE).is_file():
        return Rep(label, read_report(where / REPORT_FILE), where)
    if suite is not None and where.is_dir():
        return Rep(label, _score(where, suite), where)
    raise EvalkitError(f"{where} has no {REPORT_FILE}; score it, or give --suite to score it here")


def _runs(folder: Path, suite: Suite) -> Scoring:
    """A folder of bare runs: one scoring, or ``<row>/rep<n>/`` as a measure's layout."""
    rows = []
    for child in sorted(p for p in folder.iterdir() if p.is_dir()):
        reps = sorted((p for p in child.iterdir() if p.is_dir() and _REP.fullmatch(p.name)),
                      key=lambda p: int(p.name[3:]))
        if reps and child.name not in {m.key for m in suite.missions}:
            rows.append(Configuration(child.name, [Rep(p.name, _score(p, suite), p)
                                                   for p in reps]))
    if not rows:
        rows = [Configuration("", [Rep("", _score(folder, suite), folder)])]
    rows.sort(key=lambda c: (c.name != DEFAULT_BASELINE, c.name))
    reps = max(len(c.reps) for c in rows)
    return Scoring(path=folder, kind="runs", suite=suite.name, split="all", configurations=rows,
                   provenance=provenance({}, suite.name, reps,
                                         {"scored from": "the runs in this folder",
                                          "recordings": seals_word(
                                              [r.report for c in rows for r in c.reps])}),
                   baseline=DEFAULT_BASELINE if len(rows) > 1 else None, suite_path=suite.path)


def _score(runs: Path, suite: Suite) -> dict[str, Any]:
    from evalkit.eval.score import score

    report = score(suite, runs=runs).to_dict()
    # A stream may record any finite number (1e300 tokens): the report reads what it scored
    # here by the same rule as what it reads from a report.json.
    check_report(report, f"cannot report the runs scored from {runs}")
    return report


def _suite_path(value: Any, folder: Path) -> Path | None:
    if not isinstance(value, str) or not value:
        return None
    given = Path(value)
    for candidate in (given, folder / given):
        if candidate.exists():
            return candidate
    return None


def seals_word(reports: list[dict[str, Any]]) -> str | None:
    """Whether the streams behind these reports were checked against their seals (a report
    from before seals says neither, and nothing is shown)."""
    said = {r.get("verified") for r in reports} - {None}
    if not said:
        return None
    if said == {True}:
        return "checked against their seals"
    return "NOT checked against their seals (--no-verify)" if said == {False} else \
        "partly NOT checked against their seals (--no-verify)"


#: What every report's provenance names, recorded or not.
PROVENANCE = ("suite", "commit", "model", "provider", "endpoint", "date", "repeats")
NOT_RECORDED = "not recorded"


def provenance(source: dict[str, Any], suite: str, repeats: Any,
               extra: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, text) pairs: the fixed items first, then ``extra``; credentials never shown."""
    values = {**source, "suite": suite, "repeats": repeats}
    out = []
    for key in (*PROVENANCE, *extra):
        value = extra[key] if key in extra else values.get(key)
        if value is None or value == "":
            if key in PROVENANCE:
                out.append((key, NOT_RECORDED))
            continue
        text = safe_endpoint(str(value)) if key == "endpoint" else _safe(_text(value))
        out.append((key, text))
    return out


#: How deep a provenance value (or a row's delta) is spelled out; below that, "…" (a damaged
#: run.json or matrix.json nested hundreds deep would otherwise exhaust Python's recursion).
TEXT_DEPTH = 8


def _text(value: Any, depth: int = 0) -> str:
    if isinstance(value, (dict, list, tuple)) and depth >= TEXT_DEPTH:
        return "…"
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_text(v, depth + 1)}" for k, v in sorted(value.items())
                         if v is not None and v != "")
    if isinstance(value, (list, tuple)):
        return " ".join(_text(v, depth + 1) for v in value)
    return str(value)


def safe_endpoint(url: str) -> str:
    """An endpoint without credentials: no user:password, no query, nothing a key looks like."""
    # Userinfo goes before parsing: a withheld one ("[REDACTED]@host") reads as a bad IPv6.
    url = _USERINFO.sub(r"\1", url, count=1)
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return _safe(url)
    if ":" in host:
        host = f"[{host}]"
    if port is not None:
        host = f"{host}:{port}"
    if parts.scheme and host:
        url = urlunsplit((parts.scheme, host, parts.path, "", ""))
    return _safe(url)


def _safe(text: str) -> str:
    return redact(text)
