"""Model backends: the one seam between the loop and whoever writes the replies.

A backend is anything with ``complete(messages, tools, *, kind) -> Reply``.
It never retries and never sleeps: an endpoint that makes the run wait raises
``EndpointWait`` naming the state (``absent``, ``loading``, ``queued``,
``failed``), and the loop decides whether to wait, surfaces the wait as
``model_state`` records, and gives up inside the mission's bounds. Keeping the
policy out of the backends is what makes every backend wait the same way.

Backends are imported lazily (``make_backend``) so that ``evalkit mission
--help`` never pays for the ``openai`` SDK.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "CONFIGURATION",
    "FAULTS",
    "TRANSPORT",
    "EndpointWait",
    "ModelBackend",
    "Reply",
    "ScriptExhausted",
    "make_backend",
]


@dataclass
class Reply:
    """One model reply, normalised across providers.

    ``tool_calls`` items are ``{"name", "arguments", "id"?, **extras}`` where
    ``arguments`` is what the provider sent (usually JSON text, a mapping from
    a script) and ``extras`` are any other keys the provider put on the call;
    they are echoed back verbatim on the next turn. ``usage`` is whatever the
    provider reported, ``None`` when it reported nothing. ``extras`` holds
    reply-level facts worth recording (``finish_reason``, reasoning text...).
    """

    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    def as_record(self) -> dict[str, Any]:
        """The ``reply`` half of a model.jsonl line."""
        record: dict[str, Any] = {
            "content": self.content,
            "tool_calls": self.tool_calls,
            "usage": self.usage,
        }
        if self.extras:
            record["extras"] = self.extras
        return record


#: Whose a failed model call is. A *transport* fault is the wire's (a refused or dropped
#: connection, a timeout, a stream cut before its finish reason, a body that is not a chat
#: completion, a 5xx, a 429): asking again may well work, and the model is not to blame. A
#: *configuration* fault is the operator's (a 400 on the request evalkit built, 401, 403, 404
#: for the model or the route): asking again cannot change it. A complete reply that breaks
#: the protocol is the model's, and never reaches this exception (it is a ``reply_rejected``).
TRANSPORT, CONFIGURATION = "transport", "configuration"
FAULTS: tuple[str, ...] = (TRANSPORT, CONFIGURATION)


class EndpointWait(Exception):
    """The endpoint made the call wait or failed it; ``state`` is a ``model_state`` word.

    ``fault`` is ``transport`` (retried with backoff) or ``configuration``
    (never retried: the loop gives up at once and the command says so with
    an ``Error:`` line). ``retryable`` follows from it unless a backend says
    otherwise. ``detail`` is one sentence that names the endpoint, never its key.
    """

    def __init__(self, state: str, detail: str, *, retry_after_s: float | None = None,
                 retryable: bool | None = None, fault: str | None = None) -> None:
        super().__init__(detail)
        if fault is None:
            fault = CONFIGURATION if retryable is False else TRANSPORT
        self.state = state
        self.detail = detail
        self.retry_after_s = retry_after_s
        self.fault = fault
        self.retryable = (fault == TRANSPORT) if retryable is None else retryable


class ScriptExhausted(Exception):
    """A scripted model was asked for more replies than its script holds."""

    def __init__(self, served: int) -> None:
        super().__init__(f"script exhausted after {served} replies")
        self.served = served


@runtime_checkable
class ModelBackend(Protocol):
    """What the loop needs from a model: one call, one normalised reply."""

    #: Provider and model names as they ride ``model_state`` records.
    provider: str
    model: str

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                 *, kind: str) -> Reply:
        """Ask once. ``tools`` is the native-protocol function list, else None.

        ``kind`` is ``"mission"`` for a loop turn and ``"plain"`` for a side
        call (a supervisor review); backends may ignore it.
        """
        ...

    def describe(self) -> dict[str, Any]:
        """The request settings worth recording beside the messages (never a key)."""
        ...


def make_backend(provider: str, **options: Any) -> ModelBackend:
    """Build a backend by provider name, importing only the one asked for."""
    if provider == "scripted":
        from evalkit.runtime.backends.scripted import ScriptedBackend

        return ScriptedBackend.from_file(options["script"])
    if provider == "openai":
        from evalkit.runtime.backends.openai_compat import OpenAIBackend

        backend = OpenAIBackend(
            model=options["model"],
            base_url=options.get("base_url"),
            api_key=options.get("api_key"),
            stream=options.get("stream", True),
            **{k: options[k] for k in ("request_timeout_s", "idle_timeout_s")
               if options.get(k) is not None},
        )
        if options.get("cassette"):  # the raw HTTP, recorded or played back by vcrpy
            from evalkit.runtime.backends.cassette import CassetteBackend

            return CassetteBackend(backend, options["cassette"],
                                   record_mode=options.get("record_mode"))
        return backend
    from evalkit.errors import EvalkitError

    raise EvalkitError(f"unknown provider {provider!r}: use openai or scripted")
