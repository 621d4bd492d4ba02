"""EVAL.md's table of mission fields, rendered from the fields themselves.

The core fields (``evalkit.eval.mission``) and each built-in check's
(``evalkit.eval.checks``) say their type and meaning where they are defined;
this renders them, and ``python -m evalkit.eval.fields_doc EVAL.md`` writes
the table between its markers. A test fails when the two disagree.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from evalkit.eval import checks
from evalkit.eval.checks import Check, Field
from evalkit.eval.mission import CORE_FIELDS

BEGIN = ("<!-- The mission fields, generated from evalkit/eval/mission.py and evalkit/eval/checks/"
         " by `python -m evalkit.eval.fields_doc EVAL.md`: edit them there. -->")
END = "<!-- End of the generated mission fields. -->"


def mission_table(with_checks: Sequence[Check] | None = None) -> str:
    """The Markdown table: the core fields, then each check's (default: evalkit's own)."""
    groups = [CORE_FIELDS, *(c.fields for c in (with_checks or checks.built_in()))]
    lines = ["| field | type | meaning |", "|---|---|---|"]
    for names, kind, meaning in (row for group in groups for row in _rows(group)):
        lines.append(f"| {', '.join(f'`{n}`' for n in names)} | {kind} | {meaning} |")
    return "\n".join(lines)


def _rows(fields: Iterable[Field]) -> list[tuple[list[str], str, str]]:
    """One row per field; neighbours saying the same thing share one (``must``, ``must_not``)."""
    rows: list[tuple[list[str], str, str]] = []
    for f in fields:
        if rows and rows[-1][1:] == (f.type, f.meaning):
            rows[-1][0].append(f.name)
        else:
            rows.append(([f.name], f.type, f.meaning))
    return rows


def with_table(text: str) -> str:
    """``text`` (EVAL.md) with the table between its markers rendered afresh."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError("the text has no mission-fields markers to render between")
    return f"{text[:start]}{BEGIN}\n{mission_table()}\n{text[end:]}"


def main(argv: list[str]) -> int:
    """Rewrite the table in each file named."""
    for name in argv:
        path = Path(name)
        path.write_text(with_table(path.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
