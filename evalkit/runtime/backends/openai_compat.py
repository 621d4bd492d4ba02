"""Any OpenAI-compatible chat-completions endpoint, through the ``openai`` SDK.

vLLM, llama.cpp, Ollama's /v1, hosted APIs: one wire. The SDK is imported
when the backend is built, never at CLI start. Its own retries are switched
off (``max_retries=0``) because a wait the SDK swallows is a wait the stream
cannot show: every failure is translated into ``EndpointWait`` and the loop
decides, emitting ``model_state`` while it waits.

The SDK believes whatever the wire hands it: a stream that stops before its
finish reason, an HTML page with status 200, a chunk that is not JSON. An
evaluation that took those as the model's replies would charge the network
to the model, so this backend checks the body itself and says whose fault a
failure is (``TRANSPORT`` or ``CONFIGURATION``, see ``evalkit.runtime.backends``)
in one sentence naming the endpoint URL (never the key) and what came back.
A reply leaves here only when the endpoint said it was complete.

Usage is taken as reported (``stream_options.include_usage`` when
streaming) and left ``None`` when the endpoint said nothing — never zero.
"""

from __future__ import annotations

import email.utils
import json
import os
import socket
import threading
import time
import urllib.parse
from typing import Any

from evalkit.runtime.backends import CONFIGURATION, TRANSPORT, EndpointWait, Reply
from evalkit.runtime.inflight import undo_on_abandon

#: Keys of a tool call that are the call itself; anything else is a provider extra.
_CALL_KEYS = frozenset({"id", "type", "function", "index"})
#: HTTP statuses worth waiting out; any other 4xx will not change by asking again.
_RETRYABLE_4XX = frozenset({408, 409, 425, 429})
#: Seconds one model call may take in all, and seconds a stream may stay silent.
DEFAULT_REQUEST_TIMEOUT_S = 300.0
DEFAULT_IDLE_TIMEOUT_S = 120.0
#: Bytes of an unexpected body quoted in a fault's sentence.
_QUOTED_BYTES = 120


