"""The one-tool mission the recorder, OTel and example tests share: 17 times 23, read off
a ``multiply`` tool, with the two replies a local chat server gives for it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
USAGE = {"prompt_tokens": 21, "completion_tokens": 7, "total_tokens": 28}


def times_suite(name: str) -> str:
    """A one-mission suite (key ``times``) that passes when the answer says 391 after a
    ``multiply`` call."""
    return f"""\
name: {name}
tools: [multiply]
missions:
  - key: times
    flag: chaining
    prompt: What is 17 times 23?
    expects_outcome: answered
    expects_tools: [multiply]
    answer_must_match: ['\\b391\\b']
    because: the simplest chain, a product read off a tool
"""


def queue_times(server: Any) -> None:
    """The two replies of the mission: a ``multiply`` call, then the answer."""
    server.reply(tool_calls=[{"id": "call_1", "type": "function", "function": {
        "name": "multiply", "arguments": '{"a": 17, "b": 23}'}}], usage=USAGE)
    server.reply("17 times 23 is 391.", usage=USAGE)


def evalkit(*args: str | Path, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    """``evalkit`` as a process, with this checkout's package."""
    return subprocess.run([sys.executable, "-m", "evalkit.cli", *map(str, args)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                          capture_output=True, text=True, timeout=300, check=False)
