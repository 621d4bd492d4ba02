"""Grounding: "if a number is not in a tool result, it is not in the answer", checked.

Pure and outside the runtime, so an offline tool (a regrade of recorded runs,
a scorer) runs exactly the checks a live mission ran:

    from evalkit.grounding import Evidence, parse_grammar, validate

    grammar = parse_grammar(manifest_grounding_block)        # EvalkitError, all problems at once
    report = validate(answer_text, grammar, evidence, tools=catalogue_names)
    record = report.record(repairs=0, repairing=False, caveat=report.caveat())

The runtime's repair-then-caveat loop lives in ``evalkit.runtime.repair``;
docs/GROUNDING.md is the reference for the grammar, the checks and verdicts.
"""

from __future__ import annotations

from evalkit.grounding.checks import Evidence, evidence_from_records, names_tool, validate
from evalkit.grounding.grammar import CHECKS, KEYS, Grammar, Plane, parse_grammar
from evalkit.grounding.report import Report, Row, with_caveat

__all__ = [
    "CHECKS",
    "KEYS",
    "Evidence",
    "Grammar",
    "Plane",
    "Report",
    "Row",
    "evidence_from_records",
    "names_tool",
    "parse_grammar",
    "validate",
    "with_caveat",
]
