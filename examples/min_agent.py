"""The smallest agent that passes `evalkit conform --no-gates`: no tools, no gates.

Spawned as `python min_agent.py "<objective>" --events fd:N [flags it ignores]`.
SIGTERM ends the mission incomplete, reason cancelled; mission_finished always arrives.
"""

import json
import os
import signal
import sys
import time

objective, events = sys.argv[1], sys.argv[sys.argv.index("--events") + 1]
sink = os.fdopen(int(events.removeprefix("fd:")), "w")


def emit(event, **fields):
    sink.write(json.dumps({"event": event, **fields}) + "\n")
    sink.flush()


signal.signal(signal.SIGTERM, lambda *_: sys.exit())  # raises SystemExit where we are
finish = {"outcome": "incomplete", "steps": 1, "max_steps": 0}
try:
    emit("mission_started", schema_version=1, objective=objective, catalogue=[], gated=[],
         max_steps=0, history=0)
    emit("step_started", index=0)
    time.sleep(0.5)  # stands in for the model call
    emit("answer", text=f"ready: {objective}", outcome="answered")
    finish["outcome"] = "answered"
except SystemExit:
    finish["reason"] = "cancelled"
finally:
    emit("mission_finished", **finish)
