"""EVAL.md's table of mission fields is the fields' own description, rendered."""

from __future__ import annotations

from pathlib import Path

from evalkit.eval import checks
from evalkit.eval.fields_doc import BEGIN, END, with_table
from evalkit.eval.mission import CORE_FIELDS

EVAL_MD = Path(__file__).resolve().parent.parent / "EVAL.md"


def test_eval_md_shows_the_mission_fields_as_they_are_defined():
    text = EVAL_MD.read_text(encoding="utf-8")
    assert text == with_table(text), (
        "EVAL.md's mission fields are stale: run `python -m evalkit.eval.fields_doc EVAL.md`")


def test_every_field_a_mission_may_give_has_a_row():
    """Read back from the file, not from the renderer, so a renderer that drops one shows."""
    text = EVAL_MD.read_text(encoding="utf-8")
    table = text[text.index(BEGIN):text.index(END)]
    rows = [line.split(" | ")[0] for line in table.splitlines() if line.startswith("| `")]
    named = [name.strip("|` ") for row in rows for name in row.split(", ")]
    fields = [f.name for f in CORE_FIELDS] + [f.name for c in checks.built_in() for f in c.fields]
    assert named == fields
