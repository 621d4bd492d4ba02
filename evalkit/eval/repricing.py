"""Recorded runs priced again, offline, from the tokens they recorded.

Prices change and recordings do not: ``score --pricing FILE`` (and ``run`` /
``measure`` given one) prices each run from its recorded token totals
(``mission_finished.usage``) at the file's prices, in memory, and the run's
cost in every report is that figure. Nothing is written back.

The stream does not name the model, so the run's directory does: its
``meta.json`` (beside the stream, or under ``runs/<run_id>/`` of the mission
folder as ``evalkit run`` lays it out) says which provider and model the run
talked to. A run whose model cannot be found, has no price, or whose totals
carry no prompt and completion tokens costs ``None`` (null), never 0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalkit.pricing import Pricing
from evalkit.store import layout
from evalkit.store.reader import file_bytes


def run_identity(events: Path, run_id: str | None) -> tuple[str | None, str | None] | None:
    """(provider, model) from the run's ``meta.json``, or None when there is none to read."""
    places = [events.parent / layout.META_FILE]
    if run_id:
        places.append(events.parent / "runs" / run_id / layout.META_FILE)
    for place in places:
        try:
            data = file_bytes(place)
        except Exception:  # a folder, a FIFO, a file that cannot be read: not this one
            continue
        if not data:
            continue
        try:
            found = json.loads(data)
        except ValueError:
            continue
        meta = found.get("meta") if isinstance(found, dict) else None
        if isinstance(meta, dict):
            return _identity(meta)
    return None


def _identity(meta: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """A replay is priced as what it replayed (``priced_as``), any other run as itself."""
    given = meta.get("priced_as")
    if isinstance(given, list) and len(given) == 2:
        return _text(given[0]), _text(given[1])
    return _text(meta.get("provider")), _text(meta.get("model"))


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def last_usage(records: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The run totals of the last ``mission_finished`` (the one a summary's outcome is from)."""
    for record in reversed(records):
        if record.get("event") == "mission_finished":
            usage = record.get("usage")
            return usage if isinstance(usage, Mapping) else None
    return None


def reprice(records: Sequence[Mapping[str, Any]], events: Path, run_id: str | None,
            pricing: Pricing) -> float | None:
    """The run's cost at ``pricing``'s prices from its recorded totals; None when unknown."""
    usage = last_usage(records)
    if usage is None:
        return None
    identity = run_identity(events, run_id)
    if identity is None:
        return None
    return pricing.cost(*identity, usage)
