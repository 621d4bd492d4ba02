"""Throughput of the one redactor on large text, with and without secrets.

    python benchmarks/bench_redact.py
"""

from __future__ import annotations

import time

from evalkit.redact import redact

SECRET = "sk-proj-" + "A1b2C3d4" * 4


def rate(text: str, rounds: int = 5) -> float:
    start = time.perf_counter()
    for _ in range(rounds):
        redact(text)
    return len(text) * rounds / (time.perf_counter() - start) / 1e6


def main() -> None:
    code = "def f(x):\n    y = x + 1  # high through right, bearer of news\n" * 20000
    plain = "nothing to see here " * 50000
    print(f"code-like text with one secret: {rate(code + SECRET):8.1f} MB/s")
    print(f"plain text, no candidates:      {rate(plain):8.1f} MB/s")
    print(f"secret-dense text:              {rate((SECRET + ' ') * 20000):8.1f} MB/s")


if __name__ == "__main__":
    main()
