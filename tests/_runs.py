"""Helpers shared by the ingest and tables tests: run directories and an edge-case corpus.

Plain functions (no fixtures) so any test module can import them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalkit.eval.summary import summarize
from evalkit.store.reader import read_events_file


def envelope(seq: int, record: Any, at: str = "2025-03-01T10:00:00Z") -> str:
    return json.dumps({"seq": seq, "at": at, "record": record}, ensure_ascii=False,
                      separators=(",", ":"))


def bare(record: Any) -> str:
    return json.dumps(record, ensure_ascii=False)


def write_run(directory: Path, events: list[str] | bytes, *, meta: dict | None = None,
              model: list[dict] | None = None, tools: list[dict] | None = None) -> Path:
    """A run directory; ``events`` is a list of lines (joined with newlines) or raw bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    data = events if isinstance(events, bytes) else "".join(f"{line}\n" for line in events).encode()
    (directory / "events.jsonl").write_bytes(data)
    if meta is not None:
        (directory / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    if model is not None:
        (directory / "model.jsonl").write_text(
            "".join(json.dumps(m, sort_keys=True) + "\n" for m in model), encoding="utf-8")
    if tools is not None:
        (directory / "tools.jsonl").write_text(
            "".join(json.dumps(t, sort_keys=True) + "\n" for t in tools), encoding="utf-8")
    return directory


def started(**extra: Any) -> dict[str, Any]:
    return {"event": "mission_started", "schema_version": 1, "objective": "find the order",
            "catalogue": ["mcp.a", "mcp.b"], "gated": [], "max_steps": 8, "history": 0,
            "sandbox": "bwrap", "profile": "dev", "run_id": "run_x-1", **extra}


def finished(outcome: str = "answered", **extra: Any) -> dict[str, Any]:
    return {"event": "mission_finished", "outcome": outcome, "steps": 2, "max_steps": 8,
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
                      "calls": 2}, "elapsed_s": 1.25, **extra}


def call(index: int, tool: Any, **extra: Any) -> dict[str, Any]:
    return {"event": "tool_call", "index": index, "tool": tool, "arguments": {"q": 1}, **extra}


def result(index: int, tool: Any, ok: Any = True, **extra: Any) -> dict[str, Any]:
    return {"event": "tool_result", "index": index, "tool": tool, "arguments": {"q": 1}, "ok": ok,
            "exit_code": 0, "output": "fine", "error": None, "handle": "r1", "truncated": False,
            **extra}


def grounding(repairing: Any, **extra: Any) -> dict[str, Any]:
    return {"event": "grounding", "ran": True, "grounded": True, "verified": False, "repairs": 1,
            "repairing": repairing, "caveat": None, "unsupported": [], "silent": [],
            "uncited": [], "checks": [], **extra}


def answer(text: Any, outcome: Any = "answered", **extra: Any) -> dict[str, Any]:
    return {"event": "answer", "text": text, "outcome": outcome, **extra}


def _every_event() -> list[dict[str, Any]]:
    return [
        started(protocol="native", granted=["net"]),
        {"event": "model_state", "state": "loading", "provider": "openai", "model": "m"},
        {"event": "step_started", "index": 1, "plan": [{"id": "s1", "goal": "g", "rung": 1}]},
        {"event": "step_started", "index": 2, "injected": ["be brief"], "branch": "s1"},
        {"event": "reply_rejected", "index": 2, "problem": "not json", "tool": "mcp.x"},
        {"event": "reply_rejected", "index": 2, "problem": "not json", "tool": None},
        {"event": "reply_rejected", "index": 2, "problem": "not json"},
        call(2, "mcp.a", usage={"prompt_tokens": 5}),
        result(2, "mcp.a", ok=False),
        {"event": "gate_requested", "index": 3, "tool": "mcp.b", "arguments": {},
         "reason": "gated", "approval_id": "ap1"},
        {"event": "answer_delta", "index": 3, "part": 0, "text": "partial"},
        grounding(True), grounding(False, repairs=2),
        answer("The order was refunded."),
        finished("budget_exhausted", budget={"which": "steps", "limit": 8, "spent": 8},
                 reason="stuck"),
    ]


