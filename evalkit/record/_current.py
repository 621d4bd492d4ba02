"""Which mission is recording now, and what an open mission does to the process.

The openai wrapper, ``@tool`` and the LangChain handler are set up once, before any
mission exists, and find the open one when they are called: this context's (the
``with`` block's, copied into its tasks), else the process's only open mission — for
work a library moves to a thread of its own, where the context is not copied.

While a mission is open in the main thread of a program that does not handle SIGTERM
itself, SIGTERM winds the mission up, as the contract asks of a mission process:
``Terminated`` is raised where the program is, the ``with`` block records the run
``incomplete`` / ``cancelled``, and the process exits quietly with 0: the exit
contract's "0 the mission ran (whatever its outcome)", as the built-in runtime does.
"""

from __future__ import annotations

import contextvars
import signal
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evalkit.record._mission import Mission

_CURRENT: contextvars.ContextVar[Mission | None] = contextvars.ContextVar(
    "evalkit_record_mission", default=None)
_OPEN: list[Mission] = []
_OPEN_LOCK = threading.Lock()


def current() -> Mission | None:
    """The mission recording now: this context's, else the process's only open one."""
    found = _CURRENT.get()
    if found is not None and not found.closed:
        return found
    with _OPEN_LOCK:
        return _OPEN[0] if len(_OPEN) == 1 else None


class Terminated(SystemExit):
    """SIGTERM inside a recorded mission: the contract's "wind up" signal. A
    ``SystemExit`` so the process ends quietly once the mission is closed — with 0,
    since the mission ran and its ``mission_finished`` says how it ended."""

    def __init__(self) -> None:
        super().__init__(0)


class Opened:
    """What ``enter`` changed, for ``leave`` to put back."""

    def __init__(self, token: contextvars.Token[Mission | None], sigterm: Any) -> None:
        self.token, self.sigterm = token, sigterm


def enter(mission: Mission) -> Opened:
    """``mission`` is the current one from now on (and SIGTERM winds it up)."""
    token = _CURRENT.set(mission)
    with _OPEN_LOCK:
        _OPEN.append(mission)
    return Opened(token, _wind_up_on_sigterm())


def leave(mission: Mission, opened: Opened) -> None:
    """Undo ``enter``: safe from another context or thread."""
    try:
        _CURRENT.reset(opened.token)
    except ValueError:  # closed from another context (an async generator's)
        _CURRENT.set(None)
    with _OPEN_LOCK:
        if mission in _OPEN:
            _OPEN.remove(mission)
    if opened.sigterm is not None:
        try:
            signal.signal(signal.SIGTERM, opened.sigterm)
        except ValueError:  # closed off the main thread: the handler stays
            pass


def _wind_up_on_sigterm() -> Any:
    """Install the wind-up handler; returns the handler to put back, or None when none
    was installed (not the main thread, or the program handles SIGTERM itself)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        return None

    def wind_up(signum: int, frame: Any) -> None:
        raise Terminated()

    signal.signal(signal.SIGTERM, wind_up)
    return signal.SIG_DFL
