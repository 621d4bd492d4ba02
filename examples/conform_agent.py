"""A foreign agent that passes `evalkit conform`: the whole contract in one small file.

Spawned as `python conform_agent.py "<objective>" --events fd:N --control fd:M [flags]`.
Its one tool, fs, reads the file the objective names; a tool named by --gate-tool
waits (--gate-wait seconds) for a person's decision on the control channel; SIGTERM
ends the mission incomplete, reason cancelled; mission_finished always arrives.
"""

import argparse
import json
import os
import re
import secrets
import select
import signal
import sys

flags = argparse.ArgumentParser()
flags.add_argument("objective")
flags.add_argument("--events", required=True)
flags.add_argument("--control")
flags.add_argument("--gate-tool", action="append", default=[])
flags.add_argument("--gate-wait", type=float, default=0)
args, _ = flags.parse_known_args()
sink = os.fdopen(int(args.events.removeprefix("fd:")), "w")
control = os.fdopen(int(args.control.removeprefix("fd:"))) if args.control else None


def emit(event, **fields):
    sink.write(json.dumps({"event": event, **fields}) + "\n")
    sink.flush()


def cancelled(*_):
    raise KeyboardInterrupt


def decision(approval_id):
    while control and select.select([control], [], [], args.gate_wait)[0]:
        said = json.loads(control.readline() or "{}")
        if said.get("control") == "gate_decision" and said.get("approval_id") == approval_id:
            return said.get("approve") is True
    return False


signal.signal(signal.SIGTERM, cancelled)
finish = {"outcome": "incomplete", "steps": 0, "max_steps": 0}
try:
    emit("mission_started", schema_version=1, objective=args.objective, catalogue=["fs"],
         gated=[t for t in args.gate_tool if t == "fs"], max_steps=0, history=0)
    finish["steps"] = 1
    emit("step_started", index=0)
    named = re.search(r"[\w.-]+\.txt", args.objective)
    if named:
        call = {"index": 0, "tool": "fs", "arguments": {"path": named.group()}}
        if "fs" in args.gate_tool:
            approval_id = "ap_" + secrets.token_hex(8)
            emit("gate_requested", **call, reason="fs is gated", approval_id=approval_id)
            if not decision(approval_id):
                finish["outcome"] = "awaiting_approval"
                sys.exit(0)
        emit("tool_call", **call)
        try:
            output, error = open(named.group()).read(), None
        except OSError as exc:
            output = error = f"cannot read {named.group()}: {exc.strerror}"
        emit("tool_result", **call, ok=error is None, exit_code=0 if error is None else 1,
             output=output, error=error, handle="r1", truncated=False)
    text = f"done: {args.objective}"
    emit("answer", text=text, outcome="answered")
    finish["outcome"] = "answered"
except KeyboardInterrupt:
    finish["reason"] = "cancelled"
finally:
    emit("mission_finished", **finish)
