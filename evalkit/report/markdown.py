"""The score report as files: ``report.json`` for programs, ``report.md`` for people.

Both are pure functions of the verdicts: no timestamp, no absolute path, so
the same runs give the same bytes and a report can be committed and diffed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

from evalkit.errors import EvalkitError


def to_json(report: dict[str, Any]) -> str:
    """The report as indented JSON text (see ``to_json_bytes``)."""
    return to_json_bytes(report).decode()


def to_json_bytes(report: dict[str, Any]) -> bytes:
    """The report as indented UTF-8 JSON; orjson because a 100k-mission report is ~150 MB.

    Key order is the report's own (insertion) order. A value orjson cannot
    write (an integer past 64 bits) falls back to the standard library.
    """
    try:
        return orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
    except TypeError:
        return (json.dumps(report, indent=2, ensure_ascii=False, allow_nan=False)
                + "\n").encode()


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "—"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _rate(totals: dict[str, Any]) -> str:
    rate = totals["success_rate"]
    shown = "—" if rate is None else f"{rate * 100:.0f}%"
    return f"{totals['passed']}/{totals['missions']} passed ({shown})"


def to_markdown(report: dict[str, Any]) -> str:
    """Per half: the per-mission table, the by-flag table, and why they failed."""
    lines = [f"# Suite `{report['suite']}`", ""]
    halves = report["halves"]
    overall = " · ".join(f"{half}: {_rate(h['totals'])}" for half, h in halves.items())
    lines += [f"**Overall** — {overall or 'no missions'} (halves are never blended)", ""]
    for half, data in halves.items():
        verdicts = [v for v in report["verdicts"] if v["split"] == half]
        t = data["totals"]
        lines += [f"## {half}", "",
                  f"{_rate(t)}; {t['missing']} missing; mean steps {_cell(t['mean_steps'])}, "
                  f"mean wall {_cell(t['mean_wall_s'])} s, mean tokens {_cell(t['mean_tokens'])}; "
                  f"human interventions {t['human_interventions']}, "
                  f"rejected replies {t['reply_rejected']}", ""]
        lines += ["| mission | flag | verdict | outcome | steps | tool calls | tokens | grounded |",
                  "|---|---|---|---|---|---|---|---|"]
        for v in verdicts:
            k = v["kpis"]
            word = "MISSING" if v["missing"] else ("pass" if v["passed"] else "FAIL")
            lines.append(f"| {_cell(v['key'])} | {v['flag']} | {word} | {_cell(k['outcome'])} | "
                         f"{_cell(k['steps'])} | {_cell(k['tool_calls'])} | {_cell(k['tokens'])} | "
                         f"{_cell(k['grounded'])} |")
        lines += ["", "| flag | missions | passed | missing | success |", "|---|---|---|---|---|"]
        for flag, ft in data["by_flag"].items():
            rate = "—" if ft["success_rate"] is None else f"{ft['success_rate'] * 100:.0f}%"
            lines.append(f"| {flag} | {ft['missions']} | {ft['passed']} | {ft['missing']} | {rate} |")
        failed = [v for v in verdicts if not v["passed"]]
        lines += ["", f"### Why they failed ({half})", ""]
        if not failed:
            lines.append("Nothing failed.")
        for v in failed:
            lines.append(f"- **{v['key']}** ({v['flag']})")
            lines.extend(f"  - {reason}" for reason in v["reasons"])
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def write_report(report: dict[str, Any], folder: Path) -> tuple[Path, Path]:
    """Write ``report.json`` and ``report.md`` into ``folder`` (created if needed)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        json_path, md_path = folder / "report.json", folder / "report.md"
        json_path.write_bytes(to_json_bytes(report))
        md_path.write_text(to_markdown(report), encoding="utf-8")
    except OSError as exc:
        raise EvalkitError(f"cannot write the report to {folder}: {exc.strerror or exc}") from None
    return json_path, md_path
