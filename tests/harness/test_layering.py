"""The scorer starts fast and runs where no agent stack is installed."""

from __future__ import annotations

import subprocess
import sys

MODULES = ["evalkit.eval.runner", "evalkit.eval.measure", "evalkit.eval.taxonomy",
           "evalkit.eval.stats", "evalkit.commands.run"]


def test_run_and_measure_import_neither_the_runtime_nor_ray() -> None:
    code = ("import sys\n" + "".join(f"import {m}\n" for m in MODULES) +
            "bad = sorted(m for m in sys.modules if m.startswith(('evalkit.runtime', 'ray',"
            " 'openai', 'mcp')))\nprint(bad)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"
