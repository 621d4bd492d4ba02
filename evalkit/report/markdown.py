"""The score report as files: ``report.json`` for programs, ``report.md`` for people.

Both are pure functions of the verdicts: no timestamp, no absolute path, so
the same runs give the same bytes and a report can be committed and diffed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.eval.check import MIN_TEST_MISSIONS
from evalkit.eval.harness_files import REPORT_FILE, REPORT_MD, begins_as_ours
from evalkit.eval.report_json import encode_verdicts, json_parts
from evalkit.store.replace import Part, joined, replace_file, replace_files


@dataclass
class Rendered:
    """A scored report, rendered: what ``score`` prints or writes, in parts."""

    passed: bool
    json: list[Part] | None
    markdown: list[Part] | None


def write_file(path: Path, parts: list[Part]) -> Path:
    """Write the parts to ``path``, replacing it whole.

    A reader, or a score killed half way through a report of a million
    verdicts, never finds half a report where a whole one was.
    """
    return replace_file(path, parts)


def to_json(report: dict[str, Any]) -> str:
    """The report as indented JSON text (see ``to_json_bytes``)."""
    return to_json_bytes(report).decode()


def to_json_bytes(report: dict[str, Any]) -> bytes:
    """The report as indented UTF-8 JSON (``evalkit.eval.report_json``).

    Key order is the report's own (insertion) order, verdicts last.
    """
    head = {k: v for k, v in report.items() if k != "verdicts"}
    return joined(json_parts(head, [encode_verdicts(report.get("verdicts", []))]))


def _tokens(kpis: dict[str, Any]) -> str:
    """The tokens cell, and the run's cost beside them when it was priced (a cost column
    of dashes in every unpriced report would say nothing)."""
    cost = kpis.get("cost")
    return _cell(kpis["tokens"]) if cost is None else f"{_cell(kpis['tokens'])} (cost {cost:g})"


def _mean_cost(totals: dict[str, Any]) -> str:
    return "" if totals.get("mean_cost") is None else f", mean cost {totals['mean_cost']:g}"


def _cell(value: Any) -> str:
    kind = type(value)  # the two kinds most cells hold, first
    if kind is str:
        return value.replace("|", "\\|").replace("\n", " ")
    if kind is int:
        return str(value)
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "—"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _judged(totals: dict[str, Any]) -> str:
    """The judged missions of a half, with those no judgment was recorded for apart."""
    if "not_judged" not in totals:
        return ""
    return f"; judged {totals['judged']}, not judged {totals['not_judged']}"


def _rate(totals: dict[str, Any]) -> str:
    rate = totals["success_rate"]
    shown = "—" if rate is None else f"{rate * 100:.0f}%"
    return f"{totals['passed']}/{totals['missions']} passed ({shown})"


def to_markdown(report: dict[str, Any]) -> str:
    """Per half: the per-mission table, the by-flag table, and why they failed."""
    rows, failures = render_verdicts(report["verdicts"], report["halves"])
    text = joined(markdown_parts(report, {h: [lines_bytes(r)] for h, r in rows.items()},
                                 {h: [lines_bytes(f)] for h, f in failures.items()},
                                 {h: bool(f) for h, f in failures.items()})).decode("utf-8")
    judged = judge_lines(report["verdicts"])
    return text + "\n" + "".join(line + "\n" for line in judged) if judged else text


def judge_lines(verdicts: list[dict[str, Any]]) -> list[str]:
    """The judge's agreement with the machine checks per mission (where a mission has both),
    and each pair of judges' agreement over the answers both graded, with Cohen's kappa
    (``evalkit.eval.judging.agreement``, ``evalkit.eval.stats.cohen_kappa``)."""
    from evalkit.eval.judging import agreement

    found = agreement(verdicts)
    lines: list[str] = []
    if found["machine"]:
        rows = found["machine"]
        agree = sum(1 for r in rows if r["agree"])
        lines += ["## The judge and the machine checks", "",
                  f"They agree on {agree} of {len(rows)} missions that have both.", "",
                  "| mission | half | judge | machine checks | agree |", "|---|---|---|---|---|"]
        lines += [f"| {_cell(r['key'])} | {r['split']} | {r['judge']} | {r['machine']} | "
                  f"{_cell(r['agree'])} |" for r in rows]
    if found["judges"]:
        if lines:
            lines.append("")
        lines += ["## Judge against judge", "",
                  "| judge | other judge | answers | agree | Cohen's kappa |",
                  "|---|---|---|---|---|"]
        lines += [f"| {_cell(r['a'])} | {_cell(r['b'])} | {r['answers']} | {r['agree']} | "
                  f"{_cell(r['kappa']) if r['kappa'] is not None else '—'} |"
                  for r in found["judges"]]
    return lines


#: Per half, lines rendered from its verdicts: table rows, or why-they-failed lines.
HalfLines = dict[str, list[str]]


def lines_bytes(lines: list[str]) -> bytes:
    """Lines as the markdown holds them: each ends with a newline."""
    return "".join(line + "\n" for line in lines).encode("utf-8")


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
        word = "MISSING" if v["missing"] else ("pass" if v["passed"] else (
            "TAMPERED" if "tampered" in (v.get("checks") or ()) else "FAIL"))
        rows[half].append(f"| {_cell(v['key'])} | {v['flag']} | {word} | {_cell(k['outcome'])} | "
                          f"{_cell(k['steps'])} | {_cell(k['tool_calls'])} | {_tokens(k)} | "
                          f"{_cell(k['grounded'])} |")
        if not v["passed"]:
            failures[half].append(f"- **{v['key']}** ({v['flag']})")
            failures[half].extend(f"  - {reason}" for reason in v["reasons"])
    return rows, failures


def too_small(report: dict[str, Any]) -> str | None:
    """One line when the whole suite was scored and it holds too few test missions for a
    held-out half to say anything (``check`` warns of it below 8 missions)."""
    if report.get("split", "all") != "all":
        return None
    halves = report.get("halves") or {}
    held = ((halves.get("test") or {}).get("totals") or {}).get("missions") or 0
    if held >= MIN_TEST_MISSIONS:
        return None
    return (f"The suite holds {held} test mission{'s' if held != 1 else ''}: too small for a "
            f"held-out half (at least {MIN_TEST_MISSIONS}), so every figure here is of missions "
            "that may have been tuned on.")


def markdown_parts(report: dict[str, Any], rows: dict[str, list[Part]],
                   failures: dict[str, list[Part]], failed: dict[str, bool]) -> list[Part]:
    """The markdown from the report's head (``suite``, ``halves``) and each half's
    rendered rows and failure lines (as ``lines_bytes`` writes them), in parts.

    ``failed`` says per half whether any failure lines exist ("Nothing failed." if not).
    """
    lines = [f"# Suite `{report['suite']}`", ""]
    halves = report["halves"]
    overall = " · ".join(f"{half}: {_rate(h['totals'])}" for half, h in halves.items())
    lines += [f"**Overall** — {overall or 'no missions'} (halves are never blended)", ""]
    if report.get("verified") is False:
        lines += ["Recordings were **not checked** against their seals (`--no-verify`).", ""]
    small = too_small(report)
    if small:
        lines += [small, ""]
    parts: list[Part] = []
    for half, data in halves.items():
        t = data["totals"]
        lines += [f"## {half}", "",
                  f"{_rate(t)}; {t['missing']} missing; mean steps {_cell(t['mean_steps'])}, "
                  f"mean wall {_cell(t['mean_wall_s'])} s, mean tokens {_cell(t['mean_tokens'])}"
                  f"{_mean_cost(t)}; "
                  f"human interventions {t['human_interventions']}, "
                  f"rejected replies {t['reply_rejected']}{_judged(t)}", ""]
        lines += ["| mission | flag | verdict | outcome | steps | tool calls | tokens | grounded |",
                  "|---|---|---|---|---|---|---|---|"]
        parts += [lines_bytes(lines), *rows[half]]
        lines = ["", "| flag | missions | passed | missing | success |", "|---|---|---|---|---|"]
        for flag, ft in data["by_flag"].items():
            rate = "—" if ft["success_rate"] is None else f"{ft['success_rate'] * 100:.0f}%"
            lines.append(f"| {flag} | {ft['missions']} | {ft['passed']} | {ft['missing']} | {rate} |")
        lines += ["", f"### Why they failed ({half})", ""]
        if failed[half]:
            parts += [lines_bytes(lines), *failures[half]]
            lines = [""]
        else:
            lines += ["Nothing failed.", ""]
    if lines[-1:] == [""]:
        lines.pop()  # the document ends with the last line's newline
    return [*parts, lines_bytes(lines)]


def write_report(report: dict[str, Any], folder: Path) -> tuple[Path, Path]:
    """Write ``report.json`` and ``report.md`` into ``folder`` (created if needed)."""
    return write_rendered(folder, Rendered(report["passed"], [to_json_bytes(report)],
                                           [to_markdown(report).encode("utf-8")]))


def _replaceable(path: Path) -> bool:
    """Whether writing a report over ``path`` loses nothing: absent, empty, or a
    score report of evalkit's (a ``--report DIR`` may name a folder of anything)."""
    try:
        with open(path, "rb") as existing:
            head = existing.read(4096)
    except FileNotFoundError:
        return True
    except OSError as exc:
        raise EvalkitError(f"cannot check what {path} holds: {exc.strerror or exc}") from None
    return not head or begins_as_ours(path.name, head)


