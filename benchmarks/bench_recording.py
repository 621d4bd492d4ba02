"""What recording costs: the same scripted mission with the run store on and off.

The model answers after 50 ms (about the fastest a real endpoint replies), and
each mission makes ``STEPS`` tool calls through the real plane before it
answers. Both variants write the stream to a file sink; the only difference is
the run store (events.jsonl, model.jsonl, tools.jsonl, meta.json, each line
fsync'd). Variants alternate so drift in the machine hits both alike; the
medians are compared. Target: under 5 % overhead.

    python benchmarks/bench_recording.py [--runs 7] [--steps 10] [--explain]

``--explain`` adds a diagnostic third variant, the store on with ``os.fsync``
skipped, to show how much of the overhead is the disk's durability rather
than evalkit's own work.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from evalkit.runtime import Bounds, Reply, Run
from evalkit.runtime.tools import NoSandbox, ResultStore, ToolPlane
from evalkit.store.runstore import RunStore
from evalkit.store.sink import EventSink

MODEL_PAUSE_S = 0.050


class PausingModel:
    """A scripted model that takes 50 ms per reply, like a fast endpoint."""

    provider, model = "bench", "pausing-50ms"

    def __init__(self, steps: int) -> None:
        self._replies = [json.dumps({"tool": "fs", "arguments": {"action": "read",
                                                               "path": "data.txt"}})] * steps
        self._replies.append(json.dumps({"answer": f"read it {steps} times"}))

    def describe(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model}

    def complete(self, messages: list[dict[str, Any]], tools: Any, *, kind: str) -> Reply:
        time.sleep(MODEL_PAUSE_S)
        return Reply(content=self._replies.pop(0),
                     usage={"prompt_tokens": 500, "completion_tokens": 20, "total_tokens": 520})


def one_mission(work: Path, steps: int, *, record: bool) -> float:
    store = RunStore(work / "runs") if record else None
    results = ResultStore()
    with ToolPlane(root=work, results=results, builtins=["fs"], sandbox=NoSandbox()) as plane, \
            EventSink.open(str(work / "events.jsonl")) as sink:
        run = Run(PausingModel(steps), plane, bounds=Bounds(), store=store, sink=sink,
                  results=results)
        start = time.perf_counter()
        outcome = run.run("read data.txt repeatedly")
        wall = time.perf_counter() - start
    assert outcome.outcome == "answered", outcome
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--explain", action="store_true",
                        help="also time the store with fsync skipped (diagnostic only)")
    args = parser.parse_args()
    variants = ["off", "on"] + (["on, no fsync"] if args.explain else [])
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "data.txt").write_text("a line of data\n" * 200, encoding="utf-8")
        one_mission(work, 1, record=True)  # warm imports and caches
        walls: dict[str, list[float]] = {v: [] for v in variants}
        real_fsync = os.fsync
        for _ in range(args.runs):
            for variant in variants:
                os.fsync = (lambda fd: None) if variant == "on, no fsync" else real_fsync
                try:
                    walls[variant].append(one_mission(work, args.steps, record=variant != "off"))
                finally:
                    os.fsync = real_fsync
    off, on = statistics.median(walls["off"]), statistics.median(walls["on"])
    floor = (args.steps + 1) * MODEL_PAUSE_S
    print(f"mission: {args.steps} tool calls + answer, model pause {MODEL_PAUSE_S * 1000:.0f} ms "
          f"(floor {floor:.3f} s), {args.runs} runs each, medians")
    print(f"store off: {off:.3f} s")
    print(f"store on:  {on:.3f} s")
    overhead = (on - off) / off * 100
    print(f"recording overhead: {overhead:+.1f} % ({(on - off) * 1000:+.1f} ms per mission, "
          f"{(on - off) * 1000 / (args.steps + 1):+.2f} ms per step) — target < 5 %")
    if args.explain:
        nosync = statistics.median(walls["on, no fsync"])
        print(f"store on, fsync skipped (diagnostic): {nosync:.3f} s, "
              f"{(nosync - off) / off * 100:+.1f} %")


if __name__ == "__main__":
    main()
