"""A small JSON path for ``mission_result``: ``rows.3.name`` or ``$.rows[3].name``.

Agents write paths both ways, so both are read: an optional leading ``$``,
dotted keys, bracketed indexes, and quoted keys (``$["a.b"]``) for keys
that hold dots. No wildcards, no filters — one path names one value.
"""

from __future__ import annotations

import re
from typing import Any

_TOKEN = re.compile(
    r"""\.?(?:
        \[\s*(?P<index>-?\d+)\s*\]
      | \[\s*(?P<quote>["'])(?P<qkey>(?:\\.|(?!(?P=quote)).)*)(?P=quote)\s*\]
      | (?P<key>[^.\[\]]+)
    )""",
    re.VERBOSE,
)


class PathError(ValueError):
    """A path that does not parse or names nothing; the message is for the model."""


def parse(path: str) -> list[str | int]:
    """Split a path into keys (str) and list indexes (int)."""
    text = path.strip()
    if text.startswith("$"):
        text = text[1:]
    parts: list[str | int] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise PathError(f"cannot read path {path!r} at {text[pos:]!r}")
        if match.group("index") is not None:
            parts.append(int(match.group("index")))
        elif match.group("quote") is not None:
            parts.append(re.sub(r"\\(.)", r"\1", match.group("qkey")))
        else:
            key = match.group("key")
            parts.append(int(key) if re.fullmatch(r"-?\d+", key) else key)
        pos = match.end()
    return parts


def lookup(document: Any, path: str) -> Any:
    """The value ``path`` names in ``document``; raises ``PathError`` naming the first miss."""
    value = document
    walked = "$"
    for part in parse(path):
        if isinstance(value, list):
            if not isinstance(part, int):
                raise PathError(f"{walked} is a list; index it with a number, not {part!r}")
            if not -len(value) <= part < len(value):
                raise PathError(f"{walked} has {len(value)} items; there is no index {part}")
            value = value[part]
            walked += f"[{part}]"
        elif isinstance(value, dict):
            key = str(part)
            if key not in value:
                keys = ", ".join(sorted(map(str, value))[:20])
                raise PathError(f"{walked} has no key {key!r} (keys: {keys})")
            value = value[key]
            walked += f".{key}"
        else:
            raise PathError(f"{walked} is a {type(value).__name__}, not a list or object")
    return value
