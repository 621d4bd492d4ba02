"""``wrap_openai``: a user's own ``openai`` client, every chat completion recorded.

The client stays the user's: same object, same replies, same exceptions, same
streaming objects to iterate. Only ``client.chat.completions.create`` is
replaced on that one client, by a function that tells the open mission
(``evalkit.record.current``) a call began, passes the call through untouched,
and tells it the reply — read with the built-in backend's own readers
(``reply_of_completion``, ``StreamFold``), so a recorded reply means the same
whoever made the call. With no mission open, the call is not recorded. When
the mission replays a recording (``evalkit.record._replay``), nothing is dialled:
the recorded reply is handed back as the SDK's own ``ChatCompletion`` (or a
stream of ``ChatCompletionChunk``), as the call asked.

``client.chat.completions.with_raw_response.create`` goes through the same
function (it is rebuilt over the replaced ``create``): that is how
``langchain-openai``'s ``ChatOpenAI`` calls, reading ``.parse()`` and ``.headers``
of what comes back. Recorded, the reply is read when the caller parses it;
replayed, ``.parse()`` gives the served reply and ``.headers`` is empty.

The request is never changed: in particular a stream is not asked for usage
(``stream_options``) the user did not ask for — their code may not expect the
extra chunk — so a stream's usage is recorded only when the user asked for it,
and is otherwise absent, never zero. Headers are not recorded (keys live
there); the client's key is handed to the redactor, so it is scrubbed wherever
else it might appear.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from evalkit.record._calls import ModelCall
from evalkit.record._current import current
from evalkit.record._jsonable import jsonable, without_unset
from evalkit.record._replay import chunks, completion
from evalkit.redact import remember
from evalkit.runtime.backends.openai_compat import StreamFold, public_url, reply_of_completion

#: ``create`` keyword arguments that are transport, not the request: never recorded.
_NOT_RECORDED = frozenset({"messages", "extra_headers", "extra_query", "timeout"})
#: HTTP statuses that are the setup's to fix (a wrong key, model or route), as
#: contract.WIRE_FAULTS words it; any other failure of the wire is transport.
_CONFIGURATION_STATUSES = frozenset({400, 401, 403, 404})
_MARK = "_evalkit_recorded"
#: The header ``with_raw_response`` adds so the SDK hands back its raw response.
_RAW_HEADER = "X-Stainless-Raw-Response"


def wrap_openai(client: Any) -> Any:
    """Record every ``client.chat.completions.create`` call of an ``openai.OpenAI`` or
    ``openai.AsyncOpenAI`` client, streaming or not; returns the same client."""
    completions = client.chat.completions
    create = completions.create
    if getattr(create, _MARK, False):
        return client
    remember([getattr(client, "api_key", None)])
    where = public_url(str(getattr(client, "base_url", "") or ""))
    # The SDK's own decorators hide that the async client's ``create`` is a coroutine
    # function: ask the function they wrap, and the resource's class.
    if inspect.iscoroutinefunction(inspect.unwrap(create)) or \
            type(completions).__name__.startswith("Async"):
        async def recorded_async(*args: Any, **kwargs: Any) -> Any:
            mission = current()
            if mission is None:
                return await create(*args, **kwargs)
            call = _begin(mission, kwargs, where)
            if mission.replay is not None:
                return _served(call, mission, kwargs, asynchronous=True)
            try:
                result = await create(*args, **kwargs)
            except BaseException as exc:
                _failed(call, exc, where)
                raise
            return _replied(call, result, where, asynchronous=True)
        wrapped: Any = recorded_async
    else:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            mission = current()
            if mission is None:
                return create(*args, **kwargs)
            call = _begin(mission, kwargs, where)
            if mission.replay is not None:
                return _served(call, mission, kwargs, asynchronous=False)
            try:
                result = create(*args, **kwargs)
            except BaseException as exc:
                _failed(call, exc, where)
                raise
            return _replied(call, result, where, asynchronous=False)
        wrapped = recorded
    setattr(wrapped, _MARK, True)
    wrapped.__doc__ = create.__doc__
    completions.create = wrapped
    # ``with_raw_response`` is the SDK's own wrapper of ``create``, built once and cached
    # on the resource: rebuilt over the replaced ``create``, so raw calls are recorded too.
    raw = completions.__dict__.get("with_raw_response") or \
        getattr(completions, "with_raw_response", None)
    if raw is not None:
        completions.__dict__["with_raw_response"] = type(raw)(completions)
    return client


def _raw(kwargs: Mapping[str, Any]) -> bool:
    """Whether the call came through ``with_raw_response`` (the SDK's header says so)."""
    headers = kwargs.get("extra_headers")
    return isinstance(headers, Mapping) and headers.get(_RAW_HEADER) == "true"


def _begin(mission: Any, kwargs: Mapping[str, Any], where: str) -> ModelCall:
    given = without_unset(kwargs)
    extra = {k: v for k, v in given.items() if k not in _NOT_RECORDED}
    extra.update(provider="openai", base_url=where)
    tools = [t for t in jsonable(given.get("tools") or []) if isinstance(t, dict)]
    return mission.model_call({"messages": given.get("messages") or [], "extra": extra},
                              tools=tools or None)


def _served(call: ModelCall, mission: Any, kwargs: Mapping[str, Any], *,
            asynchronous: bool) -> Any:
    """A replayed call: the recorded reply, as the SDK's own types; nothing is dialled."""
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    given = without_unset(kwargs)
    try:
        reply = mission.replay.serve(jsonable(given.get("messages") or []),
                                     jsonable(given.get("tools")))
    except Exception as exc:  # ran off the recording, or a recorded failure
        call.failed(str(exc), exc=exc)
        raise
    call.replied(reply.as_record())
    model = str(given.get("model") or "recording")
    if not given.get("stream"):
        result: Any = ChatCompletion.model_validate(completion(reply, model))
    else:
        usage = bool((given.get("stream_options") or {}).get("include_usage"))
        served = [ChatCompletionChunk.model_validate(c)
                  for c in chunks(reply, model, usage=usage)]
        result = _ServedAsync(served) if asynchronous else _Served(served)
    return _RawServed(result) if _raw(kwargs) else result


class _RawServed:
    """A replayed reply as ``with_raw_response`` hands it back: ``parse()`` gives it,
    no header was received, nothing was dialled."""

    http_response = None
    status_code = 200

    def __init__(self, parsed: Any) -> None:
        import httpx

        self._parsed = parsed
        self.headers = httpx.Headers()

    def parse(self, **_: Any) -> Any:
        return self._parsed


class _Served:
    """Recorded chunks, iterated like the SDK's ``Stream``."""

    response = None

    def __init__(self, items: list[Any]) -> None:
        self._items = iter(items)

    def __iter__(self) -> _Served:
        return self

    def __next__(self) -> Any:
        return next(self._items)

    def close(self) -> None:
        self._items = iter(())

    def __enter__(self) -> _Served:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _ServedAsync:
    """Recorded chunks, iterated like the SDK's ``AsyncStream``."""

    response = None

    def __init__(self, items: list[Any]) -> None:
        self._items = iter(items)

    def __aiter__(self) -> _ServedAsync:
        return self

    async def __anext__(self) -> Any:
        try:
            return next(self._items)
        except StopIteration:
            raise StopAsyncIteration from None

    async def close(self) -> None:
        self._items = iter(())

    async def __aenter__(self) -> _ServedAsync:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _replied(call: ModelCall, result: Any, where: str, *, asynchronous: bool) -> Any:
    if type(result).__name__ == "LegacyAPIResponse" and callable(getattr(result, "parse", None)):
        return _RawRecorded(result, call, where, asynchronous=asynchronous)
    if _is_stream(result):
        return _AsyncStream(result, call, where) if asynchronous else _Stream(result, call, where)
    body = _as_dict(result)
    if isinstance(body, dict) and isinstance(body.get("choices"), list):
        call.replied(reply_of_completion(body).as_record())
    else:  # a raw response or something else the SDK was asked for: kept as it came
        call.replied({"content": None, "tool_calls": [], "usage": None,
                      "extras": {"unread": type(result).__name__}})
    return result


class _RawRecorded:
    """The SDK's raw response, the reply recorded when the caller parses it (the body is
    the SDK's to read); everything else is the raw response's own."""

    def __init__(self, inner: Any, call: ModelCall, where: str, *, asynchronous: bool) -> None:
        self._inner, self._call, self._where = inner, call, where
        self._asynchronous = asynchronous
        self._parsed: Any = None
        self._read = False

    def parse(self, **kwargs: Any) -> Any:
        if kwargs:  # parsed into a type of the caller's: passed through, read as it came
            return self._inner.parse(**kwargs)
        if not self._read:
            try:
                parsed = self._inner.parse()
            except Exception as exc:
                _failed(self._call, exc, self._where)
                raise
            self._parsed = _replied(self._call, parsed, self._where,
                                    asynchronous=self._asynchronous)
            self._read = True
        return self._parsed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _failed(call: ModelCall, exc: BaseException, where: str) -> None:
    status = getattr(exc, "status_code", None)
    said = f"{where}/chat/completions: {type(exc).__name__}: {exc}"
    if status in _CONFIGURATION_STATUSES:
        fault: str | None = "configuration"
    elif _is_openai_error(exc):
        fault = "transport"
    else:
        fault = None
    call.failed(said, fault=fault, exc=exc)


def _is_openai_error(exc: BaseException) -> bool:
    return any(k.__name__ in ("APIError", "APIConnectionError", "APITimeoutError")
               and k.__module__.startswith("openai") for k in type(exc).__mro__)


def _is_stream(result: Any) -> bool:
    return type(result).__name__ in ("Stream", "AsyncStream") or (
        hasattr(result, "__iter__") and hasattr(result, "response")
        and not hasattr(result, "choices"))


def _as_dict(obj: Any) -> Any:
    for name in ("to_dict", "model_dump"):
        method = getattr(obj, name, None)
        if callable(method):
            try:
                return method() if name == "to_dict" else method(mode="json")
            except Exception:
                continue
    return obj if isinstance(obj, dict) else None


class _Folding:
    """What both stream wrappers share: each chunk folded as it passes, the reply
    recorded when the stream ends (read out, closed or broken)."""

    def __init__(self, inner: Any, call: ModelCall, where: str) -> None:
        self._inner, self._call, self._where = inner, call, where
        self._fold = StreamFold()

    def _saw(self, chunk: Any) -> Any:
        data = _as_dict(chunk)
        if isinstance(data, dict):
            self._fold.add(data)
        return chunk

    def _ended(self, *, closed: bool = False) -> None:
        if self._fold.finished:
            self._call.replied(self._fold.reply().as_record())
        elif closed:  # the agent stopped reading: its choice, not the wire's
            self._call.failed(f"the stream was closed after {self._fold.chunks} chunk(s), "
                              "before its finish reason")
        else:
            self._call.failed(f"{self._where}/chat/completions: the stream ended before a "
                              f"finish reason after {self._fold.chunks} chunk(s)",
                              fault="transport")

    def _broke(self, exc: BaseException) -> None:
        _failed(self._call, exc, self._where)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Stream(_Folding):
    def __iter__(self) -> _Stream:
        return self

    def __next__(self) -> Any:
        try:
            chunk = next(self._inner)
        except StopIteration:
            self._ended()
            raise
        except Exception as exc:
            self._broke(exc)
            raise
        return self._saw(chunk)

    def close(self) -> None:
        self._inner.close()
        self._ended(closed=True)

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _AsyncStream(_Folding):
    def __aiter__(self) -> _AsyncStream:
        return self

    async def __anext__(self) -> Any:
        try:
            chunk = await self._inner.__anext__()
        except StopAsyncIteration:
            self._ended()
            raise
        except Exception as exc:
            self._broke(exc)
            raise
        return self._saw(chunk)

    async def close(self) -> None:
        await self._inner.close()
        self._ended(closed=True)

    async def __aenter__(self) -> _AsyncStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
