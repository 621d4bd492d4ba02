"""Calls the loop waits for, never past the mission's clock.

``--mission-seconds`` is a promise to the operator: the mission ends then,
whatever it is doing. Checking the clock between steps cannot keep it — a
tool or a model call can hold the loop for minutes, and some calls cannot be
interrupted at all (an ``open()`` the kernel is blocking, an MCP server that
never answers). So a call made under a clock runs on a helper thread while
the loop waits for it, up to the deadline and no longer; the loop then ends
the run through its ordinary finish path, and the call is *abandoned*.

Abandoning undoes what can be undone: the call registers, while it runs,
how to stop what it started (``undo_on_abandon``: kill a process group,
sever a socket), and the loop runs those undos as it leaves. What cannot be
undone is left behind on its daemon thread, which never writes to the run
(only the loop records), and dies with the process.

With no deadline the call runs on the loop's own thread, exactly as before.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")

Undo = Callable[[], None]


class OutOfTime(Exception):
    """The deadline came while the call was still running; it was abandoned."""


class _Flight:
    """One call on its helper thread: its outcome, and the undos it registered."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.undos: list[Undo] = []
        self.abandoned = False
        self.value: object = None
        self.error: BaseException | None = None

    def run(self, call: Callable[[], object]) -> None:
        _local.flight = self
        try:
            self.value = call()
        except BaseException as exc:  # carried back to the loop's thread and raised there
            self.error = exc
        finally:
            self.done.set()

    def abandon(self) -> None:
        with self.lock:
            self.abandoned = True
            undos, self.undos = self.undos, []
        for undo in undos:
            _quietly(undo)


_local = threading.local()


def within(deadline: float | None, call: Callable[[], T], *, what: str) -> T:
    """``call()``'s result, or ``OutOfTime`` once ``deadline`` (``time.monotonic()``) passes.

    ``what`` names the helper thread (a person reading a thread dump sees
    which call was left behind). An exception raised into the wait — a
    SIGTERM's ``Cancelled`` — abandons the call the same way and propagates.
    """
    if deadline is None:
        return call()
    if time.monotonic() >= deadline:
        raise OutOfTime()
    flight = _Flight()
    context = contextvars.copy_context()
    helper = threading.Thread(target=flight.run, args=(lambda: context.run(call),),
                              name=f"evalkit-{what}", daemon=True)
    try:
        # start() is inside: a signal can land after the helper began (its process
        # spawned) but before start() returned, and that call must be abandoned too.
        helper.start()
        finished = flight.done.wait(max(0.0, deadline - time.monotonic()))
    except BaseException:
        flight.abandon()
        raise
    if not finished:
        flight.abandon()
        raise OutOfTime()
    if flight.error is not None:
        raise flight.error
    return flight.value  # type: ignore[return-value]


@contextmanager
def undo_on_abandon(undo: Undo) -> Iterator[None]:
    """While inside, ``undo()`` is how the loop stops this work if it abandons it.

    Outside a call made by ``within`` it does nothing. Inside one already
    abandoned, ``undo`` runs at once: what was started late is stopped too.
    """
    flight: _Flight | None = getattr(_local, "flight", None)
    if flight is None:
        yield
        return
    with flight.lock:
        late = flight.abandoned
        if not late:
            flight.undos.append(undo)
    if late:
        _quietly(undo)
    try:
        yield
    finally:
        with flight.lock:
            if undo in flight.undos:
                flight.undos.remove(undo)


def _quietly(undo: Undo) -> None:
    try:
        undo()
    except Exception:  # an undo that fails leaves the work behind, as if it had none
        pass
