"""evalkit's pytest plugin: a suite's verdicts as pytest test items, and a fixture.

A Python team runs everything through pytest, so the missions of a scored suite
belong in the same run, report and ``-k`` selection as their unit tests:

    pytest --evalkit-suite suites/stub --evalkit-runs recordings/stub/good

collects one item per mission, which passes or fails with the verdict's reasons,
marked with its capability flag and its half (``-m "test and chaining"``).
``evalkit_score(suite, runs)`` is the same scoring for a user's own asserts.

pytest loads this module (entry point ``pytest11``) in every run of every project
that has evalkit installed, evalkit's own test run included. So it imports nothing
of evalkit's until an option is given or the fixture is used, and without its
options it adds no item and no marker.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from evalkit.eval.score import ScoreReport

_SUITE, _RUNS, _SPLIT = "evalkit_suite", "evalkit_runs", "evalkit_split"
#: Every collected mission carries this marker besides its flag and half.
MARKER = "evalkit"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("evalkit", "evalkit: missions of a scored suite as test items")
    group.addoption("--evalkit-suite", dest=_SUITE, metavar="SUITE",
                    help="Suite file or folder whose missions become test items.")
    group.addoption("--evalkit-runs", dest=_RUNS, metavar="DIR",
                    help="Folder with one run per mission key (as evalkit score --runs).")
    group.addoption("--evalkit-split", dest=_SPLIT, choices=("train", "test", "all"),
                    default="all", help="Which half of the suite to collect (default all).")


def pytest_configure(config: pytest.Config) -> None:
    suite, runs = config.getoption(_SUITE), config.getoption(_RUNS)
    if suite is None and runs is None:
        return
    if suite is None or runs is None:
        raise pytest.UsageError("--evalkit-suite and --evalkit-runs go together: "
                                "give the suite and the folder of its runs")
    config.addinivalue_line("markers", f"{MARKER}: a mission of an evalkit suite")
    for word in _marker_words(Path(suite)):
        config.addinivalue_line("markers", f"{word}: evalkit missions of this flag or half")


def _marker_words(suite_path: Path) -> list[str]:
    """The flags and halves of the suite: registered, so ``--strict-markers`` accepts them."""
    from evalkit import load_suite
    from evalkit.errors import EvalkitError

    try:
        suite = load_suite(suite_path)
    except EvalkitError as exc:
        raise pytest.UsageError(f"--evalkit-suite: {exc.message}") from None
    return sorted({m.flag for m in suite.missions} | {m.split for m in suite.missions})


@pytest.hookimpl(tryfirst=True)  # before -k and -m deselect what it adds
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    suite = config.getoption(_SUITE)
    if suite is None:
        return
    report = _score(suite, config.getoption(_RUNS), config.getoption(_SPLIT))
    node = SuiteNode.from_parent(session, name=f"evalkit[{report.to_dict()['suite']}]",
                                 nodeid=f"evalkit[{report.to_dict()['suite']}]")
    node.report = report
    items.extend(node.collect())


def _score(suite: str, runs: str, split: str) -> ScoreReport:
    import evalkit
    from evalkit.errors import EvalkitError

    try:
        return evalkit.score(suite, runs=runs, split=split)
    except EvalkitError as exc:
        raise pytest.UsageError(f"evalkit: {exc.message}") from None


class SuiteNode(pytest.Collector):
    """The scored suite; its children are the missions, in the suite's order."""

    report: ScoreReport

    def collect(self) -> list[pytest.Item]:
        items = []
        for verdict in self.report.to_dict()["verdicts"]:
            item = MissionItem.from_parent(self, name=str(verdict["key"]))
            item.verdict = verdict
            for word in (MARKER, verdict["flag"], verdict["split"]):
                item.add_marker(word)
            item.user_properties += [("evalkit_flag", verdict["flag"]),
                                     ("evalkit_split", verdict["split"]),
                                     ("evalkit_source", verdict.get("source") or "")]
            items.append(item)
        return items


class MissionFailed(Exception):
    """A mission whose verdict did not pass; its message is the verdict's reasons."""


class MissionItem(pytest.Item):
    """One mission: passes when its verdict passed, else fails with the reasons."""

    verdict: dict[str, Any]

    def runtest(self) -> None:
        if not self.verdict["passed"]:
            raise MissionFailed(self._reasons())

    def _reasons(self) -> str:
        reasons = self.verdict.get("reasons") or []
        checks = self.verdict.get("checks") or []
        said = [f"{c}: {r}" for c, r in zip(checks, reasons, strict=True)] \
            if len(checks) == len(reasons) else list(reasons)
        return "\n".join([f"mission {self.name!r} ({self.verdict['flag']}, "
                          f"{self.verdict['split']}) failed:", *(f"  - {s}" for s in said)])

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if isinstance(excinfo.value, MissionFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"evalkit mission {self.name}"


@pytest.fixture
def evalkit_score(request: pytest.FixtureRequest) -> Any:
    """``evalkit_score(suite, runs, **options)`` -> ``evalkit.ScoreReport``.

    The public ``evalkit.score``; relative paths are read from pytest's rootdir, so a
    test scores the same recordings wherever pytest was started.
    """
    root = request.config.rootpath

    def scored(suite: str | Path, runs: str | Path, **options: Any) -> ScoreReport:
        import evalkit

        return evalkit.score(root / suite, runs=root / runs, **options)

    return scored
