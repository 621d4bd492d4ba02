"""evalkit: an evaluation and replay harness for LLM agents.

Every model call and tool call of a mission lands in a recording, and every
verdict about a mission is re-derived from that recording alone.

The public API (README, "Using evalkit from Python")::

    from evalkit import load_suite, check, score, ingest, query, runs_df, verdicts_df
    from evalkit import register_check, Check, Field, Verdict, ScoreReport

Each name is imported on first use, so ``import evalkit`` (and every CLI
command) pays only for what it touches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Each public name -> the module that defines it.
_PUBLIC: dict[str, str] = {
    "load_suite": "evalkit.eval.suite",
    "check": "evalkit.api",
    "score": "evalkit.api",
    "ingest": "evalkit.api",
    "query": "evalkit.api",
    "runs_df": "evalkit.api",
    "verdicts_df": "evalkit.api",
    "register_check": "evalkit.eval.checks",
    "Check": "evalkit.eval.checks",
    "Field": "evalkit.eval.checks",
    "Verdict": "evalkit.eval.verdict",
    "ScoreReport": "evalkit.eval.score",
    "Suite": "evalkit.eval.suite",
    "Mission": "evalkit.eval.mission",
    "CheckResult": "evalkit.eval.check",
    "EvalkitError": "evalkit.errors",
}

__all__ = ["__version__", *_PUBLIC]

if TYPE_CHECKING:  # what the names are, for a type checker (``X as X``: re-exported)
    from evalkit.api import check as check
    from evalkit.api import ingest as ingest
    from evalkit.api import query as query
    from evalkit.api import runs_df as runs_df
    from evalkit.api import score as score
    from evalkit.api import verdicts_df as verdicts_df
    from evalkit.errors import EvalkitError as EvalkitError
    from evalkit.eval.check import CheckResult as CheckResult
    from evalkit.eval.checks import Check as Check
    from evalkit.eval.checks import Field as Field
    from evalkit.eval.checks import register_check as register_check
    from evalkit.eval.mission import Mission as Mission
    from evalkit.eval.score import ScoreReport as ScoreReport
    from evalkit.eval.suite import Suite as Suite
    from evalkit.eval.suite import load_suite as load_suite
    from evalkit.eval.verdict import Verdict as Verdict


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'evalkit' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
