"""A foreign agent: a tiny program that is not evalkit and speaks the stream.

It takes the objective as its first positional argument (or ``--objective TEXT``),
writes records to ``--events fd:N``, and reads nothing of evalkit's. Its
behaviour is steered by flags and one environment variable, so tests can make
it pass, fail, refuse, hang or go quiet:

- ``--refuse FLAG``: when FLAG is also on the command line, exit 2 saying FLAG is
  not available (how an agent refuses a row at startup);
- ``--hang``: start, spawn a grandchild holding the stream open, and sleep;
- ``--silent``: write no record and exit 1;
- ``--endpoint-down``: the model endpoint "fails" and the mission ends incomplete;
- ``FOREIGN_TABLE`` (env): a JSON file ``{row: {key: [true, false, ...]}}`` giving
  pass/fail per repeat; the row is read from the flags (``--swarm``, ``--protocol
  native``, ``--skill DIR/<row>/skill.md``), the repeat and key from the runs root
  (``.../rep<n>/<key>/runs``). Without it every mission passes.

Every record is deterministic (fixed run id and elapsed time), so two runs of
the same suite give byte-identical reports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def parse(argv: list[str]) -> tuple[str | None, dict[str, list[str]]]:
    objective = None
    flags: dict[str, list[str]] = {}
    i = 0
    takes = {"--events", "--objective", "--refuse", "--protocol", "--skill", "--api-key",
             "--mcp-url", "--model", "--provider", "--api-base", "--runs", "--script",
             "--mcp-stdio", "--profile"}
    while i < len(argv):
        token = argv[i]
        if token.startswith("--"):
            name, eq, value = token.partition("=")
            if eq:
                flags.setdefault(name, []).append(value)
            elif name in takes and i + 1 < len(argv):
                flags.setdefault(name, []).append(argv[i + 1])
                i += 1
            else:
                flags.setdefault(name, []).append("")
        elif objective is None:
            objective = token
        i += 1
    if "--objective" in flags:
        objective = flags["--objective"][0]
    return objective, flags


def row_of(flags: dict[str, list[str]]) -> str:
    if "--swarm" in flags:
        return "swarm"
    if flags.get("--protocol") == ["native"]:
        return "native"
    skill = flags.get("--skill")
    if skill:
        return Path(skill[0]).parent.name
    return "direct"


def main() -> int:
    objective, flags = parse(sys.argv[1:])
    for refused in flags.get("--refuse", []):
        if refused in flags:
            print(f"Error: {refused} is not available yet.", file=sys.stderr)
            return 2
    print(json.dumps({"argv": sys.argv[1:], "objective": objective,
                      "runs": os.environ.get("EVALKIT_RUNS")}))
    if "--silent" in flags:
        print("nothing to say", file=sys.stderr)
        return 1
    spec = flags["--events"][0]
    out = os.fdopen(int(spec.partition(":")[2]), "w", encoding="utf-8")
    runs = Path(flags.get("--runs", [os.environ["EVALKIT_RUNS"]])[0])
    runs.mkdir(parents=True, exist_ok=True)
    (runs / "foreign.txt").write_text(objective or "", encoding="utf-8")

    def emit(record: dict) -> None:
        out.write(json.dumps(record) + "\n")
        out.flush()

    emit({"event": "mission_started", "schema_version": 1, "objective": objective,
          "catalogue": ["mcp.add"], "gated": [], "max_steps": 0, "history": 0,
          "run_id": "run_foreign-1", "sandbox": "none"})
    emit({"event": "step_started", "index": 0})
    if "--hang" in flags:
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                         pass_fds=(out.fileno(),))
        time.sleep(120)
        return 0
    if "--endpoint-down" in flags:
        emit({"event": "model_state", "state": "failed", "provider": "foreign", "model": "m",
              "index": 0, "detail": "HTTP 500: boom"})
        emit({"event": "mission_finished", "outcome": "incomplete", "steps": 1, "max_steps": 0,
              "elapsed_s": 0.5, "reason": "the model endpoint failed"})
        return 0
    passed = True
    table = os.environ.get("FOREIGN_TABLE")
    if table:
        rep_dir = runs.parent.parent.name  # .../rep<n>/<key>/runs
        key = runs.parent.name
        rep = int(rep_dir[3:]) if rep_dir.startswith("rep") else 1
        passed = json.loads(Path(table).read_text())[row_of(flags)][key][rep - 1]
    emit({"event": "tool_call", "index": 0, "tool": "mcp.add", "arguments": {"a": 2, "b": 3}})
    emit({"event": "tool_result", "index": 0, "tool": "mcp.add", "arguments": {"a": 2, "b": 3},
          "ok": True, "exit_code": 0, "output": "5", "error": None, "handle": "r1",
          "truncated": False})
    emit({"event": "step_started", "index": 1})
    text = "The sum is 5." if passed else "I could not work it out."
    emit({"event": "answer", "text": text, "outcome": "answered"})
    emit({"event": "mission_finished", "outcome": "answered", "steps": 2, "max_steps": 0,
          "elapsed_s": 0.25, "usage": {"calls": 2}})
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
