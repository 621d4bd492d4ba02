"""What a user's objects become in a recording: plain JSON values.

An agent hands the recorder what its SDK hands it — pydantic models (the
``openai`` SDK's messages and tool calls, LangChain's messages), tuples,
sentinels for "not given". A recording must hold data that reads back the same
anywhere, so each is turned into JSON values here, once, before the store's
writer (which scrubs and writes, and changes nothing else) sees it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def jsonable(value: Any) -> Any:
    """``value`` as JSON values: models dumped, mappings and sequences walked,
    anything else unknown said as its ``str``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items() if not _not_given(v)}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump):  # pydantic v2: the openai SDK's types, LangChain's messages
        try:
            return jsonable(dump(mode="json", exclude_none=True))
        except Exception:  # a model that cannot dump itself is said as text
            return str(value)
    return str(value)


def _not_given(value: Any) -> bool:
    """The ``openai`` SDK's ``NOT_GIVEN`` / ``Omit`` sentinels: an argument left out."""
    return type(value).__name__ in ("NotGiven", "Omit")


def without_unset(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments with the SDK's "not given" sentinels left out."""
    return {k: v for k, v in kwargs.items() if not _not_given(v)}
