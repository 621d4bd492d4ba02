"""What answer patterns cost under RE2 (what scoring runs) and under Python's ``re`` (what it ran).

The shipped suites' answer patterns that are real regexes (plain words take
a substring shortcut under either engine) against every answer the corpus
recorded, best of five; then one hostile answer against ``^(a|aa)+$``,
which backtracking cannot finish and RE2 scans once.

    python benchmarks/bench_patterns.py
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import yaml

from evalkit.eval.verdict import _as_literal
from evalkit.patterns import compile_pattern

ROOT = Path(__file__).resolve().parents[1]


def corpus() -> tuple[list[str], list[str]]:
    patterns: list[str] = []
    for suite in sorted((ROOT / "suites").glob("*/missions.yaml")):
        for mission in yaml.safe_load(suite.read_text())["missions"]:
            for key in ("answer_must_match", "answer_must_not_match"):
                patterns += [p for p in mission.get(key) or () if _as_literal(p)[0] is None]
    answers = []
    for events in sorted((ROOT / "recordings").glob("**/events.jsonl")):
        for line in events.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            record = record.get("record", record)
            if record.get("event") == "answer":
                answers.append(record["text"])
    return patterns, answers


def per_search(compiled: list, answers: list[str]) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for answer in answers:
            for pattern in compiled:
                pattern.search(answer)
        best = min(best, time.perf_counter() - start)
    return best / (len(answers) * len(compiled))


def main() -> None:
    patterns, answers = corpus()
    print(f"{len(patterns)} regex answer patterns x {len(answers)} recorded answers")
    for name, compile_ in (("python re", re.compile), ("re2", compile_pattern)):
        cost = per_search([compile_(p) for p in patterns], answers)
        print(f"  {name:9} {cost * 1e6:6.2f} us per search")
    hostile = "a" * 1_000_000 + "!"
    start = time.perf_counter()
    compile_pattern("^(a|aa)+$").search(hostile)
    print(f"^(a|aa)+$ against 1 MB of a's: re2 {time.perf_counter() - start:.3f} s")
    for n in (24, 28):
        start = time.perf_counter()
        re.search("^(a|aa)+$", "a" * n + "!")
        print(f"  python re, {n} a's: {time.perf_counter() - start:.3f} s")
    print("  (python re grows about 1.6x per further a: 40 take half a minute)")


if __name__ == "__main__":
    main()
