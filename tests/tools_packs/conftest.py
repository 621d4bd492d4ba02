"""Shared parts for the pack tools' tests: staged fixture repositories, a plane, a pages server.

Everything is real: the fixture repositories are staged by
``stage_fixtures`` into real git repositories, ``verify`` runs a real
pytest, and the pages are served over a real socket on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from evalkit.planes.fixtures import stage_fixtures
from evalkit.planes.pages import PagesServer
from evalkit.runtime.tools import Bwrap, NoSandbox, ResultStore, Sandbox, ToolPlane

REPO = Path(__file__).resolve().parents[2]
SUITES = REPO / "suites"
CODING = SUITES / "coding"
ANALYST = SUITES / "analyst"
RESEARCH = SUITES / "research"
PACK_TOOLS = ["fs", "repo_map", "patch", "verify", "git", "fetch_page", "mission_result"]

needs_bwrap = pytest.mark.skipif(not Bwrap.available(), reason="bubblewrap (bwrap) is not installed")


def make_plane(root: Path, sandbox: Sandbox | None = None, **options: object) -> ToolPlane:
    """A plane over ``root`` offering the pack tools (and fs, mission_result)."""
    return ToolPlane(root, ResultStore(), builtins=list(PACK_TOOLS),  # type: ignore[arg-type]
                     sandbox=sandbox or NoSandbox(), **options)


@pytest.fixture
def staged(tmp_path: Path) -> Callable[[str], Path]:
    """``staged("textkit")`` -> a fresh git repository of that coding fixture."""
    def stage(name: str) -> Path:
        return stage_fixtures(CODING, tmp_path / f"repo-{name}", only=name)
    return stage


@pytest.fixture(scope="module")
def pages() -> Iterator[PagesServer]:
    """The research fixtures served on 127.0.0.1 for the module."""
    with PagesServer(RESEARCH / "fixtures") as server:
        yield server
