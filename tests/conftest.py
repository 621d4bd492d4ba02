"""Every test session gets a state folder of its own.

The run store, audit log, approvals and signing key default to the user's
state folder (``evalkit.store.state``); a test run must neither read a
developer's nor leave keys and runs behind, so ``EVALKIT_HOME`` points into
the session's temporary folder — for this process and every one it spawns.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

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
