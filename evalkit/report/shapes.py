"""What a report.json and a matrix.json must look like for the report and diff to read them.

They are input like any other: copied, merged, edited by hand, cut short. Every
field the report, its charts and the diff read is checked here, once, so the
readers need not guard each access, and a damaged file is refused in one
sentence naming where it is damaged (file, verdict or row, field) instead of
crashing half way through a chart or being read wrongly.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.eval.suite import SPLITS

#: Verdict KPIs the report averages or sums: each is a number, or null when no stream carried it.
NUMERIC_KPIS = ("steps", "model_calls", "tokens", "cost", "elapsed_s", "human_interventions",
                "reply_rejected")
#: The largest KPI magnitude read. No run records a quadrillion steps, tokens, seconds or
#: dollars; well before float's limit (~1.8e308) a chart's axis cannot even be computed,
#: and a mean of values this size cannot overflow.
KPI_LIMIT = 1e15


def check_report(report: dict[str, Any], where: str) -> None:
    """Refuse a score report whose shape the report and diff cannot read, in one sentence.

    The sentence is ``WHERE: PROBLEM``; ``where`` names the file (or the runs scored).

    A report.json is input like any other: copied, merged, edited by hand or cut short.
    Every field the report, its charts and the diff read is checked here, once, so
    they read it without guarding each access, and a damaged file is named by where
    it is damaged (verdict index, key, field) instead of crashing half way through a
    chart or being read wrongly: ``"passed": "no"`` is truthy, and a second verdict
    with one key would silently replace the first.
    """
    for name in ("suite", "split"):
        if report.get(name) is not None and not isinstance(report[name], str):
            _refuse(where, f"its {name} is {_shown(report[name])}, not a string")
    if report.get("halves") is not None and not isinstance(report["halves"], dict):
        _refuse(where, f"its halves is {_shown(report['halves'])}, not an object")
    for half, data in (report.get("halves") or {}).items():
        problem = _half_problem(data)
        if problem:
            _refuse(where, f"its halves.{half} {problem}")
    verdicts = report.get("verdicts")
    if not isinstance(verdicts, list):
        _refuse(where, "it has no verdicts list")
    _check_named(where, verdicts, "verdicts", "key", naming="a mission key",
                 twice="both have key", called="key", problem_of=_verdict_problem)


def _check_named(where: str, items: list[Any], label: str, field: str, *, naming: str,
                 twice: str, called: str, problem_of: Callable[[dict[str, Any]], str | None]
                 ) -> None:
    """Each of ``items`` an object with its own non-empty ``field`` (a verdict's key, a
    row's name), and nothing ``problem_of`` finds wrong with the rest of it."""
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            _refuse(where, f"{label}[{i}] is {_shown(item)}, not an object")
        name = item.get(field)
        if not isinstance(name, str) or not name:
            _refuse(where, f"{label}[{i}] has {_field(item, field)}, not {naming}")
        if name in seen:
            _refuse(where, f"{label}[{seen[name]}] and {label}[{i}] {twice} {name!r}")
        seen[name] = i
        problem = problem_of(item)
        if problem:
            _refuse(where, f"{label}[{i}] ({called} {name!r}) has {problem}")


def _half_problem(data: Any) -> str | None:
    """What is wrong with one half of ``halves``, as far as the report reads it (how many
    test missions its totals count, to say a held-out half is too small)."""
    if data is None:
        return None
    if not isinstance(data, dict):
        return f"is {_shown(data)}, not an object"
    totals = data.get("totals")
    if totals is not None and not isinstance(totals, dict):
        return f"has {_field(data, 'totals')}, not an object"
    held = (totals or {}).get("missions")
    if held is not None and (isinstance(held, bool) or not isinstance(held, int)):
        return f"has {_field(totals, 'missions', 'totals.')}, not a whole number"
    return None


def _verdict_problem(v: dict[str, Any]) -> str | None:
    """What is wrong with one verdict's fields (its key aside), as ``FIELD is VALUE, not WHAT``."""
    for name in ("split", "flag"):
        if not isinstance(v.get(name), str):
            return f"{_field(v, name)}, not a string"
    for name in ("passed", "missing"):
        if not isinstance(v.get(name), bool):
            return f"{_field(v, name)}, not true or false"
    if not _strings(v.get("reasons")):
        return f"{_field(v, 'reasons')}, not a list of strings"
    if v.get("checks") is not None and not _strings(v["checks"]):
        return f"{_field(v, 'checks')}, not a list of strings"
    for name in ("source", "category", "infra"):
        if v.get(name) is not None and not isinstance(v[name], str):
            return f"{_field(v, name)}, not a string"
    reader = v.get("needs_reader")
    if reader is not None:
        if not isinstance(reader, dict):
            return f"{_field(v, 'needs_reader')}, not an object"
        for name in ("must", "must_not"):
            if reader.get(name) is not None and not _strings(reader[name]):
                return f"{_field(reader, name, 'needs_reader.')}, not a list of strings"
    kpis = v.get("kpis")
    if not isinstance(kpis, dict):
        return f"{_field(v, 'kpis')}, not an object"
    for name in NUMERIC_KPIS:
        if kpis.get(name) is not None and not _number_in_range(kpis[name]):
            return (f"{_field(kpis, name, 'kpis.')}, not a number between "
                    f"-{KPI_LIMIT:.0e} and {KPI_LIMIT:.0e}")
    if kpis.get("grounded") is not None and not isinstance(kpis["grounded"], bool):
        return f"{_field(kpis, 'grounded', 'kpis.')}, not true, false or null"
    return None


#: What a row of matrix.json may say of itself (``measure`` writes no other status).
ROW_STATUSES = ("ran", "skipped")
#: How a count is described when it is not one.
_COUNT = f"not a whole number from 0 to {KPI_LIMIT:.0e}"


def check_matrix(matrix: dict[str, Any], where: str) -> None:
    """Refuse a matrix.json whose shape the report cannot read, in one sentence.

    The sentence is ``WHERE: PROBLEM``, and a problem in the statistics names the row,
    the half and the field. Like ``check_report``, this is the one place matrix.json is
    checked, so the report reads rows, provenance, baseline and statistics without
    guarding each access: a cell written by hand or cut short (``"n": "many"``, a
    ``wilson`` of strings, NaN) was a crash half way through a table or a chart, and a
    ``"repeat": -1`` or a p-value of 7 would have been drawn as if measured.

    What ``measure`` may leave out stays optional, and null counts as left out: the
    whole ``statistics`` (the report then computes every cell with ``evalkit.eval.stats``),
    a row or half of it, a row's ``bootstrap`` (repeat 1) and ``vs_baseline`` (the
    baseline), provenance and its fields, the baseline's name.
    """
    for name in ("provenance", "statistics"):
        if matrix.get(name) is not None and not isinstance(matrix[name], dict):
            _refuse(where, f"its {name} is {_shown(matrix[name])}, not an object")
    baseline = matrix.get("baseline")
    if baseline is not None and (not isinstance(baseline, str) or not baseline):
        _refuse(where, f"its baseline is {_shown(baseline)}, not a row's name")
    problem = _provenance_problem(matrix.get("provenance") or {})
    if problem:
        _refuse(where, f"its provenance has {problem}")
    rows = matrix.get("rows")
    if not isinstance(rows, list):
        _refuse(where, f"it has {_field(matrix, 'rows')}, not a list of rows")
    _check_named(where, rows, "rows", "name", naming="a row's name", twice="are both named",
                 called="row", problem_of=_row_problem)
    for name, by_half in (matrix.get("statistics") or {}).items():
        if by_half is None:
            continue
        if not isinstance(by_half, dict):
            _refuse(where, f"the statistics of row {name!r} are {_shown(by_half)}, not an object")
        for half in SPLITS:
            cell = by_half.get(half)
            if cell is None:
                continue
            if not isinstance(cell, dict):
                _refuse(where, f"the statistics of row {name!r} ({half} half) are "
                               f"{_shown(cell)}, not an object")
            problem = _cell_problem(cell)
            if problem:
                _refuse(where, f"the statistics of row {name!r} ({half} half) have {problem}")


def _provenance_problem(prov: dict[str, Any]) -> str | None:
    """What is wrong with the provenance fields the report reads (the rest is only shown)."""
    for name in ("suite", "suite_path", "split"):
        if prov.get(name) is not None and not isinstance(prov[name], str):
            return f"{_field(prov, name)}, not a string"
    if prov.get("repeat") is not None and not _count(prov["repeat"]):
        return f"{_field(prov, 'repeat')}, {_COUNT}"
    return None


def _row_problem(row: dict[str, Any]) -> str | None:
    """What is wrong with one row's fields (its name aside)."""
    if row.get("status") not in ROW_STATUSES:
        return f"{_field(row, 'status')}, not {' or '.join(map(repr, ROW_STATUSES))}"
    for name in ("question", "reason"):
        if row.get(name) is not None and not isinstance(row[name], str):
            return f"{_field(row, name)}, not a string"
    if row.get("delta") is not None and not isinstance(row["delta"], dict):
        return f"{_field(row, 'delta')}, not an object"
    if (row["status"] == "ran" or row.get("reps") is not None) and not _strings(row.get("reps")):
        return f"{_field(row, 'reps')}, not a list of folders"
    return None


def _cell_problem(cell: dict[str, Any]) -> str | None:
    """What is wrong with one row's statistics in one half (``stats.describe_cell``'s shape,
    plus ``vs_baseline``), as ``FIELD VALUE, not WHAT``: every field the report reads."""
    from evalkit.eval import stats
    from evalkit.report.kpis import STATUS_OF_STABILITY  # kpis reads this module: not at the top

    for name in ("missions", "repeat"):
        if not _count(cell.get(name)):
            return f"{_field(cell, name)}, {_COUNT}"
    counts = cell.get("counts")
    if not isinstance(counts, dict):
        return f"{_field(cell, 'counts')}, not an object"
    for word in stats.OUTCOME_WORDS:
        if not _count(counts.get(word)):
            return f"{_field(counts, word, 'counts.')}, {_COUNT}"
    for name in ("rate", "rate_without_infra"):
        problem = _rate_problem(cell, name)
        if problem:
            return problem
    if cell.get("bootstrap") is not None and not _interval(cell["bootstrap"], 0.0):
        return f"{_field(cell, 'bootstrap')}, not null or a [low, high] pair from 0 to 1"
    for name in ("pass_at_k", "pass_hat_k"):
        table = cell.get(name)
        if not isinstance(table, dict):
            return f"{_field(cell, name)}, not an object"
        for k, value in table.items():
            if value is not None and not _within(value, 0.0, 1.0):
                return f"{name}[{k!r}] {_shown(value)}, not null or a number from 0 to 1"
        if cell["repeat"] and str(cell["repeat"]) not in table:
            return f"no {name}[{str(cell['repeat'])!r}] for its repeat {cell['repeat']}"
    per_mission = cell.get("per_mission")
    if not isinstance(per_mission, dict):
        return f"{_field(cell, 'per_mission')}, not an object"
    for key, mission in per_mission.items():
        if not isinstance(mission, dict):
            return f"per_mission[{key!r}] {_shown(mission)}, not an object"
        stability = mission.get("stability")
        if not isinstance(stability, str) or stability not in STATUS_OF_STABILITY:
            return (f"{_field(mission, 'stability', f'per_mission[{key!r}].')}, not one of "
                    f"{', '.join(STATUS_OF_STABILITY)}")
    versus = cell.get("vs_baseline")
    if versus is None:
        return None
    if not isinstance(versus, dict):
        return f"{_field(cell, 'vs_baseline')}, not null or an object"
    return _versus_problem(versus)


def _rate_problem(cell: dict[str, Any], name: str) -> str | None:
    """``stats.rate``'s shape: ``{passed, n, value, wilson}``, passed no more than n."""
    rate = cell.get(name)
    if not isinstance(rate, dict):
        return f"{_field(cell, name)}, not an object"
    for part in ("passed", "n"):
        if not _count(rate.get(part)):
            return f"{_field(rate, part, f'{name}.')}, {_COUNT}"
    if rate["passed"] > rate["n"]:
        return f"{name}.passed {rate['passed']}, more than its n {rate['n']}"
    if rate.get("value") is not None and not _within(rate["value"], 0.0, 1.0):
        return f"{_field(rate, 'value', f'{name}.')}, not null or a number from 0 to 1"
    if rate.get("wilson") is not None and not _interval(rate["wilson"], 0.0):
        return f"{_field(rate, 'wilson', f'{name}.')}, not null or a [low, high] pair from 0 to 1"
    return None


def _versus_problem(versus: dict[str, Any]) -> str | None:
    """``stats.compare``'s shape, as ``vs_baseline.FIELD VALUE, not WHAT``."""
    def field(name: str) -> str:
        return _field(versus, name, "vs_baseline.")

    for name in ("missions", "baseline_only", "row_only"):
        if not _count(versus.get(name)):
            return f"{field(name)}, {_COUNT}"
    if not _within(versus.get("delta"), -1.0, 1.0):
        return f"{field('delta')}, not a number from -1 to 1"
    if not _interval(versus.get("interval"), -1.0):
        return f"{field('interval')}, not a [low, high] pair from -1 to 1"
    if not _within(versus.get("p_value"), 0.0, 1.0):
        return f"{field('p_value')}, not a number from 0 to 1"
    if not isinstance(versus.get("verdict"), str):
        return f"{field('verdict')}, not a string"
    if versus.get("pairing") is not None and not isinstance(versus["pairing"], str):
        return f"{field('pairing')}, not a string"
    if versus.get("excluded") is not None and not _strings(versus["excluded"]):
        return f"{field('excluded')}, not a list of mission keys"
    return None


def _count(value: Any) -> bool:
    """A whole JSON number (never a bool) from 0 to ``KPI_LIMIT``."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= KPI_LIMIT


def _within(value: Any, low: float, high: float) -> bool:
    """A JSON number (never a bool) from ``low`` to ``high``; NaN and infinities fail."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return low <= value <= high  # NaN compares false; a huge int compares exactly


def _interval(value: Any, low: float) -> bool:
    """A ``[low, high]`` pair of numbers from ``low`` to 1, in that order."""
    return (isinstance(value, list) and len(value) == 2
            and all(_within(x, low, 1.0) for x in value) and value[0] <= value[1])


def _field(holder: dict[str, Any], name: str, prefix: str = "") -> str:
    """``no passed`` when the field is absent, else ``passed "no"``."""
    if name not in holder:
        return f"no {prefix}{name}"
    return f"{prefix}{name} {_shown(holder[name])}"


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _number_in_range(value: Any) -> bool:
    """A JSON number (never a bool) no larger than ``KPI_LIMIT``; NaN and infinities fail."""
    return _within(value, -KPI_LIMIT, KPI_LIMIT)


#: What JSON leaves unescaped and yet ends a line (str.splitlines): a sentence stays one line.
_LINE_BREAKS = {ord(c): f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"}


def _shown(value: Any) -> str:
    """A value as a sentence quotes it: JSON on one line, cut short (a damaged field may be
    megabytes)."""
    try:
        text = json.dumps(value, ensure_ascii=False).translate(_LINE_BREAKS)
    except (TypeError, ValueError, RecursionError):
        text = f"a {type(value).__name__}"
    return text if len(text) <= 40 else text[:39] + "…"


def _refuse(where: str, problem: str) -> None:
    raise EvalkitError(f"{where}: {problem}")


__all__ = ["KPI_LIMIT", "NUMERIC_KPIS", "ROW_STATUSES", "check_matrix", "check_report"]
