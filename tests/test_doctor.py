"""``evalkit doctor``: one line per thing this machine has or lacks, exit 1 when a need is unmet.

Run as a subprocess with a PATH and an environment the test chooses, so
"bubblewrap is missing" and "the endpoint is down" are real, not mocked.
"""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _doctor(tmp_path: Path, *args: str, path: str | None = None, **env: str
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evalkit.cli", "doctor", *args], cwd=ROOT, capture_output=True,
        text=True, timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": path or "/usr/bin:/bin", "HOME": str(tmp_path),
             "EVALKIT_HOME": str(tmp_path / "state"), **env})


def _lines(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    return {line[8:].split(":")[0]: line for line in result.stdout.splitlines()}


def test_without_bubblewrap_the_sandboxed_packs_are_missing_and_the_exit_is_1(tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()  # a PATH without bwrap (python is run by its full path)
    result = _doctor(tmp_path, path=str(bare))
    lines = _lines(result)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert lines["bubblewrap"].startswith("MISSING") and "apt-get install bubblewrap" in \
        lines["bubblewrap"]
    assert lines["pack analyst"].startswith("MISSING") and "bubblewrap" in lines["pack analyst"]
    assert lines["pack coding"].startswith("MISSING")
    assert lines["pack stub"].startswith("ok")
    assert "missing: bubblewrap, pack analyst, pack coding" in result.stderr
    assert all(len(line) < 400 for line in result.stdout.splitlines())


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed here")
def test_a_machine_with_what_the_stub_pack_needs_is_ok(tmp_path):
    result = _doctor(tmp_path, "--suite", "suites/stub")
    lines = _lines(result)
    assert lines["state folder"].startswith("ok") and str(tmp_path / "state") in \
        lines["state folder"]
    assert lines["pack stub"].startswith("ok")
    assert lines["endpoint"].startswith("ok") and "none configured" in lines["endpoint"]
    assert not (tmp_path / "state").exists()  # the doctor looks; it makes nothing


class _Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        if self.headers.get("Authorization") != "Bearer sk-doctor-test-key-0123456789":
            self.send_response(401)
            self.end_headers()
            return
        body = json.dumps({"data": [{"id": "small-model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


@pytest.mark.slow
def test_the_endpoint_is_asked_for_its_models_and_the_key_never_shown(tmp_path, endpoint):
    key = "sk-doctor-test-key-0123456789"
    good = _doctor(tmp_path, "--suite", "suites/stub", EVALKIT_API_BASE=endpoint,
                   EVALKIT_MODEL="small-model", EVALKIT_API_KEY=key)
    assert _lines(good)["endpoint"].startswith("ok") and "'small-model' listed" in good.stdout
    other = _doctor(tmp_path, "--suite", "suites/stub", EVALKIT_API_BASE=endpoint,
                    EVALKIT_MODEL="big-model", EVALKIT_API_KEY=key)
    assert other.returncode == 1 and "does not list EVALKIT_MODEL 'big-model'" in other.stdout
    wrong = _doctor(tmp_path, "--suite", "suites/stub", EVALKIT_API_BASE=endpoint,
                    EVALKIT_API_KEY="sk-wrong-key-000000000000")
    assert wrong.returncode == 1 and "HTTP 401" in wrong.stdout and "EVALKIT_API_KEY" in wrong.stdout
    down = _doctor(tmp_path, "--suite", "suites/stub", EVALKIT_API_BASE="http://127.0.0.1:9/v1")
    assert down.returncode == 1 and "cannot be reached" in down.stdout
    for result in (good, other, wrong, down):
        assert key not in result.stdout + result.stderr and "wrong-key" not in result.stdout


def test_a_suite_that_is_not_a_folder_is_one_sentence(tmp_path):
    result = _doctor(tmp_path, "--suite", str(tmp_path / "nowhere"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "is not a folder" in result.stderr