def write_rendered(folder: Path, rendered: Rendered) -> tuple[Path, Path]:
    """Write an already rendered report's two files into ``folder``: both, or neither.

    The two describe one scoring; a new ``report.json`` beside the previous
    ``report.md`` would be a report that contradicts itself, and the previous
    ``report.json`` would be gone. So every target is checked before anything is
    written (a folder or other non-file where a report goes is refused, and so is
    a file evalkit did not write: ``--report`` may name any folder), and both
    files are written before either replaces its predecessor (``replace_files``).
    """
    json_path, md_path = folder / REPORT_FILE, folder / REPORT_MD
    if folder.exists() and not folder.is_dir():
        raise EvalkitError(f"cannot write the report to {folder}: it is a file, and --report "
                           "names the folder that holds report.json and report.md")
    for path in (json_path, md_path):
        if path.exists() and not path.is_file():
            what = "a folder" if path.is_dir() else "not a regular file"
            raise EvalkitError(f"cannot write the report to {folder}: {path} is {what}; "
                               "move it away or write the report elsewhere")
        if not _replaceable(path):
            raise EvalkitError(f"cannot write the report to {folder}: {path} is not a score "
                               "report evalkit wrote, and it would be lost; write the report "
                               "elsewhere")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        replace_files([(json_path, rendered.json or []), (md_path, rendered.markdown or [])])
    except OSError as exc:
        raise EvalkitError(f"cannot write the report to {folder}: {exc.strerror or exc}") from None
    return json_path, md_path