class OpenAIBackend:
    """Chat completions, streaming by default, normalised into ``Reply``."""

    provider = "openai"

    def __init__(self, *, model: str, base_url: str | None = None, api_key: str | None = None,
                 stream: bool = True, request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
                 idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S) -> None:
        import openai  # lazily: the SDK costs most of a second to import

        self._openai = openai
        self.model = model
        self.base_url = base_url
        self.stream = stream
        self.request_timeout_s = request_timeout_s
        self.idle_timeout_s = idle_timeout_s
        # Local endpoints need no key, but the SDK insists on one being set.
        key = api_key or os.environ.get("OPENAI_API_KEY") or "unused"
        self._sockets = _Sockets()
        # A whole reply is silent until it is done, so only a stream's reads are held to
        # the idle timeout; the total is checked as the stream's chunks arrive.
        read_s = min(idle_timeout_s, request_timeout_s) if stream else request_timeout_s
        timeout = openai.Timeout(read_s, connect=min(10.0, request_timeout_s))
        self._client = openai.OpenAI(api_key=key, base_url=base_url,
                                     max_retries=0, timeout=timeout,
                                     http_client=openai.DefaultHttpxClient(
                                         event_hooks={"request": [self._sockets.watch]}))
        #: The endpoint as a fault names it: no user, password or query (keys live there).
        self.url = public_url(str(self._client.base_url))

    def describe(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model, "base_url": self.base_url,
                "stream": self.stream}

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                 *, kind: str) -> Reply:
        params: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            params.update(tools=tools, tool_choice="required", parallel_tool_calls=True)
        where = f"{self.url}/chat/completions"
        try:
            with undo_on_abandon(self._sockets.sever):  # the mission's seconds ran out
                if self.stream:
                    return self._streamed(params, where)
                return self._whole(params, where)
        except self._openai.APIStatusError as exc:
            raise _status_wait(exc, where, self.model) from None
        except self._openai.APITimeoutError:
            raise EndpointWait("failed", f"{where} timed out: {self._timeout_said()}",
                               fault=TRANSPORT) from None
        except self._openai.APIConnectionError as exc:
            raise _connection_wait(exc, where) from None
        except self._openai.APIError as exc:  # e.g. an error event inside a stream
            raise EndpointWait("failed", f"{where} sent an error inside its stream: "
                                         f"{_short(exc.message)}", fault=TRANSPORT) from None

    def _timeout_said(self) -> str:
        if self.stream:
            return (f"no byte for {min(self.idle_timeout_s, self.request_timeout_s):g} s "
                    "(--stream-idle-timeout) or no complete reply within "
                    f"{self.request_timeout_s:g} s (--request-timeout)")
        return f"no reply within {self.request_timeout_s:g} s (--request-timeout)"

    def _whole(self, params: dict[str, Any], where: str) -> Reply:
        raw = self._client.chat.completions.with_raw_response.create(**params)
        return _reply_of_body(raw.http_response, where)

    def _streamed(self, params: dict[str, Any], where: str) -> Reply:
        raw = self._client.chat.completions.with_raw_response.create(
            **params, stream=True, stream_options={"include_usage": True})
        http = raw.http_response
        if "event-stream" not in http.headers.get("content-type", "").lower():
            # Not a stream at all: some servers ignore ``stream`` and send the whole reply;
            # anything else (an HTML page, an error document) is said as it came.
            http.read()
            return _reply_of_body(http, where)
        ends = time.monotonic() + self.request_timeout_s
        fold = StreamFold()
        stream = raw.parse()
        try:
            for chunk in stream:
                if time.monotonic() > ends:
                    raise EndpointWait(
                        "failed", f"{where} did not finish its stream within "
                                  f"{self.request_timeout_s:g} s (--request-timeout)",
                        fault=TRANSPORT)
                data = chunk.to_dict() if hasattr(chunk, "to_dict") else chunk
                if not isinstance(data, dict):
                    raise EndpointWait("failed", f"{where} streamed a chunk that is not a JSON "
                                                 f"object: {_quote(repr(data))}", fault=TRANSPORT)
                fold.add(data)
        except ValueError as exc:  # the SDK parses each SSE ``data:`` line as JSON
            raise EndpointWait("failed", f"{where} streamed a chunk that is not JSON after "
                                         f"{fold.chunks} good chunk(s): {_short(str(exc))}",
                               fault=TRANSPORT) from None
        finally:
            stream.close()
        if not fold.finished:
            # Cut short: whatever arrived is not a reply, and a half-streamed tool call must
            # never be dispatched with arguments the model did not finish.
            said = (f"after {fold.chunks} chunk(s)" if fold.chunks else
                    f"with no chunk at all ({_what_came(http)})")
            raise EndpointWait("failed", f"{where} ended its stream before a finish reason "
                                         f"{said}: a truncated stream", fault=TRANSPORT)
        return fold.reply()


class StreamFold:
    """A streamed chat completion put back together, chunk by chunk, into one ``Reply``.

    The one reading of the streamed wire: this backend folds its chunks here, and so
    does ``evalkit.record`` for a user's own client, so a recorded reply means the same
    whoever made the call. ``finished`` is whether a finish reason arrived: a stream cut
    before it is not a reply.
    """

    def __init__(self) -> None:
        self.chunks = 0
        self._text: list[str] = []
        self._slots: dict[int, dict[str, Any]] = {}
        self._extras: dict[str, Any] = {}
        self._usage: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        return "finish_reason" in self._extras

    def add(self, data: dict[str, Any]) -> None:
        """Fold one chunk (as a JSON object) in."""
        self.chunks += 1
        if data.get("usage"):
            self._usage = _usage(data["usage"])
        for choice in data.get("choices") or []:
            if choice.get("finish_reason") is not None:
                self._extras["finish_reason"] = choice["finish_reason"]
            delta = choice.get("delta") or {}
            for key, value in delta.items():
                if key == "content" and value:
                    self._text.append(value)
                elif key == "tool_calls":
                    for piece in value or []:
                        _merge_call(self._slots, piece)
                elif key not in ("role", "content") and isinstance(value, str):
                    self._extras[key] = self._extras.get(key, "") + value  # e.g. reasoning
                elif key not in ("role", "content") and value is not None:
                    self._extras[key] = value

    def reply(self) -> Reply:
        """What arrived so far, as one reply."""
        calls = [self._slots[i] for i in sorted(self._slots)]
        return Reply(content="".join(self._text) if self._text else None, tool_calls=calls,
                     usage=self._usage, extras=dict(self._extras))


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


