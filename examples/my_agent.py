"""A foreign agent: any program that writes the mission stream can be evaluated.

evalkit runs it once per mission as `python my_agent.py "<objective>" --events fd:N`
and reads one JSON object per line from that file descriptor (CONTRACT.md).
This one multiplies the first two numbers of the objective with its one "tool".
"""

import json
import os
import re
import sys

objective = sys.argv[1]
fd = int(sys.argv[sys.argv.index("--events") + 1].removeprefix("fd:"))
stream = os.fdopen(fd, "w")


def emit(event, **fields):
    stream.write(json.dumps({"event": event, **fields}) + "\n")
    stream.flush()


emit("mission_started", schema_version=1, objective=objective, catalogue=["calc.multiply"],
     gated=[], max_steps=0, history=0)
emit("step_started", index=0)
a, b = (int(n) for n in re.findall(r"\d+", objective)[:2])
arguments = {"a": a, "b": b}
emit("tool_call", index=0, tool="calc.multiply", arguments=arguments)
emit("tool_result", index=0, tool="calc.multiply", arguments=arguments, ok=True, exit_code=0,
     output=str(a * b), error=None, handle="r1", truncated=False)
emit("answer", text=f"{a} times {b} is {a * b}.", outcome="answered")
emit("mission_finished", outcome="answered", steps=1, max_steps=0)
