"""Layering is one way: runtime -> recordings (store) -> tables and verdicts (eval) -> reports.

Read from the source with ``ast``, so an import inside a function counts too:
the scorer never imports the runtime, the store never imports the scorer, and
nothing below the CLI imports it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import evalkit

PACKAGE = Path(evalkit.__file__).parent

#: What each part of evalkit must never import (its own modules aside).
FORBIDDEN: dict[str, set[str]] = {
    "store": {"runtime", "eval", "report", "commands", "cli", "grounding", "planes"},
    "runtime": {"eval", "report", "commands", "cli"},
    "eval": {"runtime", "report", "commands", "cli"},
    "report": {"runtime", "commands", "cli"},
    "grounding": {"runtime", "eval", "report", "store", "commands", "cli"},
    "planes": {"runtime", "eval", "report", "store", "commands", "cli"},
    "forkserver": {"runtime", "eval", "report", "store", "commands", "cli", "grounding", "planes"},
}


def _imports(path: Path) -> set[str]:
    """The top-level evalkit parts a module imports (``evalkit.X...`` -> ``X``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            module = node.module
            if module == "evalkit":
                found |= {alias.name for alias in node.names}
            elif module.startswith("evalkit."):
                found.add(module.split(".")[1])
        elif isinstance(node, ast.Import):
            found |= {alias.name.split(".")[1] for alias in node.names
                      if alias.name.startswith("evalkit.")}
    return found


def test_no_part_imports_a_layer_above_it() -> None:
    wrong = []
    for part, forbidden in FORBIDDEN.items():
        for path in sorted((PACKAGE / part).rglob("*.py")):
            for above in sorted(_imports(path) & forbidden):
                wrong.append(f"{path.relative_to(PACKAGE)} imports evalkit.{above}")
    assert wrong == []


def test_the_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from evalkit.runtime import run\n"
                      "import evalkit.report.html\nfrom evalkit import eval\n")
    assert _imports(module) == {"runtime", "report", "eval"}
