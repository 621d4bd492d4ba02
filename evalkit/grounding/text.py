"""Reading text for grounding: fences, masks and numbers by value.

Pure functions over strings. A masked span is overwritten with spaces of the
same length, so nothing on either side of it can join into a new token and
nothing inside it is read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from decimal import Decimal, InvalidOperation
from typing import Any

from evalkit.patterns import Pattern

_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)[^\n`]*$")

#: A number as it is written: digits with optional thousands groups and decimals.
#: Not glued to a word or a dot on the left (``v2``, ``Q3``, ``asset.7f3a``, the ``3``
#: of ``1.2.3``) nor to a word on the right (``3rd``, ``10k``).
NUMBER = re.compile(r"(?<![\w.])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?!\w|\.\d)")

_MONTH = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|"
          r"Aug(?:ust)?|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)")
_WEEKDAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*,?"
_ZONE = r"(?:\s*(?:Z|UTC|GMT|[A-Z]{3,4}|[+-]\d{2}:?\d{2}))?"
_CLOCK = rf"\d{{1,2}}:\d{{2}}(?::\d{{2}}(?:[.,]\d+)?)?(?:\s*[AaPp]\.?[Mm]\.?)?{_ZONE}(?:\s+\d{{4}}\b)?"

#: Clock- and date-shaped spans: a timestamp never donates digits, and never is a figure.
CLOCK_OR_DATE = re.compile(
    r"(?<![\w.])(?:"
    rf"\d{{4}}-\d{{2}}-\d{{2}}(?:[T ]{_CLOCK})?"  # ISO date, datetime
    rf"|\d{{4}}-\d{{2}}(?!\d)"  # year-month
    rf"|\d{{1,2}}[/.]\d{{1,2}}[/.]\d{{2,4}}(?:\s+{_CLOCK})?"  # 2/10/2024, 02.10.24
    rf"|{_MONTH}\.?,?\s+\d{{4}}(?!\d)"  # Oct 2024
    rf"|(?:{_WEEKDAY}\s+)?{_MONTH}\.?\s+\d{{1,2}}(?:st|nd|rd|th)?(?:,?\s+\d{{4}})?"
    rf"(?:,?\s+{_CLOCK})?"  # Oct 2, 2024 / Wed Oct  2 09:14:03 UTC 2024
    rf"|(?:{_WEEKDAY}\s+)?\d{{1,2}}(?:st|nd|rd|th)?\s+{_MONTH}\.?(?:,?\s+\d{{4}})?"  # 2 Oct 2024
    rf"|{_CLOCK}"  # 09:14, 09:14:03.5 UTC
    r")(?!\w)"
)

#: Markdown list markers (``1.`` / ``2)`` at a line start) are numbering, not figures.
LIST_MARKER = re.compile(r"(?m)^[ \t]*\d{1,3}[.)](?=[ \t])")


def split_fences(text: str) -> tuple[str, list[tuple[str, str]]]:
    """(the text with every fenced block blanked, [(info word, body)] of the blocks).

    A fence opens with three or more backticks or tildes and closes with the
    same character at least as long; an unclosed fence is not a fence (its
    lines stay prose, so an answer cannot hide a claim behind one).
    """
    lines = text.split("\n")
    prose = list(lines)
    blocks: list[tuple[str, str]] = []
    i = 0
    while i < len(lines):
        opened = _FENCE_OPEN.match(lines[i])
        if not opened:
            i += 1
            continue
        marker, info = opened.group(1), opened.group(2).lower()
        close = re.compile(rf"^ {{0,3}}{re.escape(marker[0])}{{{len(marker)},}}[ \t]*$")
        end = next((j for j in range(i + 1, len(lines)) if close.match(lines[j])), None)
        if end is None:
            i += 1
            continue
        blocks.append((info, "\n".join(lines[i + 1:end])))
        for j in range(i, end + 1):
            prose[j] = " " * len(lines[j])
        i = end + 1
    return "\n".join(prose), blocks


def mask(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """``text`` with each (start, end) span overwritten by spaces."""
    chars = list(text)
    for start, end in spans:
        chars[start:end] = " " * (end - start)
    return "".join(chars)


def mask_pattern(text: str, pattern: Pattern) -> str:
    return mask(text, (m.span() for m in pattern.finditer(text)))


def literal_pattern(literals: Iterable[str]) -> re.Pattern[str] | None:
    """Matches any of ``literals`` where it is not glued to a word on either side."""
    parts = [re.escape(s) for s in sorted(set(literals), key=len, reverse=True) if s]
    if not parts:
        return None
    return re.compile(r"(?<!\w)(?:" + "|".join(parts) + r")(?!\w)")


def mask_clocks(text: str) -> str:
    return mask_pattern(text, CLOCK_OR_DATE)


def value_of(written: str) -> Decimal | None:
    """The value of the first number written in ``written`` (separators dropped), unsigned."""
    found = NUMBER.search(written) or re.search(r"\d[\d,]*(?:\.\d+)?", written)
    if not found:
        return None
    try:
        return abs(Decimal(found.group(0).replace(",", "")))
    except InvalidOperation:
        return None


def numbers_in(text: str) -> Iterator[tuple[str, Decimal]]:
    """(as written, value) of each number in ``text`` (mask clocks first)."""
    for match in NUMBER.finditer(text):
        written = match.group(0)
        yield written, Decimal(written.replace(",", ""))


def evidence_values(text: str) -> set[Decimal]:
    """Every numeric value a piece of evidence holds, timestamps masked.

    A JSON document also donates every number inside it as the parser reads
    it, so a value is found however compactly the tool wrote it.
    """
    values = {value for _, value in numbers_in(mask_clocks(text))}
    document = parse_json(text)
    if document is not None:
        values.update(json_numbers(document))
    return values


def json_numbers(document: Any) -> Iterator[Decimal]:
    """Every JSON number inside ``document``, unsigned."""
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        else:
            number = decimal_of(item) if not isinstance(item, str) else None
            if number is not None:
                yield abs(number)


def decimal_of(value: Any) -> Decimal | None:
    """A JSON number, or a string that is exactly one number, as a Decimal; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return None
        return Decimal(repr(value))
    if isinstance(value, str):
        stripped = value.strip()
        if re.fullmatch(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?", stripped):
            return Decimal(stripped.replace(",", ""))
    return None


def parse_json(text: str) -> Any:
    """A JSON object or array ``text`` holds whole, else None."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        value = json.loads(stripped)
    except ValueError:
        return None
    return value if isinstance(value, (dict, list)) else None


def compact(value: Any) -> str:
    """A value as it is quoted in a report: strings bare, everything else compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
