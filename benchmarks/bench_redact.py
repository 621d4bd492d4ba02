"""Throughput of the one redactor on large text, with and without secrets.

    python benchmarks/bench_redact.py

The first three lines time ``redact`` on one big text five times over (what a
long tool output costs, the memo of long texts included: the model log
repeats them). The "never seen" lines give every round a text new to the
redactor, so the memo cannot help, and "recorded corpus" puts every line of
``recordings/`` (model logs repeating whole conversations included) through
``redact_obj`` with a fresh redactor — what a run pays per record. Those are
the best of five tries, since other work on the machine only ever slows a try.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalkit.redact import Redactor, redact

SECRET = "sk-proj-" + "A1b2C3d4" * 4
CORPUS = Path(__file__).resolve().parent.parent / "recordings"
TRIES = 5


def rate(text: str, rounds: int = 5) -> float:
    start = time.perf_counter()
    for _ in range(rounds):
        redact(text)
    return len(text) * rounds / (time.perf_counter() - start) / 1e6


def best(seconds: Callable[[], float]) -> float:
    return min(seconds() for _ in range(TRIES))


def unseen_rate(text: str, rounds: int = 5) -> float:
    def once() -> float:
        texts = [f"{time.perf_counter_ns()}.{i} {text}" for i in range(rounds)]
        start = time.perf_counter()
        for one in texts:
            redact(one)
        return time.perf_counter() - start

    return len(text) * rounds / best(once) / 1e6


def corpus() -> tuple[list[Any], int]:
    records, size = [], 0
    for path in sorted(CORPUS.rglob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                records.append(json.loads(line))
                size += len(line)
    return records, size


def records_rate(records: list[Any], size: int) -> float:
    def once() -> float:
        redactor = Redactor()
        start = time.perf_counter()
        for record in records:
            redactor.redact_obj(record)
        return time.perf_counter() - start

    return size / best(once) / 1e6


def main() -> None:
    code = "def f(x):\n    y = x + 1  # high through right, bearer of news\n" * 20000
    plain = "nothing to see here " * 50000
    dense = (SECRET + " ") * 20000
    print(f"code-like text with one secret: {rate(code + SECRET):8.1f} MB/s")
    print(f"plain text, no candidates:      {rate(plain):8.1f} MB/s")
    print(f"secret-dense text:              {rate(dense):8.1f} MB/s")
    print(f"code-like text, never seen:     {unseen_rate(code + SECRET):8.1f} MB/s")
    print(f"plain text, never seen:         {unseen_rate(plain):8.1f} MB/s")
    print(f"secret-dense text, never seen:  {unseen_rate(dense):8.1f} MB/s")
    records, size = corpus()
    print(f"recorded corpus, per record:    {records_rate(records, size):8.1f} MB/s "
          f"({len(records)} records)")


if __name__ == "__main__":
    main()
