"""The stub server's world: a fixed asset catalogue, fake recorded runs, a vault,
and a remote shell that knows a handful of commands.

Everything is a constant (or computed from constants), so a mission against
the stub sees byte-identical results on every run, and a suite author can
write expectations against the figures below:

- ``asset.7f3a`` — final Q3 2024 shipments by region: 4,210 + 3,902 + 2,611 +
  1,758 = **12,481** units; supersedes ``asset.7f3b``.
- ``asset.7f3b`` — the preliminary version of the same table (total 12,148):
  the disambiguation trap.
- ``asset.19c2`` — unit pricing: average **338.0** EUR, floor 290.0, ceiling
  412.5; its units come from ``asset.7f3a`` (revenue = 12,481 × 338.0 =
  4,218,578.0).
- ``asset.5d0e`` — the summary memo citing ``asset.7f3a``, ``asset.19c2`` and
  ``asset.0bad`` — which does not exist (the absence case).
- ``asset.e9d2`` — an index pointing at the others (the start of a chain).
- ``asset.c4e1`` — 120 daily sensor readings: long enough to be truncated,
  so ``mission_result`` paths like ``rows.3.name`` have something to read.
"""

from __future__ import annotations

from typing import Any

_NAMES = ("alder", "birch", "cedar", "dogwood", "elm", "fir")


def _sensor_rows() -> list[dict[str, Any]]:
    return [
        {
            "day": day,
            "name": f"{_NAMES[(day - 1) % len(_NAMES)]}-{(day - 1) // len(_NAMES) + 1}",
            "reading": round(10 + ((day * 37) % 101) / 4, 2),
        }
        for day in range(1, 121)
    ]


def _shipments(rows: list[tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"region": region, "units": units} for region, units in rows]


ASSETS: dict[str, dict[str, Any]] = {
    "asset.7f3a": {
        "id": "asset.7f3a",
        "title": "Regional shipments, Q3 2024 (final)",
        "kind": "table",
        "status": "final",
        "columns": ["region", "units"],
        "rows": _shipments([("North", 4210), ("South", 3902), ("East", 2611), ("West", 1758)]),
        "totals": {"units": 12481},
        "summary": "Total shipped in Q3 2024: 12,481 units across 4 regions.",
        "supersedes": "asset.7f3b",
        "see_also": ["asset.19c2"],
    },
    "asset.7f3b": {
        "id": "asset.7f3b",
        "title": "Regional shipments, Q3 2024 (preliminary)",
        "kind": "table",
        "status": "superseded",
        "superseded_by": "asset.7f3a",
        "columns": ["region", "units"],
        "rows": _shipments([("North", 4188), ("South", 3877), ("East", 2430), ("West", 1653)]),
        "totals": {"units": 12148},
        "summary": "Preliminary count for Q3 2024: 12,148 units. Superseded by asset.7f3a.",
    },
    "asset.19c2": {
        "id": "asset.19c2",
        "title": "Unit pricing, Q3 2024",
        "kind": "json",
        "currency": "EUR",
        "average_unit_price": 338.0,
        "price_floor": 290.0,
        "price_ceiling": 412.5,
        "units_source": "asset.7f3a",
        "note": "revenue = units x average_unit_price, units from asset.7f3a",
    },
    "asset.5d0e": {
        "id": "asset.5d0e",
        "title": "Q3 2024 summary memo",
        "kind": "document",
        "text": (
            "Q3 2024 closed with shipments of 12,481 units (asset.7f3a) at an average unit "
            "price of EUR 338.0 (asset.19c2). Customer returns for the quarter are reported "
            "in asset.0bad."
        ),
        "references": ["asset.7f3a", "asset.19c2", "asset.0bad"],
    },
    "asset.e9d2": {
        "id": "asset.e9d2",
        "title": "Index of Q3 2024 reporting",
        "kind": "index",
        "entries": [
            {"topic": "summary memo", "asset": "asset.5d0e"},
            {"topic": "shipments (final)", "asset": "asset.7f3a"},
            {"topic": "shipments (preliminary)", "asset": "asset.7f3b"},
            {"topic": "pricing", "asset": "asset.19c2"},
            {"topic": "sensor readings", "asset": "asset.c4e1"},
        ],
    },
    "asset.c4e1": {
        "id": "asset.c4e1",
        "title": "Daily sensor readings, station 4",
        "kind": "table",
        "columns": ["day", "name", "reading"],
        "rows": _sensor_rows(),
        "summary": "120 daily readings from station 4.",
    },
}

