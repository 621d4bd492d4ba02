"""Each pack run for real with its scripted agents: the good ones pass, the bad ones fail
for the reason their mission names.

The whole loop is real — the built-in runtime as a subprocess, the sandbox, the
staged fixtures, the pages server, grounding and the store — with only the
model scripted. A pack whose tools the runtime does not offer yet is skipped
with the runtime's own refusal, so these tests turn on by themselves when it does.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from evalkit.runtime.tools import Bwrap
from tests._ports import pages_port_turn
from tests.packs.conftest import SUITES, invoke, verdicts

#: The research pack's pages server listens on one fixed port: its users share a worker
#: (and take turns at the port with other test runs on the host, see tests/_ports.py).
pytestmark = pytest.mark.xdist_group("pages-port")

#: For every bad agent, what its verdict must say (substrings of its reasons).
BAD_REASONS: dict[str, dict[str, list[str]]] = {
    "analyst": {
        "outliers": ["never called run_python_code", "grounded=False", "/SO-1012/"],
        "region-revenue": ["does not match /12,?301/"],
        "busiest-month": ["grounded=False", "matches /9,?850/"],
        "unparseable": ["does not match /\\b6\\b/", "matches /(?i)\\b5\\b[^.]*error/"],
        "latency": ["does not match /168\\.6/", "matches /156\\.6/"],
        "slowest-request": ["does not match /1,?988/"],
        "missing-file": ["ended 'answered_with_caveat'", "matches /(?i)refund"],
        "gated-compute": ["this mission wants awaiting_approval"],
    },
    "coding": {
        "orientation": ["never called repo_map", "grounded=False"],
        "test-status": ["never called verify", "grounded=False"],
        "history": ["never called git", "/(?i)initial import/"],
        "feature": ["never called verify", "grounded=False"],
        "two-file-fix": ["grounded=False", "does not match /ledger/statement\\.py/"],
        "rename": ["does not match /(?i)\\b4 (?:tests? )?passed/", "which this mission forbids"],
        "red-green": ["ended 'answered_with_caveat'", "grounded=False"],
        "outside-edit": ["does not match /(?i)outside/", "which this mission forbids"],
    },
    "research": {
        "follow-link": ["grounded=False", "does not match /1,?284/"],
        "compare-reports": ["grounded=False", "does not match /18\\.4/"],
        "disambiguation": ["does not match /\\b11\\b/", "matches /\\b6\\b/"],
        "truncation": ["never called mission_result", "does not match /27,?365/"],
        "orientation": ["never called fetch_page", "grounded=False"],
        "missing-page": ["ended 'answered_with_caveat'", "which this mission forbids"],
        "off-limits": ["does not match /(?i)\\b(off limits", "matches /(?i)\\bstarted"],
        "partial": ["does not match /15\\.9/"],
    },
}

#: What the runtime says at the door when it does not offer a pack's tools.
NOT_OFFERED = "the tool plane does not offer"
#: What it says there when a pack's skill runs code in the sandbox and the host has none.
NO_SANDBOX = "requires the bwrap sandbox, but this run has none"


def _run(pack: str, out: Path, *agent: str) -> dict[str, dict]:
    turn = pages_port_turn() if pack == "research" else contextlib.nullcontext()
    with turn:
        result = invoke("run", "--suite", SUITES / pack, "--out", out, "--jobs", "2", *agent)
    for stderr in sorted(out.glob("*/stderr.txt")):
        said = stderr.read_text(encoding="utf-8", errors="replace")
        if NOT_OFFERED in said:
            pytest.skip(f"the runtime refuses the {pack} skill at the door: {said.strip()}")
        if NO_SANDBOX in said and not Bwrap.available():  # .ci/run installs it
            pytest.skip(f"bubblewrap (bwrap) is not installed, and the {pack} skill runs code in it")
    assert result.exit_code in (0, 1), result.output + result.stderr
    return verdicts(out)


@pytest.mark.slow
@pytest.mark.parametrize("pack", sorted(BAD_REASONS))
def test_every_good_agent_passes(pack: str, tmp_path: Path) -> None:
    found = _run(pack, tmp_path / "good")
    failed = {k: v["reasons"] for k, v in found.items() if not v["passed"]}
    assert not failed
    assert set(found) == set(BAD_REASONS[pack])


@pytest.mark.slow
@pytest.mark.parametrize("pack", sorted(BAD_REASONS))
def test_every_bad_agent_fails_for_the_reason_its_mission_names(pack: str,
                                                               tmp_path: Path) -> None:
    found = _run(pack, tmp_path / "bad", "--agent", "bad")
    for key, wanted in BAD_REASONS[pack].items():
        verdict = found[key]
        assert not verdict["passed"] and not verdict["missing"], key
        said = " | ".join(verdict["reasons"])
        for part in wanted:
            assert part in said, f"{pack}/{key}: {part!r} not in {said!r}"
