"""The environment a spawned ``evalkit`` command gets in a test: this one without the
user's ``EVALKIT_*`` settings, but with the session's own (``tests/conftest.py``)."""

from __future__ import annotations

import os

from evalkit.forkserver import client
from evalkit.store.state import HOME_ENV

#: The session's state folder and fork server: plumbing, never a setting under test.
SESSION = (HOME_ENV, client.SOCKET_ENV)


def without_settings(**extra: str) -> dict[str, str]:
    """This environment minus ``EVALKIT_*`` (the session's own aside), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALKIT_") or k in SESSION}
    env.update(extra)
    return env
