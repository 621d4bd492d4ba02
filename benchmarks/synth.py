"""Synthetic runs shaped like real missions, for benchmarks.

A benchmark over toy streams measures the toy: these runs carry what a real
mission writes (a catalogue on ``mission_started``, tool outputs of a few
hundred bytes to a few KB, usage on the first record of a turn, a grounding
verdict, an answer and a closing ``mission_finished``), wrapped in envelopes
the way the run store writes them, next to ``meta.json``, ``model.jsonl`` and
``tools.jsonl``. A suite with one mission per run makes the verdicts do real
work (expected tools, outcome, answer regexes), and a share of runs is made
to fail so that failure paths are exercised too.

Deterministic: the same arguments give the same bytes (seeded RNG, fixed
timestamps), so figures from two machines compare the same data.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

FLAGS = (
    "orientation", "chaining", "absence", "state", "boundary", "disambiguation",
    "submission", "synthesis", "routing", "partial_synthesis", "protocol_shape",
)

TOOLS = tuple(
    f"mcp.{name}" for name in (
        "list_orders", "order_status", "customer_profile", "invoice_lines", "refund_policy",
        "shipment_track", "catalogue_item", "stock_level", "ticket_history", "open_ticket",
        "close_ticket", "price_quote", "warehouse_map", "supplier_terms", "audit_trail",
    )
) + ("fs", "run_python_code", "mission_result")

WORDS = (
    "the order was placed on a weekday and shipped from the northern warehouse with a "
    "standard carrier; the customer asked twice about delivery and the ticket stayed open "
    "until the refund was approved by a supervisor who noted the missing invoice line"
).split()


def _prose(rng: random.Random, size: int) -> str:
    out: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(WORDS)
        out.append(word)
        length += len(word) + 1
    return " ".join(out)


def _output(rng: random.Random, size: int) -> str:
    rows = []
    length = 0
    while length < size:
        row = json.dumps({"id": rng.randrange(10**6), "status": rng.choice(["open", "shipped", "refunded"]),
                          "note": _prose(rng, rng.randrange(40, 160))})
        rows.append(row)
        length += len(row) + 1
    return "\n".join(rows)


def _stamp(seconds: float) -> str:
    minutes, sec = divmod(seconds, 60)
    return f"2025-03-01T10:{int(minutes) % 60:02d}:{sec:06.3f}Z"


def _envelope(seq: int, at: float, record: dict[str, Any]) -> str:
    return json.dumps({"seq": seq, "at": _stamp(at), "record": record},
                      ensure_ascii=False, separators=(",", ":"))


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def mission_run(rng: random.Random, key: str, run_id: str, *, records: int = 20,
                output_bytes: int = 1500) -> dict[str, Any]:
    """One run: the records of its stream and its model/tool recordings."""
    steps = max(1, (records - 5) // 3)
    catalogue = list(TOOLS)
    outcome = rng.choices(
        ["answered", "answered_with_caveat", "budget_exhausted", "incomplete"], [80, 8, 6, 6])[0]
    objective = f"For case {key}, find what happened to the customer's last order and say why."
    stream: list[dict[str, Any]] = [{
        "event": "mission_started", "schema_version": 1, "objective": objective,
        "catalogue": catalogue, "gated": ["mcp.close_ticket"], "max_steps": 12, "history": 0,
        "sandbox": "bwrap", "profile": "dev", "audit_ref": f".evalkit/audit/{run_id}.jsonl",
        "run_id": run_id,
    }]
    model_calls: list[dict[str, Any]] = []
    tool_calls: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful operations agent. " + _prose(rng, 600)},
        {"role": "user", "content": objective},
    ]
    prompt = completion = 0
    called: list[str] = []
    for index in range(1, steps + 1):
        tool = rng.choice(TOOLS[:15])
        called.append(tool)
        arguments = {"order_id": f"O-{rng.randrange(10**6)}", "detail": rng.choice([True, False])}
        usage = {"prompt_tokens": rng.randrange(800, 4000), "completion_tokens": rng.randrange(20, 200)}
        prompt += usage["prompt_tokens"]
        completion += usage["completion_tokens"]
        output = _output(rng, int(rng.uniform(0.2, 1.8) * output_bytes))
        ok = rng.random() > 0.05
        stream.append({"event": "step_started", "index": index})
        stream.append({"event": "tool_call", "index": index, "tool": tool, "arguments": arguments,
                       "usage": usage})
        stream.append({
            "event": "tool_result", "index": index, "tool": tool, "arguments": arguments, "ok": ok,
            "exit_code": 0 if ok else 1, "output": output if ok else "",
            "error": None if ok else "upstream timed out", "handle": f"r{index}",
            "truncated": len(output) > 2000,
        })
        reply = {"content": _canonical({"tool": tool, "arguments": arguments}), "tool_calls": [],
                 "usage": usage}
        model_calls.append({"kind": "mission", "request": {"messages": list(messages[-6:]),
                                                           "extra": {"temperature": 0}},
                            "reply": reply})
        messages.append({"role": "assistant", "content": reply["content"]})
        messages.append({"role": "user", "content": "tool result:\n" + output[:800]})
        tool_calls.append({"tool": tool, "arguments": arguments,
                           "result": {"exit_code": 0 if ok else 1, "stdout": output,
                                      "stderr": "", "structured": None}})
    final = steps + 1
    answer = (f"Order for {key} was refunded after the shipment was lost. "
              + _prose(rng, rng.randrange(200, 900)))
    stream.append({"event": "step_started", "index": final})
    stream.append({"event": "answer_delta", "index": final, "part": 0, "text": answer[:120]})
    stream.append({
        "event": "grounding", "ran": True, "grounded": rng.random() > 0.1, "verified": True,
        "repairs": 0, "repairing": False, "caveat": None, "unsupported": [], "silent": [],
        "uncited": [], "checks": [{"check": "citations", "configured": True, "grounded": True,
                                    "verdict": "supported", "considered": 3, "minimum": 1,
                                    "unsupported": [], "detail": "", "advisory": False}],
    })
    stream.append({"event": "answer", "text": answer, "outcome": outcome})
    finished: dict[str, Any] = {
        "event": "mission_finished", "outcome": outcome, "steps": final, "max_steps": 12,
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion, "calls": final},
        "elapsed_s": round(rng.uniform(3, 90), 3),
    }
    if outcome == "budget_exhausted":
        finished["budget"] = {"which": "steps", "limit": 12, "spent": 12}
    stream.append(finished)
    return {"stream": stream, "model": model_calls, "tools": tool_calls, "called": called,
            "catalogue": catalogue, "objective": objective}


def write_run(directory: Path, run_id: str, run: dict[str, Any]) -> int:
    """Write one run directory as the run store would; returns bytes of events.jsonl."""
    directory.mkdir(parents=True, exist_ok=True)
    clock = 0.0
    lines = []
    for seq, record in enumerate(run["stream"], start=1):
        clock += 0.7
        lines.append(_envelope(seq, clock, record))
    events = ("\n".join(lines) + "\n").encode()
    (directory / "events.jsonl").write_bytes(events)
    model = [_canonical({"call": n, "at": _stamp(n * 1.3), **call})
             for n, call in enumerate(run["model"], start=1)]
    (directory / "model.jsonl").write_text("\n".join(model) + "\n", encoding="utf-8")
    tools = [_canonical({"call": 0, "at": _stamp(0.1),
                         "catalogue": [{"name": t, "description": f"{t} tool", "parameters": {}}
                                       for t in run["catalogue"]]})]
    tools += [_canonical({"call": n, "at": _stamp(n * 1.3 + 0.5), **call})
              for n, call in enumerate(run["tools"], start=1)]
    (directory / "tools.jsonl").write_text("\n".join(tools) + "\n", encoding="utf-8")
    meta = {"run_id": run_id, "created_at": _stamp(0), "updated_at": _stamp(clock),
            "last_seq": len(lines), "meta": {"objective": run["objective"], "flags": []}}
    (directory / "meta.json").write_text(_canonical(meta), encoding="utf-8")
    return len(events)


def _mission(rng: random.Random, n: int, key: str, run: dict[str, Any], split: str) -> dict[str, Any]:
    mission: dict[str, Any] = {
        "key": key, "flag": FLAGS[n % len(FLAGS)], "split": split,
        "prompt": f"For case {key}, find what happened to the customer's last order and say why.",
        "must": ["names the order"], "must_not": ["invents a refund"],
        "because": "the everyday question of the support desk",
        "expects_outcome": "answered", "expects_caveat_ok": True,
        "answer_must_match": ["(?i)refunded"], "answer_must_not_match": ["(?i)i cannot"],
        "max_reply_rejected": 0, "must_not_stage": True,
    }
    # Most missions expect a tool the run called; some expect one it did not.
    tool = rng.choice(run["called"]) if rng.random() > 0.1 else rng.choice(TOOLS[:15])
    mission["expects_tools"] = [tool]
    mission["forbids_tools"] = ["mcp.close_ticket"]
    return mission


def synthesise(out: Path, n: int, *, records: int = 20, output_bytes: int = 1500,
               seed: int = 7) -> dict[str, Any]:
    """Write N runs under ``out/runs`` and their suite as ``out/suite.yaml``."""
    rng = random.Random(seed)
    runs_dir = out / "runs"
    missions = []
    total = 0
    for i in range(n):
        key = f"m{i:06d}"
        run_id = f"run_20250301-100000-{i:08x}"
        run = mission_run(rng, key, run_id, records=records, output_bytes=output_bytes)
        total += write_run(runs_dir / key / run_id, run_id, run)
        split = "test" if i % 10 < 3 else "train"
        missions.append(_mission(rng, i, key, run, split))
    suite = {"name": f"synthetic-{n}", "tools": list(TOOLS), "flags": list(FLAGS),
             "missions": missions}
    # JSON is YAML; writing it so keeps the benchmark free of a YAML dumper's speed.
    (out / "suite.yaml").write_text(json.dumps(suite, indent=1), encoding="utf-8")
    return {"runs": runs_dir, "suite": out / "suite.yaml", "events_bytes": total, "n": n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("-n", type=int, default=100)
    parser.add_argument("--records-per-run", type=int, default=20)
    parser.add_argument("--output-bytes", type=int, default=1500)
    args = parser.parse_args()
    info = synthesise(args.out, args.n, records=args.records_per_run, output_bytes=args.output_bytes)
    print(f"{info['n']} runs, {info['events_bytes'] / 1e6:.1f} MB of events under {info['runs']}")


if __name__ == "__main__":
    main()
