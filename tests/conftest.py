"""Every test session gets a state folder of its own, and a fork server for stub planes.

The run store, audit log, approvals and signing key default to the user's
state folder (``evalkit.store.state``); a test run must neither read a
developer's nor leave keys and runs behind, so ``EVALKIT_HOME`` points into
the session's temporary folder — for this process and every one it spawns.

A tool plane gets its stub MCP server forked, behind the relay, from the session's
fork server, which has imported it (``evalkit.forkserver``): still a server process
spoken to over stdio, at a tenth of the cost of spawning one. The server is named to
every process the session spawns too (``client.SOCKET_ENV``), so a spawned ``evalkit
mission`` forks its stub from it and a spawned ``evalkit run`` its missions; and the
commands tests start and wait for are forked from it where it serves them
(``tests/_forked.py``). Tests
marked ``spawns`` see no session server, so the plain spawn (and a command's own
fork server) stays covered; with ``EVALKIT_FORKSERVER=off`` nothing is forked.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from evalkit.forkserver import client
from evalkit.forkserver.client import ForkServer
from evalkit.store.state import HOME_ENV


@pytest.fixture(autouse=True, scope="session")
def _session_environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    """The environment of this process and of every one it spawns, for the session:

    - its own state folder (``EVALKIT_HOME``);
    - bytecode kept, as Python keeps it by default: where the environment forbids it
      (``PYTHONDONTWRITEBYTECODE``, as on this project's CI machine), each of some hundreds
      of spawned ``evalkit`` processes compiled every module it imported from a fresh
      clone's source again, about 0.2 s of CPU apiece;
    - the session's fork server, named (``client.SOCKET_ENV``).
    """
    server = ForkServer()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(HOME_ENV, str(tmp_path_factory.mktemp("evalkit-home")))
        patch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
        if not client.switched_off() and server.start():
            patch.setenv(client.SOCKET_ENV, str(server.address))
        try:
            yield server
        finally:
            server.close()


@pytest.fixture(autouse=True)
def _spawning(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("spawns") is not None:
        monkeypatch.delenv(client.SOCKET_ENV, raising=False)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported lives to the end of the session: the collector need not
    walk it again on every full pass while the tests run."""
    gc.collect()
    gc.freeze()
