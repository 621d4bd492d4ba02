"""A small judged suite and its runs, built as data, for the judge's tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests._stream_builders import answer, call, finished, mission, started, step, write_stream

#: The answer each mission's run gives; "sum" answers are right, "guess" ones are not.
ANSWERS = {"j1": "The sum is 5.", "j2": "The sum is 7.", "j3": "It is probably 9.",
           "plain": "The sum is 5."}


def canned(path: Path, entries: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump({"judgments": entries}, sort_keys=False), encoding="utf-8")
    return path


#: A scripted judge that passes an answer stating a sum and fails a guess.
FAIR = [{"answer_matches": "sum is", "grade": "pass", "score": 1, "reasons": []},
        {"grade": "fail", "score": 0, "reasons": ["guesses instead of stating the sum"]}]


def lab(root: Path, *, judge: dict[str, Any] | None = None,
        missions: dict[str, dict[str, Any]] | None = None) -> tuple[Path, Path]:
    """(suite file, runs folder): missions j1..j3 judged (j1 and j3 also check their answer
    by pattern), ``plain`` not judged; the suite's judge is ``judge`` (default: the fair
    scripted judge in ``fair.yaml``)."""
    root.mkdir(parents=True, exist_ok=True)
    canned(root / "fair.yaml", FAIR)
    specs = {"j1": {"judge": {}, "answer_must_match": ["sum is 5"]},
             "j2": {"judge": {}},
             "j3": {"judge": {"criteria": "States the sum, and does not guess."},
                    "answer_must_match": ["sum is"]},
             "plain": {}}
    specs.update(missions or {})
    doc = {"name": "judged", "tools": ["mcp.add"], "judge": judge or {"scripted": "fair.yaml"},
           "missions": [mission(key, **fields) for key, fields in specs.items()]}
    suite = root / "judged.yaml"
    suite.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    runs = root / "runs"
    for key in specs:
        write_stream(runs / key / "events.jsonl",
                     [started(), step(1), *call(1, "mcp.add", {"a": 2, "b": 3}), step(2),
                      answer(ANSWERS.get(key, "The sum is 5.")), finished()])
    return suite, runs
