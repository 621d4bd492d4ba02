"""Folders for the report and diff tests, built once per module from streams and scored."""

from __future__ import annotations

import pytest

from tests.report._folders import make_suite, measure_folder, run_folder


def direct(key: str, rep: int) -> str:
    return "fail" if key == "t1" else "pass"


def swarm(key: str, rep: int) -> str:
    return "fail" if key == "t2" and rep != 2 else "pass"


def native(key: str, rep: int) -> str | None:
    if key == "h2" and rep == 3:
        return None  # one run never happened
    return "ungrounded" if key.startswith("t") and rep == 1 else "pass"


def recorded(key: str) -> str | None:
    """The shape of the 'run' folder: t1 fails on tools, h2 never ran."""
    return None if key == "h2" else ("fail" if key == "t1" else "pass")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("folders")
    suite = make_suite(root / "suite.yaml")
    return {
        "root": root,
        "suite": suite,
        "run": run_folder(root / "run", suite, recorded),
        "measure": measure_folder(root / "measure", suite,
                                  {"direct": direct, "swarm": swarm, "native": native},
                                  skipped={"claims": "the manifest has no claim table"}),
    }
