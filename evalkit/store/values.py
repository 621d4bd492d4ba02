"""How a stream's JSON values are read as typed fields.

One reading for everything derived from a recording: the fold behind every
verdict (``evalkit.eval.summary``) and the dataset's columns
(``evalkit.store.dataset``, ``evalkit.store.ingest``) both go through these,
so the two paths cannot drift. Here, at the recordings layer, because the
dataset is built from recordings and must not import the scorer.
"""

from __future__ import annotations

from typing import Any

import orjson


def text(value: Any) -> str | None:
    """A field read as text: strings as they are, other JSON values as compact JSON."""
    if value is None or isinstance(value, str):
        return value
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return str(value)


def number(value: Any) -> int | float | None:
    """A field read as a number: ints stay ints, integral floats become ints."""
    if type(value) is int:  # the usual case, answered before the general tests
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return None
        if value.is_integer() and abs(value) < 2**63:
            return int(value)
    return value


def flag(value: Any) -> bool | None:
    """A field read as a boolean: JSON true/false, anything else null."""
    return value if isinstance(value, bool) else None


__all__ = ["flag", "number", "text"]
