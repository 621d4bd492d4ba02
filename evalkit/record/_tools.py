"""``@tool``: a function of the agent's, recorded as a tool whenever a mission is open.

Decorating declares the tool too: every mission opened afterwards offers it in
its catalogue (``mission_started.catalogue`` and tools.jsonl's first line), so a
recording says what the agent could have called, not only what it did — which is
what ``forbids_tools`` and a reader of the transcript need. The function itself
is unchanged: same arguments, same return value, same exceptions, and no
recording at all outside a mission.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any, TypeVar, overload

from evalkit.record._current import current

F = TypeVar("F", bound=Callable[..., Any])

_DECLARED: dict[str, dict[str, Any]] = {}
_LOCK = threading.Lock()


def declared() -> list[dict[str, Any]]:
    """The descriptors of every ``@tool`` so far, in declaration order."""
    with _LOCK:
        return [dict(d) for d in _DECLARED.values()]


@overload
def tool(fn: F, /) -> F: ...


@overload
def tool(*, name: str | None = None, description: str | None = None) -> Callable[[F], F]: ...


def tool(fn: Any = None, /, *, name: str | None = None,
         description: str | None = None) -> Any:
    """Record each call of the decorated function as the tool ``name`` (default: the
    function's name), with its arguments by parameter name and its result or error.

    ``@tool`` and ``@tool(name="calc.multiply")`` both work; ``async def`` too.
    """
    def decorate(function: F) -> F:
        called = name or function.__name__
        signature = inspect.signature(function)
        _declare(called, description or inspect.getdoc(function) or "", signature)

        def arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:  # the call itself is wrong: the function will say so
                return {"args": list(args), **kwargs}
            return dict(bound.arguments)

        if inspect.iscoroutinefunction(function):
            @functools.wraps(function)
            async def recorded_async(*args: Any, **kwargs: Any) -> Any:
                mission = current()
                if mission is None:
                    return await function(*args, **kwargs)
                call = mission.tool_call(called, arguments(args, kwargs))
                try:
                    value = await function(*args, **kwargs)
                except Exception as exc:
                    call.failed(exc)
                    raise
                call.returned(value)
                return value
            return recorded_async  # type: ignore[return-value]

        @functools.wraps(function)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            mission = current()
            if mission is None:
                return function(*args, **kwargs)
            call = mission.tool_call(called, arguments(args, kwargs))
            try:
                value = function(*args, **kwargs)
            except Exception as exc:
                call.failed(exc)
                raise
            call.returned(value)
            return value
        return recorded  # type: ignore[return-value]

    return decorate(fn) if fn is not None else decorate


def _declare(name: str, description: str, signature: inspect.Signature) -> None:
    names = [p.name for p in signature.parameters.values()
             if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    required = [p.name for p in signature.parameters.values()
                if p.name in names and p.default is p.empty]
    parameters = {"type": "object", "properties": {n: {} for n in names},
                  "required": required}
    with _LOCK:
        _DECLARED[name] = {"name": name, "description": description, "parameters": parameters}
