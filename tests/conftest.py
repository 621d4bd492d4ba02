"""Every test session gets a state folder of its own, and a fork server for stub planes.

The run store, audit log, approvals and signing key default to the user's
state folder (``evalkit.store.state``); a test run must neither read a
developer's nor leave keys and runs behind, so ``EVALKIT_HOME`` points into
the session's temporary folder — for this process and every one it spawns.

A unit test's tool plane gets its stub MCP server forked, behind the relay, from a
fork server that has imported it (``evalkit.forkserver``): still a server process
spoken to over stdio, at a tenth of the cost of spawning one. Tests marked ``slow``
spawn theirs, so the plain spawn stays covered (``EVALKIT_FORKSERVER=off``: all do).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from evalkit.forkserver import client
from evalkit.forkserver.client import ForkServer
from evalkit.store.state import HOME_ENV


@pytest.fixture(autouse=True, scope="session")
def _state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    before = os.environ.get(HOME_ENV)
    os.environ[HOME_ENV] = str(tmp_path_factory.mktemp("evalkit-home"))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(HOME_ENV, None)
        else:
            os.environ[HOME_ENV] = before


@pytest.fixture(scope="session")
def _stub_fork_server() -> Iterator[ForkServer]:
    server = ForkServer()  # started by the first unit test that asks
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(autouse=True)
def _forked_stub_planes(request: pytest.FixtureRequest, _stub_fork_server: ForkServer,
                        monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("slow") is None and not client.switched_off() \
            and _stub_fork_server._started():
        monkeypatch.setattr(client, "forked_by", _stub_fork_server.address)


@pytest.fixture(scope="module")
def shared_fork_server(_stub_fork_server: ForkServer) -> Iterator[None]:
    """``run``, ``measure`` and ``conform`` of the built-in runtime, called in this process,
    fork their missions from the session's fork server (the unit tests' stub planes' own)
    instead of starting one per command and paying its imports: ``client.serving`` starts
    one only when none is serving. With ``EVALKIT_FORKSERVER=off`` nothing is forked."""
    with pytest.MonkeyPatch.context() as patch:
        if not client.switched_off():
            patch.setattr(client, "_active", _stub_fork_server)
        yield
