"""Regexes a suite or skill supplies, run in linear time on text the graded agent wrote.

Answer patterns (``answer_must_match``/``answer_must_not_match``), a suite's
``identifier_pattern`` and a skill's grounding patterns all meet text the
agent controls, and Python's backtracking ``re`` can take minutes on one
adversarial answer (``^(a|aa)+$`` against a long run of ``a``). So every one
of them is compiled here, by RE2 (``google-re2``), which matches in time
linear in the text whatever the pattern. What RE2 cannot run that way —
backreferences, lookaround — is refused with one sentence naming it, never
run slowly instead.

The patterns mean what RE2 says (EVAL.md, "Answer patterns", lists where that
differs from Python's ``re``). One difference is refused rather than left to
surprise: ``x{,n}``, which Python reads as "at most n" and RE2 as literal
text.
"""

from __future__ import annotations

import functools
import re
import warnings
from typing import Any

#: A compiled pattern (``re2._Regexp``: ``search``, ``finditer``, ``fullmatch``, ``groups``).
Pattern = Any

#: RE2's own words for what it lacks -> what a suite writer calls it.
_LACKS = (
    (re.compile(r"invalid escape sequence: \\[1-9]"), "a backreference"),
    (re.compile(r"invalid perl operator: \(\?P(?:=|$)"), "a named backreference"),
    (re.compile(r"invalid perl operator: \(\?[=!]"), "lookahead"),
    (re.compile(r"invalid perl operator: \(\?<[=!]"), "lookbehind"),
    (re.compile(r"invalid perl operator: \(\?>"), "an atomic group"),
    (re.compile(r"invalid perl operator: \(\?\("), "a conditional group"),
    (re.compile(r"bad repetition operator: [*+?}]\+"), "a possessive quantifier"),
)
#: ``{,n}`` as a quantifier: after something to repeat, not escaped (classes are masked first).
_UP_TO = re.compile(r"(?<=[^\\(|])\{,\d+\}")
_CLASS = re.compile(r"\\.|\[\^?\]?(?:\\.|[^\]\\])*\]", re.DOTALL)


def compile_pattern(pattern: str) -> Pattern:
    """The RE2 pattern; ``ValueError`` with ``problem``'s words when it cannot be used."""
    compiled, problem_ = _compiled(pattern)
    if compiled is None:
        raise ValueError(problem_)
    return compiled


def problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot be used, as the end of a sentence naming it; None when it can.

    ``f"pattern {p!r} {problem(p)}"`` reads e.g. "pattern '(a)\\1' uses a
    backreference, which RE2 cannot match in linear time; rewrite it without".
    """
    return _compiled(pattern)[1]


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> tuple[Pattern | None, str | None]:
    import re2  # the binding costs ~10 ms to import: only when a pattern is compiled

    options = re2.Options()
    options.log_errors = False  # the refusal below says it; RE2 would print to stderr too
    try:
        compiled = re2.compile(pattern, options)
    except re2.error as exc:
        return None, _refusal(pattern, _words(exc))
    if _UP_TO.search(_CLASS.sub(lambda m: "_" * len(m.group(0)), pattern)):
        return None, ("writes a repeat as {,n}, which RE2 reads as literal text; "
                      "write {0,n}")
    return compiled, None


def _refusal(pattern: str, said: str) -> str:
    try:
        with warnings.catch_warnings():  # Python's parser warns of what RE2 refused anyway
            warnings.simplefilter("ignore")
            re.compile(pattern)
    except (re.error, RecursionError, OverflowError, ValueError) as exc:
        return f"does not compile: {exc}"  # broken in any engine: say it as Python does
    for shape, name in _LACKS:
        if shape.search(said):
            return (f"uses {name}, which RE2 cannot match in linear time; "
                    "rewrite it without")
    if said.endswith("\\Z"):
        return "uses \\Z for the end of the text, which RE2 spells \\z; write \\z"
    return f"uses what RE2 (the linear-time engine evalkit matches with) does not support: {said}"


def _words(exc: Exception) -> str:
    said = exc.args[0] if exc.args else exc
    return said.decode("utf-8", "replace") if isinstance(said, bytes) else str(said)
