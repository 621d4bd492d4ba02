"""``evalkit judge``: ask a model judge once per answer, and record what it said.

The scorer never calls a model. This package is the one part of evalkit that
asks a judge: for every judged mission of a suite it works out the judgment's
key (``evalkit.eval.judging``), skips the keys already recorded, asks the judge
for the rest — a model behind an OpenAI-compatible endpoint, or a scripted
judge of canned judgments — and appends each judgment to the run's
``judge/judge.jsonl``, redacted, then seals that folder. ``score`` reads them
back; ``evalkit.eval`` never imports this package.
"""

from __future__ import annotations

from evalkit.judge.record import Outcome, judge_runs

__all__ = ["Outcome", "judge_runs"]
