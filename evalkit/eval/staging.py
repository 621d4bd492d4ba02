"""What ``run`` and ``measure`` prepare around a mission pack's agent: staged fixtures, served pages.

A suite with ``fixtures:`` gets a fresh copy of them in every mission's
folder (``DIR/<key>/work``), and that copy is the agent's working directory.
A folder named ``fixtures`` is staged by ``evalkit.planes.fixtures.stage_fixtures``,
so the repositories its ``fixtures.json`` lists become real git repositories;
``fixture_for: {key: name}`` stages only that one entry for that mission, its
contents landing in the working directory itself (a coding mission's root *is*
the repository). Any other folder is copied as it is.

A suite with ``serve: pages`` gets its fixtures folder served over HTTP on
127.0.0.1 once for the whole run (``python -m evalkit.planes.pages``), on the
fixed ``serve_port`` so scripted agents' URLs are stable, and every agent is
spawned with ``EVALKIT_ALLOWED_HOSTS`` naming that server and nothing else.

Nothing here imports ``evalkit.runtime``: ``evalkit.planes.fixtures`` is a plain
helper, and the pages server is a subprocess.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from evalkit.errors import EvalkitError
from evalkit.eval.suite import Mission, Suite
from evalkit.planes.fixtures import FIXTURES_DIR, NOT_STAGED, stage_fixtures

#: What ``serve:`` may name: the module each server runs as.
SERVERS: dict[str, str] = {"pages": "evalkit.planes.pages"}
HOST = "127.0.0.1"
#: How long a server has to print its URL.
START_TIMEOUT_S = 15.0
#: After SIGTERM at the end of the run, how long a server has to exit.
STOP_GRACE_S = 5.0
#: The environment every agent of a served run gets.
ALLOWED_HOSTS_ENV = "EVALKIT_ALLOWED_HOSTS"
PAGES_URL_ENV = "EVALKIT_PAGES_URL"


# -- fixtures ---------------------------------------------------------------------------------


def fixture_plan(suite: Suite, missions: Sequence[Mission]) -> dict[str, str | None]:
    """Each mission's fixture (None: the whole folder); refuses a plan that cannot be staged.

    Checked before anything runs, so a misspelt ``fixture_for`` is one sentence up
    front rather than a failed mission later.
    """
    chosen: dict[str, str] = suite.extras.get("fixture_for") or {}
    fixtures = suite.resolve("fixtures")
    if chosen and fixtures is None:
        raise EvalkitError(f"suite '{suite.name}' maps missions to fixtures (fixture_for) but "
                           "names no fixtures folder (top-level 'fixtures:')")
    if fixtures is not None and not fixtures.is_dir():
        raise EvalkitError(f"suite '{suite.name}': fixtures folder {fixtures} does not exist")
    keys = {m.key for m in suite.missions}
    stray = sorted(k for k in chosen if k not in keys)
    if stray:
        raise EvalkitError(f"suite '{suite.name}': fixture_for names mission(s) "
                           f"{', '.join(stray)}, which the suite does not have")
    if fixtures is not None:
        present = {p.name for p in fixtures.iterdir() if p.name not in NOT_STAGED}
        missing = sorted({n for n in chosen.values() if n not in present})
        if missing:
            raise EvalkitError(f"suite '{suite.name}': fixture_for names {', '.join(missing)}, "
                               f"which {fixtures} does not hold (it has: "
                               f"{', '.join(sorted(present))})")
    return {m.key: chosen.get(m.key) for m in missions}


def stage(fixtures: Path | str, dest: Path | str, only: str | None = None) -> Path:
    """Stage ``fixtures`` (all, or just ``only``) into ``dest``, which must be absent or empty."""
    source = Path(fixtures)
    if source.name == FIXTURES_DIR:
        return stage_fixtures(source.parent, dest, only=only)
    target = Path(dest)
    if only is None:
        shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
    elif (source / only).is_dir():
        shutil.copytree(source / only, target, symlinks=True, dirs_exist_ok=True)
    else:
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / only, target / only)
    return target


# -- served pages -----------------------------------------------------------------------------


@dataclass
class Served:
    """What a served run hands its agents: the server's URL and the environment to add."""

    url: str | None = None
    env: dict[str, str] = field(default_factory=dict)


def serve_spec(suite: Suite) -> tuple[str, Path, int] | None:
    """``(server, folder, port)`` when the suite asks to be served, else None; refuses a bad ask."""
    kind = suite.extras.get("serve")
    port = suite.extras.get("serve_port")
    if kind is None:
        if port is not None:
            raise EvalkitError(f"suite '{suite.name}' gives serve_port but not what to serve "
                               f"(serve: {' or '.join(SERVERS)})")
        return None
    if kind not in SERVERS:
        raise EvalkitError(f"suite '{suite.name}': serve: {kind!r} is not a server evalkit "
                           f"knows (it knows: {', '.join(SERVERS)})")
    folder = suite.resolve("fixtures")
    if folder is None or not folder.is_dir():
        raise EvalkitError(f"suite '{suite.name}': serve: {kind} serves the fixtures folder, and "
                           "the suite has none (top-level 'fixtures:')")
    port = 0 if port is None else port
    if not 0 <= port <= 65535:
        raise EvalkitError(f"suite '{suite.name}': serve_port must be 0..65535, not {port}")
    return kind, folder.resolve(), port


@contextlib.contextmanager
def serving(suite: Suite) -> Iterator[Served]:
    """Start the suite's server (if it asks for one) for the whole run; stop it at the end."""
    spec = serve_spec(suite)
    if spec is None:
        yield Served()
        return
    kind, folder, port = spec
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(
            [sys.executable, "-m", SERVERS[kind], str(folder), "--port", str(port)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors,
            start_new_session=True)
        try:
            url = _first_line(proc, START_TIMEOUT_S)
            if not url:
                _refuse(suite, kind, port, proc, errors)
            assert url is not None
            bound = url.rstrip("/").rpartition(":")[2]
            yield Served(url=url, env={ALLOWED_HOSTS_ENV: f"{HOST}:{bound}", PAGES_URL_ENV: url})
        finally:
            _stop(proc)


def _first_line(proc: subprocess.Popen[bytes], timeout_s: float) -> str | None:
    """The server's first stdout line (its URL), or None when it exits or stays silent."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while b"\n" not in buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                return None
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                return None
            buffer += chunk
    line = buffer.split(b"\n", 1)[0].decode("utf-8", errors="replace").strip()
    return line if line.startswith("http://") else None


def _refuse(suite: Suite, kind: str, port: int, proc: subprocess.Popen[bytes],
            errors: Any) -> NoReturn:
    """One sentence on why the server did not come up; a busy port said as such."""
    _stop(proc)
    said = ""
    with contextlib.suppress(OSError):
        errors.seek(0)
        said = errors.read().decode("utf-8", errors="replace")
    if "in use" in said.lower() or "errno 98" in said.lower():
        raise EvalkitError(f"suite '{suite.name}' serves its {kind} on {HOST}:{port}, and that "
                           "port is busy; stop whatever holds it (or change serve_port) and "
                           "run again")
    last = said.strip().splitlines()[-1] if said.strip() else "it printed no URL in time"
    raise EvalkitError(f"suite '{suite.name}': the {kind} server did not start on "
                       f"{HOST}:{port}: {last}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


__all__ = ["ALLOWED_HOSTS_ENV", "PAGES_URL_ENV", "SERVERS", "Served", "fixture_plan",
           "serve_spec", "serving", "stage"]
