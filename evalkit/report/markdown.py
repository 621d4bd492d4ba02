"""The score report as files: ``report.json`` for programs, ``report.md`` for people.

Both are pure functions of the verdicts: no timestamp, no absolute path, so
the same runs give the same bytes and a report can be committed and diffed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from evalkit.errors import EvalkitError


@dataclass
class Rendered:
    """A scored report, rendered: what ``score`` prints or writes."""

    passed: bool
    #: The JSON report in parts, to write one after another (``b"".join`` is the whole).
    json: list[bytes] | None
    markdown: str | None


def to_json(report: dict[str, Any]) -> str:
    """The report as indented JSON text (see ``to_json_bytes``)."""
    return to_json_bytes(report).decode()


def to_json_bytes(report: dict[str, Any]) -> bytes:
    """The report as indented UTF-8 JSON; orjson because a 100k-mission report is ~150 MB.

    Key order is the report's own (insertion) order, verdicts last. A value
    orjson cannot write (an integer past 64 bits) falls back to the standard
    library.
    """
    head = {k: v for k, v in report.items() if k != "verdicts"}
    return stitch_json(head, [encode_verdicts(report.get("verdicts", []))])


def encode_verdicts(verdicts: list[dict[str, Any]]) -> bytes:
    """Verdicts as they sit inside the report's list: indented, comma-separated.

    Runs of verdicts encoded apart (by the processes of a fan-out) are
    joined by ``stitch_json`` into the bytes one encoding would give.
    """
    if not verdicts:
        return b""
    try:
        text = orjson.dumps(verdicts, option=orjson.OPT_INDENT_2)
    except TypeError:
        text = json.dumps(verdicts, indent=2, ensure_ascii=False, allow_nan=False).encode()
    # "[\n  {...},\n  {...}\n]" -> each line two levels deeper, brackets dropped. A raw
    # newline only ever separates tokens: JSON writes one inside a string as \n.
    return b"  " + text[2:-2].replace(b"\n", b"\n  ")


def stitch_json(head: dict[str, Any], runs: list[bytes]) -> bytes:
    """The report ``head`` (every field but the verdicts) followed by runs of encoded verdicts."""
    return b"".join(json_parts(head, runs))


def json_parts(head: dict[str, Any], runs: list[bytes]) -> list[bytes]:
    """``stitch_json``'s bytes as parts to write one after another (no 150 MB join)."""
    try:
        text = orjson.dumps(head, option=orjson.OPT_INDENT_2)
    except TypeError:
        text = json.dumps(head, indent=2, ensure_ascii=False, allow_nan=False).encode()
    opening = text[:-2] + b",\n  " if head else b"{\n  "
    body = [run for run in runs if run]
    if not body:
        return [opening, b'"verdicts": []\n}\n']
    parts = [opening, b'"verdicts": [\n']
    for i, run in enumerate(body):
        parts += [b",\n", run] if i else [run]
    return [*parts, b"\n  ]\n}\n"]


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
    rows, failures = render_verdicts(report["verdicts"], report["halves"])
    return stitch_markdown(report, rows, failures)


#: Per half, lines rendered from its verdicts: table rows, or why-they-failed lines.
HalfLines = dict[str, list[str]]


def render_verdicts(verdicts: list[dict[str, Any]], halves: Any) -> tuple[HalfLines, HalfLines]:
    """(table rows, failure lines) per half, for the verdicts of those halves, in order.

    Lines of runs of verdicts rendered apart add up (list concatenation per half).
    """
    rows: HalfLines = {half: [] for half in halves}
    failures: HalfLines = {half: [] for half in halves}
    for v in verdicts:
        half = v["split"]
        if half not in rows:
            continue
        k = v["kpis"]
        word = "MISSING" if v["missing"] else ("pass" if v["passed"] else "FAIL")
        rows[half].append(f"| {_cell(v['key'])} | {v['flag']} | {word} | {_cell(k['outcome'])} | "
                          f"{_cell(k['steps'])} | {_cell(k['tool_calls'])} | {_cell(k['tokens'])} | "
                          f"{_cell(k['grounded'])} |")
        if not v["passed"]:
            failures[half].append(f"- **{v['key']}** ({v['flag']})")
            failures[half].extend(f"  - {reason}" for reason in v["reasons"])
    return rows, failures


def stitch_markdown(report: dict[str, Any], rows: HalfLines, failures: HalfLines) -> str:
    """The report's markdown from its head (``halves``, ``suite``) and rendered verdict lines."""
    lines = [f"# Suite `{report['suite']}`", ""]
    halves = report["halves"]
    overall = " · ".join(f"{half}: {_rate(h['totals'])}" for half, h in halves.items())
    lines += [f"**Overall** — {overall or 'no missions'} (halves are never blended)", ""]
    for half, data in halves.items():
        t = data["totals"]
        lines += [f"## {half}", "",
                  f"{_rate(t)}; {t['missing']} missing; mean steps {_cell(t['mean_steps'])}, "
                  f"mean wall {_cell(t['mean_wall_s'])} s, mean tokens {_cell(t['mean_tokens'])}; "
                  f"human interventions {t['human_interventions']}, "
                  f"rejected replies {t['reply_rejected']}", ""]
        lines += ["| mission | flag | verdict | outcome | steps | tool calls | tokens | grounded |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += rows[half]
        lines += ["", "| flag | missions | passed | missing | success |", "|---|---|---|---|---|"]
        for flag, ft in data["by_flag"].items():
            rate = "—" if ft["success_rate"] is None else f"{ft['success_rate'] * 100:.0f}%"
            lines.append(f"| {flag} | {ft['missions']} | {ft['passed']} | {ft['missing']} | {rate} |")
        lines += ["", f"### Why they failed ({half})", ""]
        lines += failures[half] or ["Nothing failed."]
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def write_report(report: dict[str, Any], folder: Path) -> tuple[Path, Path]:
    """Write ``report.json`` and ``report.md`` into ``folder`` (created if needed)."""
    return write_rendered(folder, to_json_bytes(report), to_markdown(report))


def write_rendered(folder: Path, json_bytes: bytes | list[bytes], markdown: str
                   ) -> tuple[Path, Path]:
    """Write an already rendered report's two files into ``folder`` (the JSON maybe in parts)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        json_path, md_path = folder / "report.json", folder / "report.md"
        with open(json_path, "wb") as out:
            out.writelines([json_bytes] if isinstance(json_bytes, bytes) else json_bytes)
        md_path.write_text(markdown, encoding="utf-8")
    except OSError as exc:
        raise EvalkitError(f"cannot write the report to {folder}: {exc.strerror or exc}") from None
    return json_path, md_path
