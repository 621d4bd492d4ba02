"""`--executor ray`: the matrix on a local Ray cluster gives what the local executor gives.

Ray comes with the ``ray`` extra, which ``[dev]`` includes, so this runs wherever the
tests' own install line ran — in CI too — and fails, not skips, where Ray is missing:
a skip would hide a broken Ray the way it used to hide an absent one. The default
path never imports Ray (tests/harness/test_layering.py); without the extra,
``--executor ray`` says which to install (tests/test_layering.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.conftest import FOREIGN, foreign_suite, read_json

pytestmark = pytest.mark.slow


def measure(suite: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a fresh local cluster
    env["RAY_USAGE_STATS_ENABLED"] = "0"  # Ray's default for ray.init, said: a test phones no one
    return subprocess.run(
        [sys.executable, "-m", "evalkit.cli", "measure", "--suite", str(suite), "--out", str(out),
         "--config", "native", "--repeat", "2", "--jobs", "4", "--quiet", *extra, "--",
         *FOREIGN], capture_output=True, text=True, timeout=300, env=env, check=False)


def test_the_matrix_on_a_local_ray_cluster_equals_the_local_executor(tmp_path: Path) -> None:
    suite = foreign_suite(tmp_path / "sums.yaml")
    local = measure(suite, tmp_path / "local")
    assert local.returncode == 0, local.stderr
    ray = measure(suite, tmp_path / "ray", "--executor", "ray")
    assert ray.returncode == 0, ray.stderr
    a = read_json(tmp_path / "local" / "matrix.json")
    b = read_json(tmp_path / "ray" / "matrix.json")
    assert a["statistics"] == b["statistics"] and a["rows"] == b["rows"]
    assert b["provenance"]["executor"] == "ray"
    for rep in ("direct/rep1", "native/rep2"):
        assert (tmp_path / "local" / rep / "report.json").read_bytes() == \
            (tmp_path / "ray" / rep / "report.json").read_bytes()
        # Each Ray task wrote its own mission folder.
        assert read_json(tmp_path / "ray" / rep / "h1" / "command.json")["exit_code"] == 0
