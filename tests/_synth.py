"""A corpus the benchmarks' synthesiser writes (``benchmarks/synth.py``): runs, their suite
and their dataset, for the tests that score many missions at once."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def synthesised(out: Path, runs: int, **options: Any) -> Path:
    """``runs`` synthesised runs under ``out/runs`` (some failing), their suite as
    ``out/suite.yaml`` and their dataset as ``out/dataset.parquet``; ``out``."""
    from evalkit.eval.tables import ingest

    spec = importlib.util.spec_from_file_location("evalkit_bench_synth",
                                                  ROOT / "benchmarks" / "synth.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    module.synthesise(out, runs, **options)
    ingest(out / "runs", out / "dataset.parquet")
    return out
