"""``answer_must_match``/``answer_must_not_match``: the answer's text, searched by RE2.

The patterns run on text the graded agent wrote, so on RE2, linear in the text
whatever the pattern (``evalkit.patterns``; EVAL.md, "Answer patterns"). A
pattern RE2 cannot run is refused by ``check`` and, should one reach a
verdict anyway, fails its check saying why rather than being run slowly.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from evalkit.eval.checks import Check, Field
from evalkit.patterns import compile_pattern

if TYPE_CHECKING:
    from evalkit.eval.check import Rules
    from evalkit.eval.mission import Mission
    from evalkit.eval.summary import RunSummary

MATCH, NOT_MATCH, UNUSABLE = "answer_must_match", "answer_must_not_match", "answer_pattern"


def judge(m: Mission, s: RunSummary) -> Iterator[tuple[str, str]]:
    if not s.answered:
        yield "answer", "no answer was recorded; this mission checks the answer text"
        return
    # An answer record whose text is null is searched as empty text: what must
    # match does not, and nothing it must not match is there (the seed's reading).
    answer = s.answer if s.answer is not None else ""
    # Lowered once for every pattern that ignores case (None: not ASCII, a regex must fold).
    lowered = (answer.lower() if answer.isascii() else None) if _ignores_case(
        m.answer_must_match, m.answer_must_not_match) else _UNSET
    for pattern in m.answer_must_match or ():
        hit = _search(pattern, answer, lowered)
        if isinstance(hit, str):
            yield UNUSABLE, hit
        elif not hit:
            yield MATCH, f"the answer does not match /{pattern}/"
    for pattern in m.answer_must_not_match or ():
        hit = _search(pattern, answer, lowered)
        if isinstance(hit, str):
            yield UNUSABLE, hit
        elif hit:
            yield NOT_MATCH, f"the answer matches /{pattern}/, which this mission forbids"


def validate(m: Mission, rules: Rules) -> Iterator[tuple[str, str]]:
    for name in (MATCH, NOT_MATCH):
        for regex in getattr(m, name) or ():
            error = rules.regex_error(regex)
            if error is not None:
                yield name, f"pattern {regex!r} {error}"


_UNSET: Any = object()


@functools.lru_cache(maxsize=4096)
def _ignores_case(*patterns: tuple[str, ...] | None) -> bool:
    """Whether any of the patterns ignores case (a suite repeats its pattern lists)."""
    return any(p.startswith("(?i)") for group in patterns for p in group or ())


def _search(pattern: str, answer: str, lowered: str | None = _UNSET) -> bool | str:
    """Whether the pattern is found, or the sentence saying it cannot be used.

    The meaning is RE2's search. Most answer patterns are plain words, though,
    and a case-insensitive regex scan of a long answer that does not contain
    them is the slowest step of a verdict; those are answered by a substring
    test that finds exactly what the regex would. ``lowered`` is
    ``answer.lower()`` when the answer is ASCII and None when it is not, if
    the caller has it already.
    """
    literal, folded = _as_literal(pattern)
    if literal is not None:
        if not folded:
            return literal in answer
        if lowered is _UNSET:
            lowered = answer.lower() if answer.isascii() else None
        if lowered is not None:  # no character outside ASCII can fold onto these
            return literal in lowered
    try:
        return compile_pattern(pattern).search(answer) is not None
    except ValueError as refused:
        return f"the pattern /{pattern}/ {refused}; this check cannot pass"


#: Characters that stand for themselves in a regex, outside a character class.
_PLAIN = re.compile(r"[A-Za-z0-9 _,'\":;!@#%&=<>/~-]*")


@functools.lru_cache(maxsize=4096)
def _as_literal(pattern: str) -> tuple[str | None, bool]:
    """(the text a pattern matches literally, whether case is ignored), or (None, False).

    Only ASCII patterns of plain characters, optionally led by ``(?i)``, qualify.
    """
    folded = pattern.startswith("(?i)")
    body = pattern[4:] if folded else pattern
    if not _PLAIN.fullmatch(body):
        return None, False
    return (body.lower() if folded else body), folded


_MEANING = ("searched by RE2 (linear time; see [Answer patterns](#answer-patterns)), no flags "
            "(write `(?i)` yourself), over the last `answer` text, caveat included")

CHECK = Check(
    name="answer",
    fields=(Field(MATCH, "strs", "list of regex", _MEANING),
            Field(NOT_MATCH, "strs", "list of regex", _MEANING)),
    judge=judge,
    validate=validate,
    reads=("answered", "answer"),
    emits=(MATCH, NOT_MATCH, UNUSABLE),
    # "carries no text": a sentence evalkit no longer writes, kept for older reports.
    reasons=((r"^no answer was recorded|^the answer record carries no text", "answer"),
             (r"^the answer does not match /", MATCH),
             (r"^the answer matches /", NOT_MATCH),
             (r"^the pattern /.*/ (?:does not compile|uses |writes a repeat)", UNUSABLE)),
)
