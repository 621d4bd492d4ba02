"""Fixtures for the harness tests: suites for the foreign agent, and a CLI runner."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from evalkit.cli import main
from tests._stream_builders import mission, write_suite

HERE = Path(__file__).parent
FOREIGN = [sys.executable, str(HERE / "agents" / "foreign.py")]
STUB_SUITE = HERE / "data" / "stub-suite"
#: What the foreign agent publishes, so a suite for it may put these in mission flags.
FOREIGN_FLAGS = ["--silent", "--endpoint-down", "--hang"]


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def foreign_suite(path: Path, train: int = 5, test: int = 3,
                  flags: dict[str, list[str]] | None = None, **top: Any) -> Path:
    """A gradeable suite of sum missions ``t0..`` (train) and ``h0..`` (test) for the foreign
    agent; ``flags`` gives some missions CLI tokens of their own."""
    flags = flags or {}
    missions = [mission(f"t{i}", split="train", expects_tools=["mcp.add"],
                        answer_must_match=["(?i)sum is 5"], flags=flags.get(f"t{i}", []))
                for i in range(train)]
    missions += [mission(f"h{i}", split="test", expects_tools=["mcp.add"],
                         answer_must_match=["(?i)sum is 5"], flags=flags.get(f"h{i}", []))
                 for i in range(test)]
    for m in missions:
        if not m["flags"]:
            del m["flags"]
    return write_suite(path, missions, flags=["chaining"], agent_flags=FOREIGN_FLAGS, **top)


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    return foreign_suite(tmp_path / "sums.yaml")
