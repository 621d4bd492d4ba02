"""Every recording replays through ``evalkit replay`` to the same verdict, with no network.

Each replay is its own ``evalkit replay`` process in a network namespace with no
interfaces (``unshare -rn``, where the kernel lets an unprivileged user make one)
and, always, with a ``sitecustomize`` on its path that refuses every non-Unix
socket. The processes are forked, as ``evalkit run`` forks its missions, by a fork
server (``evalkit.forkserver``) started in that namespace with that ``sitecustomize``:
each child is in the namespace and finds ``socket`` patched, without paying an
interpreter's start-up and imports for every recording (one the server cannot fork
is spawned in a namespace of its own, with the same path). Replays land at
``<tmp>/<suite>/<variant>/<key>/runs/`` so that ``evalkit score --runs`` (forked
the same way) scores them exactly like the corpus; the verdicts — bit and reasons —
must be the committed ones, and no replay may drift.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from evalkit.eval.suite import load_suite
from evalkit.forkserver.client import ForkServer
from tests import _forked as forked
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


class Offline(ForkServer):
    """A fork server started inside ``wrap`` (the empty network namespace) with ``env``
    (the ``sitecustomize`` that blocks sockets on its path): what it forks is offline too."""

    def run(self, argv: list[str], cwd: Path, env: dict[str, str],
            timeout: float) -> tuple[int, str, str]:
        """``argv`` forked here (else spawned inside ``wrap``): exit code, stdout, stderr."""
        options: dict[str, Any] = {"input": b"", "cwd": str(cwd), "env": env,
                                   "timeout": timeout}
        try:
            done = forked.through(self, argv, **options) or subprocess.run(
                [*self.wrap, *argv], capture_output=True, **options)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{argv} ran past {timeout} s") from None
        return (done.returncode, done.stdout.decode(errors="replace"),
                done.stderr.decode(errors="replace"))


@pytest.fixture(scope="module")
def offline(
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Offline, Path, dict[str, str]]]:
    """The offline fork server, a folder for the replays, and the environment it runs with."""
    root = tmp_path_factory.mktemp("replays")
    env = _env(blocking_site(root / "blocked-site"))
    control = subprocess.run(
        [sys.executable, "-c", "import socket; socket.create_connection(('127.0.0.1', 9))"],
        env=env, capture_output=True, text=True, timeout=60, check=False)
    assert control.returncode != 0 and "network blocked" in control.stderr
    server = Offline(wrap=_namespace(), env=env)
    try:
        yield server, root, env
    finally:
        server.close()


@pytest.fixture(scope="module")
def replays(offline: tuple[Offline, Path, dict[str, str]]) -> tuple[Path, dict[str, str]]:
    """Every recording replayed; returns the replays' root and each replay's stdout."""
    server, root, env = offline
    jobs = []
    for suite, variant in TARGETS:
        skill = load_suite(SUITES / suite).resolve("skill")
        assert skill is not None
        for folder in mission_folders(RECORDINGS, suite, variant):
            dest = root / suite / variant / folder.name
            argv = [sys.executable, "-m", "evalkit.cli", "replay",
                    str(run_dir(folder)), "--skill", str(skill), "--quiet"]
            jobs.append((f"{suite}/{variant}/{folder.name}", dest, argv))

    def one(job: tuple[str, Path, list[str]]) -> tuple[str, str]:
        name, dest, argv = job
        dest.mkdir(parents=True)
        code, stdout, stderr = server.run(argv, dest, {**env, "EVALKIT_RUNS": str(dest / "runs")},
                                          timeout=120)
        assert code == 0, f"{name}: {stdout}{stderr}"
        return name, stdout

    with ThreadPoolExecutor(max_workers=2) as pool:
        said = dict(pool.map(one, jobs))
    return root, said


def test_every_recording_replays_without_drift(replays: tuple[Path, dict[str, str]]) -> None:
    _, said = replays
    assert len(said) == sum(len(mission_folders(RECORDINGS, s, v)) for s, v in TARGETS)
    drifted = {name: out for name, out in said.items() if "drift: none" not in out}
    assert drifted == {}, "the runtime no longer asks what it asked: run evalkit record-corpus"


@pytest.mark.parametrize(("suite", "variant"), TARGETS, ids=IDS)
def test_the_replays_score_to_the_committed_verdicts(
        offline: tuple[Offline, Path, dict[str, str]], replays: tuple[Path, dict[str, str]],
        suite: str, variant: str) -> None:
    server, _, env = offline
    root, _ = replays
    # A judged recording's judgments go beside its replay: filed under the answer's digest,
    # they grade the replay only if it gave the very same answer (their seal is the corpus
    # key's, trusted as recordings/evalkit.pub is).
    for folder in mission_folders(RECORDINGS, suite, variant):
        judged = folder / "judge"
        if judged.is_dir():
            [stream] = (root / suite / variant / folder.name).glob("runs/*/events.jsonl")
            shutil.copytree(judged, stream.parent / "judge", dirs_exist_ok=True)
    code, stdout, stderr = server.run(
        [sys.executable, "-m", "evalkit.cli", "score", "--suite", str(SUITES / suite),
         "--runs", str(root / suite / variant), "--json", "--allow-failures",
         "--trust", str(RECORDINGS / "evalkit.pub")], root, env, timeout=120)
    assert code == 0, stderr
    replayed = json.loads(stdout)
    assert outcome_of(replayed) == outcome_of(committed(suite, variant))
    for verdict in replayed["verdicts"]:
        assert verdict["source"].startswith(f"{verdict['key']}/runs/run_")
