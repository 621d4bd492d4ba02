"""A model judge over a real socket (``llmock``, an OpenAI-compatible server on 127.0.0.1),
asked once, its key in no file; then ``score`` twice with the network refused gives
the same bytes, graded from the recorded judgments."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evalkit.store import layout
from tests._env import without_settings
from tests._offline import blocking_site
from tests.judge._lab import lab

pytest.importorskip("llmock", reason="llmock is a dev dependency: pip install -e '.[dev]'")

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-judge-planted-0123456789abcdefghijkl"
VERDICT = '{"grade": "pass", "score": 0.9, "reasons": []}'


def evalkit(*args: object, site: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    path = os.pathsep.join(str(p) for p in (site, ROOT) if p is not None)
    return subprocess.run([sys.executable, "-m", "evalkit.cli", *map(str, args)],
                          capture_output=True, timeout=120, check=False,
                          env=without_settings(PYTHONPATH=path, **env))


@pytest.mark.slow
def test_a_model_judge_is_asked_once_and_score_replays_it_with_no_network(
        llmock: Any, tmp_path: Path) -> None:
    suite, runs = lab(tmp_path / "lab", judge={"model": "judge-m", "api_key_env": "LAB_JUDGE"})
    llmock.reply(VERDICT, times=None)
    done = evalkit("judge", runs, "--suite", suite, "--endpoint", llmock.base_url(),
                   LAB_JUDGE=KEY)
    assert done.returncode == 0, done.stderr
    assert b"judged: asked 3, 0 already recorded" in done.stdout
    assert len(llmock.requests) == 3
    assert all(r.model == "judge-m" and not r.stream for r in llmock.requests)
    # Asked again: every key is recorded, nothing is dialled.
    again = evalkit("judge", runs, "--suite", suite, "--endpoint", llmock.base_url(),
                    LAB_JUDGE=KEY)
    assert b"asked 0, 3 already recorded" in again.stdout and len(llmock.requests) == 3
    # The key reaches no file and no output (the judge's request is recorded whole).
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    assert KEY.encode() not in done.stdout + done.stderr
    recorded = (runs / "j2" / layout.JUDGE_DIR / layout.JUDGE_FILE).read_text(encoding="utf-8")
    assert '"judge":"openai/judge-m"' in recorded and llmock.base_url() in recorded
    # score twice, with every socket refused: the same bytes, graded by the recording.
    site = blocking_site(tmp_path / "blocked")
    first = evalkit("score", "--suite", suite, "--runs", runs, "--json", site=site)
    second = evalkit("score", "--suite", suite, "--runs", runs, "--json", site=site)
    assert first.returncode == second.returncode == 1, first.stderr  # j3 fails its pattern
    assert first.stdout == second.stdout
    assert b'"grade": "pass"' in first.stdout and b"not judged" not in first.stdout
    refused = subprocess.run(
        [sys.executable, "-c", "import socket; socket.create_connection(('127.0.0.1', 9))"],
        env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, check=False)
    assert b"network blocked" in refused.stderr
