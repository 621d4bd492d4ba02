"""A live re-run of every scripted agent gives the committed corpus back, apart from ids and times.

``evalkit record-corpus --out <tmp> --jobs 2`` runs every shipped suite with every
agent variant for real (``evalkit run`` per suite and variant: the built-in
runtime, planes, fixtures, pages server, sandbox, grounding, store). Its verdicts —
bit and reasons — must be the committed ones, its folders must hold the same
files, and every recorded file must say the same thing once ids, times and the
documented machine fields are taken out. So the corpus cannot drift from the
harness: change the runtime, a suite, a skill or an agent, and these fail until
the corpus is regenerated.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.eval.corpus import readme
from evalkit.runtime.tools import Bwrap
from tests._ports import pages_port_turn
from tests.corpus.conftest import (
    IDS,
    RECORDINGS,
    REPO,
    TARGETS,
    committed,
    comparable,
    first_difference,
    outcome_of,
    read_json,
    relative_files,
)

#: The pages server listens on one fixed port: every test that starts it runs in one worker
#: (and takes its turn at the port, see tests/_ports.py).
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("corpus_present"),
              pytest.mark.xdist_group("pages-port"),
              pytest.mark.skipif(not Bwrap.available(), reason="bubblewrap (bwrap) is not "
                                 "installed, and the analyst and coding agents run code in it")]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("live") / "corpus"
    with pages_port_turn():
        done = subprocess.run([sys.executable, "-m", "evalkit.cli", "record-corpus", "--out",
                               str(out), "--jobs", "2"], cwd=REPO, capture_output=True,
                              text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(TARGETS)} suite/agent folders" in done.stdout
    return out


@pytest.mark.parametrize(("suite", "variant"), TARGETS, ids=IDS)
def test_a_live_rerun_gives_the_committed_verdicts(fresh: Path, suite: str,
                                                   variant: str) -> None:
    assert outcome_of(read_json(fresh / suite / variant / "report.json")) == \
        outcome_of(committed(suite, variant))


@pytest.mark.parametrize(("suite", "variant"), TARGETS, ids=IDS)
def test_a_live_rerun_records_the_same_runs_apart_from_ids_and_times(fresh: Path, suite: str,
                                                                     variant: str) -> None:
    ours, theirs = relative_files(RECORDINGS, suite, variant), relative_files(fresh, suite, variant)
    assert sorted(theirs) == sorted(ours)
    differ = {name: first_difference(comparable(ours[name]), comparable(theirs[name]))
              for name in ours}
    differ = {name: where for name, where in differ.items() if where}
    assert differ == {}, ("the harness no longer records what the corpus holds (committed != "
                          "live); regenerate it with evalkit record-corpus and commit it")


def test_a_live_rerun_writes_the_same_readme(fresh: Path) -> None:
    assert (fresh / "README.md").read_text(encoding="utf-8") == readme(RECORDINGS)
