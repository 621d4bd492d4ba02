"""Build realistic mission streams and run folders for tests, as data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def started(**extra: Any) -> dict:
    return {"event": "mission_started", "schema_version": 1, "objective": "add 2 and 3",
            "catalogue": ["mcp.echo", "mcp.add"], "gated": [], "max_steps": 0, "history": 0,
            "sandbox": "none", "profile": "safe", "audit_ref": None, "run_id": "run_test-1",
            **extra}


def step(index: int, **extra: Any) -> dict:
    return {"event": "step_started", "index": index, **extra}


def call(index: int, tool: str, arguments: Any = None, *, output: Any = "5",
         **extra: Any) -> list[dict]:
    """A tool_call and its successful tool_result (``extra`` rides the call)."""
    arguments = {} if arguments is None else arguments
    return [
        {"event": "tool_call", "index": index, "tool": tool, "arguments": arguments, **extra},
        {"event": "tool_result", "index": index, "tool": tool, "arguments": arguments,
         "ok": True, "exit_code": 0, "output": output, "error": None, "handle": f"r{index}",
         "truncated": False},
    ]


def answer(text: str = "The sum is 5.", outcome: str = "answered") -> dict:
    return {"event": "answer", "text": text, "outcome": outcome}


def finished(outcome: str = "answered", steps: int = 2, **extra: Any) -> dict:
    return {"event": "mission_finished", "outcome": outcome, "steps": steps, "max_steps": 0,
            "elapsed_s": 1.25, "usage": {"prompt_tokens": 100, "completion_tokens": 20,
                                         "total_tokens": 120, "calls": 2}, **extra}


def grounding(grounded: bool = True, repairing: bool = False) -> dict:
    return {"event": "grounding", "ran": True, "grounded": grounded, "verified": grounded,
            "repairs": 0, "repairing": repairing, "caveat": None, "unsupported": [],
            "silent": [], "uncited": [], "checks": []}


def good_run(tool: str = "mcp.add", text: str = "The sum is 5.") -> list[dict]:
    return [started(), step(1), *call(1, tool, {"a": 2, "b": 3}), step(2), answer(text),
            finished()]


def write_stream(path: Path, records: list[dict], *, envelopes: bool = True,
                 tail: str = "") -> Path:
    """Write records as the run store does (envelopes) or bare; ``tail`` is appended raw."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for seq, record in enumerate(records, start=1):
        value = {"seq": seq, "at": "2026-11-30T09:00:00Z", "record": record} if envelopes else record
        lines.append(json.dumps(value, ensure_ascii=False))
    path.write_text("".join(line + "\n" for line in lines) + tail, encoding="utf-8")
    return path


def write_suite(path: Path, missions: list[dict], **top: Any) -> Path:
    import yaml

    doc = {"name": path.stem, "tools": ["mcp.echo", "mcp.add", "mcp.fail"], **top,
           "missions": missions}
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def mission(key: str, flag: str = "chaining", split: str = "train", **machine: Any) -> dict:
    return {"key": key, "flag": flag, "split": split, "prompt": f"Work out the sum for case {key}.",
            "must": ["states the sum"], "must_not": ["invents a figure"],
            "because": "sums are the simplest chain", **machine}


def padded(missions: list[dict], flag: str = "chaining") -> list[dict]:
    """``missions`` and as few more as make the suite pass check's split rules (at least 3
    held out, 25% to 40% of all): missions no test runs, so each is scored 'not run'."""
    out = list(missions)
    while True:
        held = sum(m.get("split", "train") == "test" for m in out)
        if held >= 3 and 4 * held >= len(out) and 5 * held <= 2 * len(out):
            return out
        split = "test" if held < 3 or 4 * held < len(out) else "train"
        out.append(mission(f"unrun-{len(out)}", flag=flag, split=split))
