"""An agent that gets the stream wrong on purpose, so the conformance kit's rules are
seen to fail by name: its first record is a step_started (order), its mission_started
has no history (a missing field), its outcome is not a contract word, it ignores
SIGTERM, and an approved gate is never acted on."""

import json
import os
import re
import select
import signal
import sys

objective = sys.argv[1]
events = os.fdopen(int(sys.argv[sys.argv.index("--events") + 1].removeprefix("fd:")), "w")
control = os.fdopen(int(sys.argv[sys.argv.index("--control") + 1].removeprefix("fd:")))
signal.signal(signal.SIGTERM, signal.SIG_IGN)


def emit(event, **fields):
    events.write(json.dumps({"event": event, **fields}) + "\n")
    events.flush()


emit("step_started", index=0)
emit("mission_started", schema_version=1, objective=objective, catalogue=["fs"], gated=[],
     max_steps=0)
if "--gate-tool" in sys.argv and re.search(r"\w+\.txt", objective):
    emit("gate_requested", index=0, tool="fs", arguments={}, reason="gated",
         approval_id="ap_0123456789abcdef")
    select.select([control], [], [], 30)  # a decision is read and ignored; SIGTERM too
emit("answer", text="finished", outcome="done")
emit("mission_finished", outcome="done", steps=1, max_steps=0)