RUNS: dict[str, dict[str, Any]] = {
    "run.a1b2c3": {
        "run_id": "run.a1b2c3",
        "objective": "How many units were shipped in Q3 2024?",
        "started_at": "2024-10-02T09:14:03Z",
        "outcome": "answered",
        "steps": 3,
        "tools": ["mcp.list_assets", "mcp.read_asset"],
        "answer": "12,481 units were shipped in Q3 2024 (asset.7f3a).",
        "events": [
            {"seq": 1, "event": "mission_started"},
            {"seq": 2, "event": "tool_call", "tool": "mcp.list_assets"},
            {"seq": 3, "event": "tool_call", "tool": "mcp.read_asset",
             "arguments": {"asset_id": "asset.7f3a"}},
            {"seq": 4, "event": "answer"},
            {"seq": 5, "event": "mission_finished", "outcome": "answered"},
        ],
    },
    "run.d4e5f6": {
        "run_id": "run.d4e5f6",
        "objective": "What was the Q3 2024 revenue?",
        "started_at": "2024-10-02T10:02:41Z",
        "outcome": "answered_with_caveat",
        "steps": 5,
        "tools": ["mcp.read_asset"],
        "answer": "About EUR 4.2 million.",
        "caveat": "the figure 4.2 does not appear in any tool result",
        "events": [
            {"seq": 1, "event": "mission_started"},
            {"seq": 2, "event": "tool_call", "tool": "mcp.read_asset",
             "arguments": {"asset_id": "asset.19c2"}},
            {"seq": 3, "event": "answer"},
            {"seq": 4, "event": "grounding", "grounded": False},
            {"seq": 5, "event": "mission_finished", "outcome": "answered_with_caveat"},
        ],
    },
    "run.0a9b8c": {
        "run_id": "run.0a9b8c",
        "objective": "How many customer returns were there in Q3 2024?",
        "started_at": "2024-10-03T08:30:00Z",
        "outcome": "budget_exhausted",
        "steps": 8,
        "tools": ["mcp.read_asset"],
        "answer": None,
        "budget": {"which": "steps", "limit": 8},
        "events": [
            {"seq": 1, "event": "mission_started"},
            {"seq": 2, "event": "tool_call", "tool": "mcp.read_asset",
             "arguments": {"asset_id": "asset.0bad"}},
            {"seq": 3, "event": "mission_finished", "outcome": "budget_exhausted"},
        ],
    },
}

#: What ``vault_read`` returns, once ``unlock("vault_read")`` has registered it.
VAULT: dict[str, str] = {
    "alpha": "7741-ALPHA",
    "beta": "0193-BETA",
    "gamma": "5520-GAMMA",
}

#: The only commands ``remote_shell`` runs, and their fixed output.
REMOTE_SHELL: dict[str, str] = {
    "date -u +%Y": "2024\n",
    "date -u": "Wed Oct  2 09:14:03 UTC 2024\n",
    "uname": "Linux\n",
    "uname -a": "Linux stub-host 6.1.0-stub #1 SMP x86_64 GNU/Linux\n",
    "whoami": "stub\n",
    "pwd": "/srv/stub\n",
    "ls": "README.txt\nq3-shipments.csv\nsensors.csv\n",
    "cat README.txt": "Stub host for evalkit suites. Nothing here is real.\n",
}