def _reply_of_body(http: Any, where: str) -> Reply:
    """A whole chat completion from an HTTP body, or a transport fault saying what came instead."""
    try:
        body = json.loads(http.content)
    except ValueError:
        raise EndpointWait("failed", f"{where} answered HTTP {http.status_code} with a body "
                                     f"that is not JSON ({_what_came(http)})",
                           fault=TRANSPORT) from None
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise EndpointWait("failed", f"{where} answered HTTP {http.status_code} with JSON that "
                                     f"is not a chat completion (no choices: "
                                     f"{_what_came(http)})", fault=TRANSPORT)
    return reply_of_completion(body)


def reply_of_completion(body: dict[str, Any]) -> Reply:
    """A whole chat completion (a JSON object with at least one choice) as one ``Reply``.

    The one reading of the whole-body wire, shared with ``evalkit.record`` like
    ``StreamFold``: the first choice is the reply; any message key besides role,
    content and tool calls is kept in ``extras``.
    """
    choices = body.get("choices") or [{}]
    first = choices[0] if isinstance(choices[0], dict) else {}
    message = dict(first.get("message") or {})
    extras: dict[str, Any] = {}
    if first.get("finish_reason") is not None:
        extras["finish_reason"] = first["finish_reason"]
    content = message.pop("content", None)
    raw_calls = message.pop("tool_calls", None) or []
    message.pop("role", None)
    extras.update({k: v for k, v in message.items() if v is not None})
    calls = [_call_of(c) for c in raw_calls if isinstance(c, dict)]
    return Reply(content=content, tool_calls=calls, usage=_usage(body.get("usage")),
                 extras=extras)


def _what_came(http: Any) -> str:
    """Content type and the first bytes of a body, scrubbed, for a fault's sentence."""
    from evalkit.redact import redact

    kind = http.headers.get("content-type") or "no content type"
    try:
        head = http.content[:_QUOTED_BYTES].decode("utf-8", "replace")
    except Exception:  # a stream whose body cannot be read any more
        head = ""
    return f"{kind}, first bytes {_quote(redact(head))}" if head else f"{kind}, empty body"


def _quote(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > _QUOTED_BYTES:
        text = text[:_QUOTED_BYTES - 1] + "…"
    return json.dumps(text, ensure_ascii=False)


def public_url(url: str) -> str:
    """``url`` without user, password, query or fragment, and without a trailing slash."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "the endpoint"
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", "")).rstrip("/")


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


def _status_wait(exc: Any, where: str, model: str) -> EndpointWait:
    status = exc.status_code
    said = _short(exc.message).rstrip(".")
    if status == 503:
        return EndpointWait("loading", f"{where} answered HTTP 503: {said}",
                            retry_after_s=_retry_after(exc.response), fault=TRANSPORT)
    if status == 429:
        return EndpointWait("queued", f"{where} answered HTTP 429: {said}",
                            retry_after_s=_retry_after(exc.response), fault=TRANSPORT)
    if status >= 500 or status in _RETRYABLE_4XX:
        return EndpointWait("failed", f"{where} answered HTTP {status}: {said}", fault=TRANSPORT)
    return EndpointWait("failed", f"{where} refused model {model!r} with HTTP {status}: {said}",
                        fault=CONFIGURATION)


def _connection_wait(exc: BaseException, where: str) -> EndpointWait:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError) or "refused" in str(cause).lower():
            return EndpointWait("absent", f"{where} refused the connection: "
                                          f"{_short(str(cause))}", fault=TRANSPORT)
        cause = cause.__cause__ or cause.__context__
    # The SDK's own words ("Connection error.") say nothing; the innermost cause says what
    # broke (a peer that closed mid-body, a reset).
    inner: BaseException = exc
    while (inner.__cause__ or inner.__context__) is not None:
        inner = inner.__cause__ or inner.__context__  # type: ignore[assignment]
    said = str(inner) or type(inner).__name__
    return EndpointWait("failed", f"{where}: the connection broke: {_short(said)}",
                        fault=TRANSPORT)


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
