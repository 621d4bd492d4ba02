"""Cancellation: ``run.cancel()`` from any thread, SIGTERM in the main thread.

A cancel must wind the mission up, not kill it mid-write: the loop still
writes ``mission_finished`` (``incomplete``, reason ``cancelled``). So the
signal handler raises ``Cancelled`` into whatever the main thread is blocked
on (a model call, a slow tool) — except inside a *shielded* section (writing a
record), where the raise is deferred to the section's end so no line is torn.
The first SIGTERM winds up; later ones are ignored while it does.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Cancelled(BaseException):
    """Raised into the loop to wind the mission up (BaseException: SDKs must not eat it)."""


class CancelToken:
    """A cancel flag the loop checks at boundaries, and that SIGTERM can raise through."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._shielded = 0
        self._pending = False
        self._closing = False

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        """Ask the run to wind up at its next check (safe from any thread)."""
        self._event.set()

    def check(self) -> None:
        """Raise ``Cancelled`` when a cancel was asked for and the run is not finishing."""
        if self._event.is_set() and not self._closing:
            raise Cancelled()

    def pause(self, seconds: float) -> None:
        """Sleep, waking early (and raising) on a cancel."""
        if self._event.wait(seconds):
            self.check()

    def close(self) -> None:
        """The run is writing its end: from now on nothing raises."""
        self._closing = True

    @contextmanager
    def shield(self) -> Iterator[None]:
        """Defer a signal-driven raise until the block (a record write) is done."""
        self._shielded += 1
        try:
            yield
        finally:
            self._shielded -= 1
        if not self._shielded and self._pending and not self._closing:
            self._pending = False
            raise Cancelled()

    def interrupt(self) -> None:
        """The signal handler's half: set the flag, raise now unless shielded."""
        first = not self._event.is_set()
        self._event.set()
        if not first or self._closing:
            return
        if self._shielded:
            self._pending = True
        else:
            raise Cancelled()


@contextmanager
def sigterm_cancels(token: CancelToken) -> Iterator[None]:
    """While inside, SIGTERM cancels through ``token`` (main thread only; else a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda _signum, _frame: token.interrupt())
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
