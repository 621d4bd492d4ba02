"""Shared parts for the mission-pack tests: the packs, a CLI runner, suites for the probe agent."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from evalkit.cli import main
from tests._stream_builders import mission, write_suite

REPO = Path(__file__).resolve().parents[2]
SUITES = REPO / "suites"
PACKS = ("analyst", "coding", "research")
PROBE = [sys.executable, str(Path(__file__).parent / "agents" / "probe.py")]


def invoke(*args: Any) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def verdicts(out: Path) -> dict[str, dict[str, Any]]:
    return {v["key"]: v for v in read_json(out / "report.json")["verdicts"]}


def answer_of(folder: Path) -> str:
    """The text of the last ``answer`` record a mission folder's stream holds."""
    text = ""
    for line in (folder / "events.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        record = record.get("record", record)
        if record.get("event") == "answer":
            text = record["text"]
    return text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def probe_suite(path: Path, keys: list[str], **top: Any) -> Path:
    """A gradeable suite for the probe agent: ``keys`` (padded to five) train, three ``h*`` test."""
    train = [*keys, *(f"t{i}" for i in range(max(0, 5 - len(keys))))]
    missions = [mission(k, split="train", answer_must_match=["entries="]) for k in train]
    missions += [mission(f"h{i}", split="test", answer_must_match=["entries="])
                 for i in range(3)]
    return write_suite(path, missions, flags=["chaining"], tools=["probe"], **top)
