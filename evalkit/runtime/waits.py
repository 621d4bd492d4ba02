"""Waiting out an endpoint: retries with bounded backoff, surfaced as ``model_state``.

Backends only say *that* the endpoint made the call wait (``EndpointWait``);
this module decides how long to keep asking, so every backend waits the same
way. A healthy call emits nothing. Each failed attempt reports its state
(``absent``, ``loading``, ``queued``, ``failed``), and the first success after
a wait reports ``loaded``. Waiting is bounded by the mission's clock when it
has one, else by a number of tries; ``Retry-After`` is honoured as the delay.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from evalkit.runtime.backends import EndpointWait, Reply

#: ``on_state(state, detail, since_s, retry_after_s)``
StateHook = Callable[[str, "str | None", float, "float | None"], None]


@dataclass(frozen=True)
class WaitPolicy:
    """How long a run keeps asking an endpoint that makes it wait."""

    #: Attempts per model call when the mission has no seconds bound.
    tries: int = 5
    #: First delay; doubled per attempt up to ``cap_s`` (unless Retry-After says otherwise).
    backoff_s: float = 1.0
    cap_s: float = 30.0


class ModelUnavailable(Exception):
    """The endpoint failed the call past the policy; the mission ends incomplete.

    The sentence says whose fault it was first (``transport fault:`` or
    ``configuration fault:``), then what the endpoint did, then why evalkit
    stopped asking; ``fault`` carries the word for the command's exit code.
    """

    def __init__(self, wait: EndpointWait, tries: int, *, out_of_time: bool) -> None:
        if not wait.retryable:
            why = "asking again cannot change this answer"
        elif out_of_time:
            why = f"gave up after {tries} tries: the mission's seconds would run out"
        else:
            why = f"gave up after {tries} tries"
        super().__init__(f"{wait.fault} fault: {wait.detail}; {why}")
        self.wait = wait
        self.tries = tries
        self.fault = wait.fault


def call_with_waits(call: Callable[[], Reply], *, policy: WaitPolicy, deadline: float | None,
                    on_state: StateHook, pause: Callable[[float], None]) -> Reply:
    """``call()`` until it answers; raise ``ModelUnavailable`` when the wait is over.

    ``deadline`` is a ``time.monotonic()`` instant (the mission's clock) or
    None; ``pause(seconds)`` sleeps and may raise to cancel the wait.
    """
    since: float | None = None
    attempt = 0
    while True:
        attempt += 1
        try:
            reply = call()
        except EndpointWait as wait:
            now = time.monotonic()
            since = now if since is None else since
            on_state(wait.state, wait.detail, now - since, wait.retry_after_s)
            delay = wait.retry_after_s
            if delay is None:
                delay = min(policy.cap_s, policy.backoff_s * 2 ** (attempt - 1))
            out_of_time = deadline is not None and now + delay >= deadline
            out_of_tries = deadline is None and attempt >= policy.tries
            if not wait.retryable or out_of_time or out_of_tries:
                raise ModelUnavailable(wait, attempt, out_of_time=out_of_time) from None
            pause(delay)
            continue
        if since is not None:
            on_state("loaded", None, time.monotonic() - since, None)
        return reply
