"""Recordings made by the real runtime, and replays of them, for the replay tests.

Everything is real: ``launch`` (what ``evalkit mission`` calls) with the
scripted backend or the openai backend against the local chat server, the
stub MCP plane over stdio, the run store. ``record`` makes a recording and
``replay`` replays one; both return the run directory and its records.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from evalkit.contract import conforms
from evalkit.runtime.mission import Launched, MissionSettings, launch
from evalkit.store.reader import read_stream
from tests._agent import STUB, LeftBehind, answer, call, read_jsonl  # noqa: F401 (re-exported)

#: Fields that name or time a run rather than say what happened in it.
ID_FIELDS = ("run_id", "elapsed_s", "audit_ref", "approval_id")


def without_ids(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records with ids, times and (provisional) answer deltas taken out."""
    return [{k: v for k, v in r.items() if k not in ID_FIELDS} for r in records
            if r.get("event") != "answer_delta"]


def digest(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` and a hash of its bytes."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


@dataclass
class Done(LeftBehind):
    """A finished launch and what it left behind."""

    launched: Launched
    run_dir: Path

    @property
    def records(self) -> list[dict[str, Any]]:
        return read_stream(self.run_dir).records

    @property
    def meta(self) -> dict[str, Any]:
        return json.loads((self.run_dir / "meta.json").read_text(encoding="utf-8"))["meta"]



@dataclass
class Lab:
    """A working folder with a run store: ``record`` and ``replay`` launch into it."""

    root: Path

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, "EVALKIT_RUNS": str(self.runs), "EVALKIT_AUDIT": "off",
                "EVALKIT_APPROVALS": "off", **extra}

    def script(self, items: list[Any], name: str = "script.json") -> str:
        path = self.root / name
        path.write_text(json.dumps(items), encoding="utf-8")
        return str(path)

    def launch(self, settings: MissionSettings, **env: str) -> Done:
        settings.root = self.root / "work"
        settings.root.mkdir(exist_ok=True)
        settings.sandbox = settings.sandbox or "none"
        launched = launch(settings, environ=self.env(**env))
        outcome = launched.outcome
        assert outcome.error is None, outcome.error
        assert outcome.run_id, outcome
        done = Done(launched, Path(env.get("EVALKIT_RUNS", self.runs)) / outcome.run_id)
        for record in done.records:
            assert conforms(record) == [], record
        return done

    def record(self, items: list[Any], objective: str = "add 2 and 3", *,
               mcp: bool = True, **options: Any) -> Done:
        settings = MissionSettings(objective=objective, provider="scripted",
                                   script=self.script(items),
                                   mcp_stdio=(STUB,) if mcp else (), **options)
        return self.launch(settings)

    def replay(self, run: str | Path, **options: Any) -> Done:
        options.setdefault("objective", "")
        return self.launch(MissionSettings(replay=str(run), **options))


@pytest.fixture
def lab(tmp_path: Path) -> Lab:
    return Lab(tmp_path)


Recorder = Callable[..., Done]
