"""Every recording replays through ``evalkit replay`` to the same verdict, with no network.

Each replay is its own ``evalkit replay`` process in a network namespace with no
interfaces (``unshare -rn``, where the kernel lets an unprivileged user make one)
and, always, with a ``sitecustomize`` on its path that refuses every non-Unix
socket. Replays land at ``<tmp>/<suite>/<variant>/<key>/runs/`` so that
``evalkit score --runs`` scores them exactly like the corpus; the verdicts —
bit and reasons — must be the committed ones, and no replay may drift.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from evalkit.eval.suite import load_suite
from tests._offline import blocking_site
from tests.corpus.conftest import (
    IDS,
    RECORDINGS,
    REPO,
    SUITES,
    TARGETS,
    committed,
    mission_folders,
    outcome_of,
    run_dir,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("corpus_present")]


def _namespace() -> list[str]:
    """``unshare -rn`` when this host allows it, else nothing (the sockets stay blocked)."""
    if shutil.which("unshare") is None:
        return []
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True, check=False)
    return ["unshare", "-rn"] if probe.returncode == 0 else []


def _env(site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALKIT_") or k == "EVALKIT_HOME"}
    for name in ("OPENAI_API_KEY", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO), os.environ.get("PYTHONPATH", "")])
    return env


@pytest.fixture(scope="module")
def replays(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """Every recording replayed; returns the replays' root and each replay's stdout."""
    root = tmp_path_factory.mktemp("replays")
    env = _env(blocking_site(root / "blocked-site"))
    control = subprocess.run(
        [sys.executable, "-c", "import socket; socket.create_connection(('127.0.0.1', 9))"],
        env=env, capture_output=True, text=True, timeout=60, check=False)
    assert control.returncode != 0 and "network blocked" in control.stderr
    wrap = _namespace()
    jobs = []
    for suite, variant in TARGETS:
        skill = load_suite(SUITES / suite).resolve("skill")
        assert skill is not None
        for folder in mission_folders(RECORDINGS, suite, variant):
            dest = root / suite / variant / folder.name
            argv = [*wrap, sys.executable, "-m", "evalkit.cli", "replay",
                    str(run_dir(folder)), "--skill", str(skill), "--quiet"]
            jobs.append((f"{suite}/{variant}/{folder.name}", dest, argv))

    def one(job: tuple[str, Path, list[str]]) -> tuple[str, str]:
        name, dest, argv = job
        dest.mkdir(parents=True)
        done = subprocess.run(argv, cwd=dest, env={**env, "EVALKIT_RUNS": str(dest / "runs")},
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, f"{name}: {done.stdout}{done.stderr}"
        return name, done.stdout

    with ThreadPoolExecutor(max_workers=2) as pool:
        said = dict(pool.map(one, jobs))
    return root, said


def test_every_recording_replays_without_drift(replays: tuple[Path, dict[str, str]]) -> None:
    _, said = replays
    assert len(said) == sum(len(mission_folders(RECORDINGS, s, v)) for s, v in TARGETS)
    drifted = {name: out for name, out in said.items() if "drift: none" not in out}
    assert drifted == {}, "the runtime no longer asks what it asked: run evalkit record-corpus"


@pytest.mark.parametrize(("suite", "variant"), TARGETS, ids=IDS)
def test_the_replays_score_to_the_committed_verdicts(replays: tuple[Path, dict[str, str]],
                                                     suite: str, variant: str) -> None:
    root, _ = replays
    # A judged recording's judgments go beside its replay: filed under the answer's digest,
    # they grade the replay only if it gave the very same answer (their seal is the corpus
    # key's, trusted as recordings/evalkit.pub is).
    for folder in mission_folders(RECORDINGS, suite, variant):
        judged = folder / "judge"
        if judged.is_dir():
            [stream] = (root / suite / variant / folder.name).glob("runs/*/events.jsonl")
            shutil.copytree(judged, stream.parent / "judge", dirs_exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "evalkit.cli", "score", "--suite", str(SUITES / suite),
         "--runs", str(root / suite / variant), "--json", "--allow-failures",
         "--trust", str(RECORDINGS / "evalkit.pub")],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    replayed = json.loads(done.stdout)
    assert outcome_of(replayed) == outcome_of(committed(suite, variant))
    for verdict in replayed["verdicts"]:
        assert verdict["source"].startswith(f"{verdict['key']}/runs/run_")
