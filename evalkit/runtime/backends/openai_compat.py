"""Any OpenAI-compatible chat-completions endpoint, through the ``openai`` SDK.

vLLM, llama.cpp, Ollama's /v1, hosted APIs: one wire. The SDK is imported
when the backend is built, never at CLI start. Its own retries are switched
off (``max_retries=0``) because a wait the SDK swallows is a wait the stream
cannot show: every failure is translated into ``EndpointWait`` and the loop
decides, emitting ``model_state`` while it waits.

Usage is taken as reported (``stream_options.include_usage`` when
streaming) and left ``None`` when the endpoint said nothing — never zero.
"""

from __future__ import annotations

import email.utils
import os
import socket
import threading
import time
from typing import Any

from evalkit.runtime.backends import EndpointWait, Reply
from evalkit.runtime.inflight import undo_on_abandon

#: Keys of a tool call that are the call itself; anything else is a provider extra.
_CALL_KEYS = frozenset({"id", "type", "function", "index"})
#: HTTP statuses worth waiting out; any other 4xx will not change by asking again.
_RETRYABLE_4XX = frozenset({408, 409, 425, 429})


class OpenAIBackend:
    """Chat completions, streaming by default, normalised into ``Reply``."""

    provider = "openai"

    def __init__(self, *, model: str, base_url: str | None = None, api_key: str | None = None,
                 stream: bool = True, timeout_s: float = 600.0) -> None:
        import openai  # lazily: the SDK costs most of a second to import

        self._openai = openai
        self.model = model
        self.base_url = base_url
        self.stream = stream
        # Local endpoints need no key, but the SDK insists on one being set.
        key = api_key or os.environ.get("OPENAI_API_KEY") or "unused"
        self._sockets = _Sockets()
        self._client = openai.OpenAI(api_key=key, base_url=base_url,
                                     max_retries=0, timeout=timeout_s,
                                     http_client=openai.DefaultHttpxClient(
                                         event_hooks={"request": [self._sockets.watch]}))

    def describe(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model, "base_url": self.base_url,
                "stream": self.stream}

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                 *, kind: str) -> Reply:
        params: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            params.update(tools=tools, tool_choice="required", parallel_tool_calls=True)
        try:
            with undo_on_abandon(self._sockets.sever):  # the mission's seconds ran out
                if self.stream:
                    return self._streamed(params)
                return self._whole(params)
        except self._openai.APIStatusError as exc:
            raise _status_wait(exc) from None
        except self._openai.APIConnectionError as exc:
            raise _connection_wait(exc) from None
        except self._openai.APIError as exc:  # e.g. an error event inside a stream
            raise EndpointWait("failed", _short(exc.message)) from None

    def _whole(self, params: dict[str, Any]) -> Reply:
        response = self._client.chat.completions.create(**params).to_dict()
        choices = response.get("choices") or []
        message = dict(choices[0].get("message") or {}) if choices else {}
        extras: dict[str, Any] = {}
        if choices and choices[0].get("finish_reason") is not None:
            extras["finish_reason"] = choices[0]["finish_reason"]
        content = message.pop("content", None)
        raw_calls = message.pop("tool_calls", None) or []
        message.pop("role", None)
        extras.update({k: v for k, v in message.items() if v is not None})
        calls = [_call_of(c) for c in raw_calls]
        return Reply(content=content, tool_calls=calls, usage=_usage(response.get("usage")),
                     extras=extras)

    def _streamed(self, params: dict[str, Any]) -> Reply:
        stream = self._client.chat.completions.create(
            **params, stream=True, stream_options={"include_usage": True})
        text: list[str] = []
        slots: dict[int, dict[str, Any]] = {}
        extras: dict[str, Any] = {}
        usage: dict[str, Any] | None = None
        for chunk in stream:
            data = chunk.to_dict()
            if data.get("usage"):
                usage = _usage(data["usage"])
            for choice in data.get("choices") or []:
                if choice.get("finish_reason") is not None:
                    extras["finish_reason"] = choice["finish_reason"]
                delta = choice.get("delta") or {}
                for key, value in delta.items():
                    if key == "content" and value:
                        text.append(value)
                    elif key == "tool_calls":
                        for piece in value or []:
                            _merge_call(slots, piece)
                    elif key not in ("role", "content") and isinstance(value, str):
                        extras[key] = extras.get(key, "") + value  # e.g. reasoning_content
                    elif key not in ("role", "content") and value is not None:
                        extras[key] = value
        calls = [slots[i] for i in sorted(slots)]
        return Reply(content="".join(text) if text else None, tool_calls=calls, usage=usage,
                     extras=extras)


class _Sockets:
    """The sockets this backend's HTTP client opened, so a call left waiting can be cut off.

    Closing a client does not wake a thread blocked reading a socket;
    shutting the socket down does, and tells the endpoint the request is
    gone. The client reports every connection it opens to ``note`` (the
    ``trace`` request extension, set on each request by ``watch``).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []

    def watch(self, request: Any) -> None:
        request.extensions["trace"] = self.note

    def note(self, event: str, info: dict[str, Any]) -> None:
        if event.endswith(("connect_tcp.complete", "connect_unix_socket.complete")):
            sock = info["return_value"].get_extra_info("socket")
            if sock is not None:
                with self._lock:
                    self._open = [s for s in self._open if s.fileno() != -1] + [sock]

    def sever(self) -> None:
        with self._lock:
            sockets, self._open = self._open, []
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # closed already


def _merge_call(slots: dict[int, dict[str, Any]], piece: dict[str, Any]) -> None:
    """Fold one streamed tool-call fragment into its slot (by ``index``)."""
    index = piece.get("index", len(slots))
    slot = slots.setdefault(index, {"name": "", "arguments": ""})
    if piece.get("id"):
        slot["id"] = piece["id"]
    function = piece.get("function") or {}
    if function.get("name"):
        slot["name"] += function["name"]
    if function.get("arguments"):
        slot["arguments"] += function["arguments"]
    for key, value in piece.items():
        if key not in _CALL_KEYS:
            slot[key] = value


def _call_of(raw: dict[str, Any]) -> dict[str, Any]:
    function = raw.get("function") or {}
    call: dict[str, Any] = {"name": function.get("name") or "",
                            "arguments": function.get("arguments") or ""}
    if raw.get("id"):
        call["id"] = raw["id"]
    call.update({k: v for k, v in raw.items() if k not in _CALL_KEYS})
    return call


def _usage(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, dict):
        return None
    usage = {k: v for k, v in raw.items() if v is not None}
    return usage or None


def _status_wait(exc: Any) -> EndpointWait:
    status = exc.status_code
    detail = f"HTTP {status}: {_short(exc.message)}"
    if status == 503:
        return EndpointWait("loading", detail, retry_after_s=_retry_after(exc.response))
    if status == 429:
        return EndpointWait("queued", detail, retry_after_s=_retry_after(exc.response))
    retryable = status >= 500 or status in _RETRYABLE_4XX
    return EndpointWait("failed", detail, retryable=retryable)


def _connection_wait(exc: BaseException) -> EndpointWait:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError) or "refused" in str(cause).lower():
            return EndpointWait("absent", f"connection refused: {_short(str(cause))}")
        cause = cause.__cause__ or cause.__context__
    return EndpointWait("failed", f"connection error: {_short(str(exc))}")


def _retry_after(response: Any) -> float | None:
    """Seconds from ``Retry-After`` (delta-seconds or an HTTP date), else None."""
    value = response.headers.get("retry-after") if response is not None else None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    return max(0.0, email.utils.mktime_tz(parsed) - time.time())


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