def corpus() -> dict[str, list[str] | bytes]:
    """Streams covering every event and the edges the reader must survive."""
    every = _every_event()
    streams: dict[str, list[str] | bytes] = {
        "every_event": [envelope(i, r) for i, r in enumerate(every, 1)],
        "every_event_bare": [bare(r) for r in every],
        "no_finish": [envelope(1, started()), envelope(2, call(1, "mcp.a"))],
        "repair_then_verdict": [bare(grounding(True)), bare(grounding(False, grounded=False)),
                                bare(grounding(True, grounded=True)), bare(finished())],
        "nonconforming": [
            bare({"event": "mystery", "x": 1}), bare(started(schema_version=2)),
            bare({"event": "tool_call", "index": 1}), bare({"no": "event"}),
            bare(started(schema_version=True)), bare(started(schema_version="1")),
            bare(started(schema_version=1.0)), bare({"event": 5}), bare({"event": None}),
            bare(finished()),
        ],
        "odd_types": [
            bare(call(1, 5)), bare(call(2, {"a": 1})), bare(call(3, ["x"])), bare(call(4, True)),
            bare(call(5, 1.5)), bare(call(6, 1e20)), bare(call(7, None)),
            bare({"event": "tool_call", "index": 8, "arguments": {}}),
            bare({"event": "gate_requested", "index": 1, "tool": 7, "arguments": {},
                  "reason": "r"}),
            bare({"event": "reply_rejected", "index": 1, "problem": "p", "tool": ["t"]}),
            bare(answer({"rich": "text"}, outcome=3)),
            bare(finished(outcome=None, steps="2", max_steps=True, elapsed_s=2.0,
                          budget="seconds", usage={"prompt_tokens": 10.0, "total_tokens": "x",
                                                   "completion_tokens": False, "cost": 0.25})),
            bare(finished(budget=5, usage=[1, 2])),
            bare(finished(budget=[1], reason={"why": 1}, usage={"calls": -0.0})),
            bare(finished(budget={"which": 9}, usage="none")),
            bare(started(run_id=12, protocol=None, profile=["dev"], sandbox=True)),
        ],
        "nan_ish": [
            '{"event":"answer","text":"x","outcome":NaN}',
            '{"event":"answer","text":"x","outcome":"a","n":Infinity}',
            '{"event":"answer","text":"x","outcome":"a","n":-Infinity}',
            '{"event":"answer","text":"x","outcome":"a","n":nan}',
            '{"event":"answer","text":"x","outcome":"a","n":1e400}',
            '{"event":"answer","text":"x","outcome":"a","n":[1,2,]}',
            '{"event":"answer","text":"x","outcome":"a",}',
            '{"event":"answer","text":"x","outcome":"a","n":' + "1" * 400 + "}",
            envelope(1, answer("NaN, Infinity, inf, nan, [1,] and 1e400 in a string")),
            bare(answer("level: info, nan: [], infinity] ,}")),
            "NaN", "-Infinity", "[1,]",
            envelope(2, finished(steps=2**60 + 1, max_steps=2**64 + 5,
                                 usage={"total_tokens": 10**30, "prompt_tokens": -(2**63) - 1,
                                        "calls": 2**53 + 1, "cost": 1e300})),
            bare(grounding(False, repairs=2**62 + 3)),
            bare({"event": "step_started", "index": 2**63, "call": 1e300}),
        ],
        # JSON that orjson refuses and the grammar allows: lone surrogate escapes (a
        # JavaScript writer cutting a string mid-emoji), numbers past a double's range.
        "half_characters": [
            bare(started()),
            '{"event":"tool_result","index":1,"tool":"mcp.read","arguments":{},"ok":true,'
            '"exit_code":0,"output":"cut at \\ud83d","error":null,"handle":null,"truncated":true}',
            '{"seq":2,"at":"2025-03-01T10:00:01Z","record":{"event":"answer",'
            '"text":"42 \\ud83d\\ude00 and a half \\udc00","outcome":"answered","\\ud800":1}}',
            '{"event":"mission_finished","outcome":"answered","steps":1,"max_steps":4,'
            '"elapsed_s":1e400,"usage":{"total_tokens":' + "9" * 400 + "}}",
            '{"event":"answer","text":"\\ud83d","outcome":NaN}',
        ],
        "duplicates": [
            '{"event":"mystery","event":"answer","text":"a","outcome":"answered"}',
            '{"seq":1,"record":{"event":"answer","text":"x","outcome":"o"},'
            '"record":{"event":"answer","text":"y","outcome":"p"}}',
            '{"record":5,"seq":1,"record":{"event":"answer","text":"z","outcome":"q"}}',
            '{"event":"mission_finished","outcome":"answered","steps":1,"max_steps":2,'
            '"usage":{"total_tokens":1,"total_tokens":2},"budget":{"which":"a","which":"b"}}',
            '{"seq":1,"seq":2,"at":"x","at":"y","record":{"event":"step_started","index":1}}',
            '{"event":"step_started","index":1,"index":2,"injected":1,"injected":0}',
        ],
        "unicode": [
            envelope(1, answer("Réponse: 東京 🚀 \u2028 done")),
            bare(answer("escaped \\u00e9 \u00e9")),
            '{"event":"answer","text":"pair \\ud83d\\ude80","outcome":"answered"}',
            '{"event":"answer","text":"lone \\ud83d","outcome":"answered"}',
            '{"event":"answer","text":"nul \\u0000 byte","outcome":"answered"}',
            '{"\\u0065vent":"answer","text":"escaped key","outcome":"answered"}',
            bare(call(1, "outil_é")),
        ],
        "empty": [],
        "blank_only": b"\n   \n\t\n\x0c\n\xe3\x80\x80\n\r\n",
        "whitespace": [
            "  " + bare(started()) + "  ", "\t" + bare(call(1, "mcp.a")) + "\r",
            "\x0c" + bare(call(2, "mcp.b")), "\u3000" + bare(answer("x")),
            bare(finished()) + "\x0b",
        ],
        "crlf_torn_tail": (bare(started()) + "\r\n" + bare(call(1, "a")) + "\r\n"
                           + '{"event":"tool_result","ind').encode(),
        "no_trailing_newline": (bare(started()) + "\n" + bare(finished())).encode(),
        "non_objects": ["[1,2]", '"str"', "12", "null", "true", bare(finished()), "{", "}"],
        "bad_utf8": b'{"event":"answer","text":"caf\xe9 \xff\xfe","outcome":"answered"}\n'
                    + b'\xc3\x28 torn\n' + bare(finished()).encode() + b"\n",
        "binary": bytes(range(256)) * 8,
        "envelope_shapes": [
            '{"seq":1,"record":' + bare(started()) + "}",
            '{"record":' + bare(call(1, "first")) + ',"seq":2}',
            '{"seq":3,"at":"t","record":' + bare(call(2, "x")) + ',"event":"answer"}',
            '{"seq":4,"record":5}',
            '{"record":' + bare(call(3, "noseq")) + "}",
            '{"seq": 5, "at": "t", "record": ' + bare(call(4, "spaced")) + " }",
            '{"seq":6,"at":"t","record":{"event":"answer","text":"a","outcome":"o",'
            '"meta":{"x":1,"record":{"y":2}}}}',
            '{"seq":7,"at":"t","record":' + bare(call(5, "extra")) + ',"extra":{"z":1}}',
            '{"seq":8,"at":"t","meta":{"record":{"a":1}},"record":' + bare(call(6, "m")) + "}",
            '{"seq":2.0,"at":5,"record":' + bare(call(7, "seqfloat")) + "}",
            '{"seq":"9","at":null,"record":' + bare(call(8, "seqstr")) + "}",
            '{"seq":10,"at":"t","record":{"event":"answer","text":"x}","outcome":"o"}}',
            '{"seq":11,"at":"t","record":' + bare(call(9, "tail")) + "}x",
        ],
        "truthiness": [
            bare({"event": "step_started", "index": i, "injected": v})
            for i, v in enumerate([0, "", [], {}, 0.0, False, None, "x", [0], {"a": 1}, 1, -0.0,
                                   0.5, " "], 1)
        ] + ['{"event":"step_started","index":99,"injected":1e-400}',
             '{"event":"step_started","index":98,"injected":{ }}',
             '{"event":"step_started","index":97,"injected":[ ]}'],
        "flags": [bare(result(1, "t", ok=v)) for v in (False, 0, "false", None, True, 1)]
        + [bare(grounding(v)) for v in (True, 1, "true", False, None)],
        "repeats": [bare(started(run_id="first")), bare(started(run_id="second")),
                    bare(answer("one")), bare(answer("two")), bare(finished("incomplete")),
                    bare(finished("answered"))],
    }
    return streams


def write_corpus(root: Path) -> dict[str, Path]:
    """Write every corpus stream as a run directory under ``root``; name -> directory."""
    return {name: write_run(root / name, lines) for name, lines in corpus().items()}


def reference(root: Path, files: list[Path]) -> dict[str, Any]:
    """What the JSONL path says: summarize over the reader's records, keyed like tables."""
    out = {}
    for path in files:
        read = read_events_file(path)
        rel = path.relative_to(root).as_posix()
        out[rel] = summarize(read.records, read.lines, source=rel, skipped=read.skipped)
    return out
