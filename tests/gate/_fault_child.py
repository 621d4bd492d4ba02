"""A process that governs one call and kills itself (SIGKILL) at a named point.

    python _fault_child.py DB COUNTER KEY TOOL POINT

The tool's side effect appends one line to COUNTER (O_APPEND, fsync'd): a counter the
ledger knows nothing about. POINT is one of after_intent, after_effect,
before_terminal, mid_append, or none.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
from typing import Any

from evalkit.gate.ledger import Ledger, govern
from evalkit.gate.policy import Policy

POLICY = Policy.from_mapping({"tools": {
    "noop": {"risk": 0, "reversible": True},
    "lookup": {"risk": 0, "reversible": True, "idempotent": True},
}})


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class FaultLedger(Ledger):
    point = "none"

    def _append(self, conn: sqlite3.Connection, key: str, event: str, state: str | None,
                body: Any, at: float, *, touch: bool = False) -> str:
        if event == "completed" and self.point == "before_terminal":
            die()
        link = super()._append(conn, key, event, state, body, at, touch=touch)
        if event == "completed" and self.point == "mid_append":
            die()  # the terminal event row is written, its transaction not committed
        return link


def main() -> None:
    db, counter, key, tool, point = sys.argv[1:6]
    book = FaultLedger(db)
    book.point = point

    def effect() -> dict[str, Any]:
        if point == "after_intent":
            die()
        fd = os.open(counter, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{os.getpid()}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        if point == "after_effect":
            die()
        return {"by": os.getpid()}

    action = govern(book, key, tool, {"n": 1}, POLICY, effect, run_id="run1")
    print(action.state)


if __name__ == "__main__":
    main()
