"""The scorer starts fast and runs where no agent stack is installed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from evalkit.extras import EXTRAS

MODULES = ["evalkit.eval.runner", "evalkit.eval.measure", "evalkit.eval.taxonomy",
           "evalkit.eval.stats", "evalkit.commands.run"]


@pytest.mark.slow
def test_run_and_measure_import_neither_the_runtime_nor_an_extra() -> None:
    extras = sorted(name for names in EXTRAS.values() for name in names)
    code = ("import sys\n" + "".join(f"import {m}\n" for m in MODULES) +
            f"bad = sorted(m for m in sys.modules if m.partition('.')[0] in {extras!r}"
            " or m.startswith('evalkit.runtime'))\nprint(bad)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"
