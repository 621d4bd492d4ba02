"""Round-trip latency of one ``govern`` of an allowed no-op tool through the gate sidecar.

The real path, end to end: ``evalkit.gate.Client`` writes the ``govern`` line to
the spawned ``evalkit gate serve`` over a pipe; the gate decides with the policy,
proposes, decides and starts the action in the SQLite ledger (WAL,
``synchronous=FULL``: each of those commits is fsync'd), sends ``run_tool`` back,
the client runs the no-op body and answers ``tool_result``, the gate completes
the action (one more fsync'd commit), records every step in its run (each
events.jsonl line fsync'd) and answers ``govern_result``. Each call has its own
idempotency key, so every one runs the body. Calls are sequential: the figure
is latency, not throughput.

    python benchmarks/bench_gate.py [--calls 10000] [--runs none]

``--runs none`` switches the recording off, to show what the run store's fsyncs
add on top of the ledger's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from evalkit.gate.client import Client

POLICY = "version: 1\ntools:\n  noop: {risk: 0, reversible: true}\n"


def percentile(sorted_values: list[float], q: float) -> float:
    """The nearest-rank percentile of already sorted values."""
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--runs", default=None, help="run store root, or none (default: a "
                        "temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-gate-") as tmp:
        root = Path(tmp)
        (root / "policy.yaml").write_text(POLICY)
        env = {**os.environ, "EVALKIT_HOME": str(root / "home"),
               "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        runs = args.runs if args.runs is not None else root / "runs"
        with Client(root / "policy.yaml", ledger=root / "gov.sqlite", runs=runs,
                    env=env) as gate:
            gate.register_tool("noop", lambda: None)
            for i in range(args.warmup):
                gate.govern("noop", {}, idempotency_key=f"warm-{i}")
            took: list[float] = []
            started = time.perf_counter()
            for i in range(args.calls):
                t0 = time.perf_counter()
                result = gate.govern("noop", {}, idempotency_key=f"call-{i}")
                took.append(time.perf_counter() - t0)
                if result.phase != "completed":
                    print(f"call {i} ended {result.phase} ({result.kind})", file=sys.stderr)
                    return 1
            wall = time.perf_counter() - started
    took.sort()
    ms = [t * 1000 for t in took]
    print(f"govern of an allowed no-op tool, {args.calls} sequential calls over stdio "
          f"(recording {'off' if str(runs).lower() == 'none' else 'on'}):")
    print(f"  p50 {percentile(ms, 50):.2f} ms   p99 {percentile(ms, 99):.2f} ms   "
          f"mean {statistics.fmean(ms):.2f} ms   max {ms[-1]:.2f} ms   "
          f"total {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
