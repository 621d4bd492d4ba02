"""HTTP cassettes for the OpenAI-compatible backend (``--cassette PATH``), with vcrpy.

The raw exchanges between the ``openai`` SDK and the endpoint are recorded
to, and played back from, a vcrpy cassette — streamed responses included
(the event stream is kept as the response body and played back as one).
Record modes are vcrpy's own words: ``once`` (the default: record when the
cassette does not exist yet, else play back only), ``new_episodes``,
``none`` (play back only: what CI uses) and ``all``.

Requests match on method, path, query and JSON body, each recorded
exchange played once, in order. A request the cassette cannot answer under
a mode that may not record is a ``CassetteMiss``: the model call fails at
once with a sentence naming the cassette and the request (never a wait,
never a retry, never the network).

Secrets never reach the file: credential headers are dropped, key-like
query parameters removed, and request and response bodies go through the
one redactor. This is a test and interchange tool; semantic replay
(``evalkit replay``) is the primary mechanism.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.redact import redact
from evalkit.runtime.backends import ModelBackend, Reply

#: vcrpy's record modes.
RECORD_MODES = ("once", "new_episodes", "none", "all")
DEFAULT_RECORD_MODE = "once"
#: Request headers that carry credentials (compared lower-case); dropped before recording.
SECRET_HEADERS = ("authorization", "proxy-authorization", "api-key", "x-api-key",
                  "openai-organization", "openai-project", "cookie")
#: Response headers dropped before recording.
SECRET_RESPONSE_HEADERS = ("set-cookie",)
#: Query parameters that carry keys on some providers.
SECRET_QUERY = ("api_key", "api-key", "key", "token", "access_token")
#: How requests are matched to recorded exchanges.
MATCH_ON = ("method", "path", "query", "body")


class CassetteMiss(Exception):
    """A request the cassette holds no answer for, under a mode that may not record it."""


class CassetteBackend:
    """Wraps an ``OpenAIBackend``; the cassette is open from construction to ``close``."""

    def __init__(self, inner: ModelBackend, path: str | Path, *,
                 record_mode: str | None = None) -> None:
        mode = record_mode or DEFAULT_RECORD_MODE
        if mode not in RECORD_MODES:
            raise EvalkitError(f"--record-mode takes one of {', '.join(RECORD_MODES)} "
                               f"(vcrpy's record modes), not {mode!r}")
        target = Path(path)
        if mode == "none" and not target.is_file():
            raise EvalkitError(f"--record-mode none plays back only, and cassette {target} "
                               "does not exist")
        if not target.parent.is_dir():
            raise EvalkitError(f"cannot write cassette {target}: {target.parent} is not a folder")
        import vcr  # lazily: only a cassette run pays for it

        self.inner, self.path, self.record_mode = inner, target, mode
        self.provider, self.model = inner.provider, inner.model
        recorder = vcr.VCR(
            record_mode=mode, match_on=MATCH_ON, decode_compressed_response=True,
            filter_headers=list(SECRET_HEADERS), filter_query_parameters=list(SECRET_QUERY),
            before_record_request=_scrub_request, before_record_response=_scrub_response)
        self._context = recorder.use_cassette(str(target))
        self._cassette = self._context.__enter__()
        self._open = True

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "cassette": str(self.path),
                "record_mode": self.record_mode}

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                 *, kind: str) -> Reply:
        try:
            return self.inner.complete(messages, tools, kind=kind)
        except Exception as failed:  # vcrpy's refusal, raw or wrapped by the SDK
            missed = _miss_in(failed)
            if missed is None:
                raise
            raise CassetteMiss(
                f"cassette {self.path} (record mode {self.record_mode}) has no recorded "
                f"answer for {missed}; record it with --record-mode new_episodes or once "
                "on a fresh cassette") from None

    def close(self) -> None:
        """Stop intercepting and write the cassette (when the mode recorded anything)."""
        if self._open:
            self._open = False
            self._context.__exit__(None, None, None)


def _miss_in(exc: BaseException) -> str | None:
    """The request vcrpy refused, when that is what lies under this failure."""
    from vcr.errors import CannotOverwriteExistingCassetteException

    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, CannotOverwriteExistingCassetteException):
            request = getattr(cause, "failed_request", None)
            said = f"{request.method} {request.path}" if request is not None else "this request"
            reason = getattr(cause, "reason", None)
            return f"{said} ({str(reason).replace('_', ' ')})" if reason else said
        cause = cause.__cause__ or cause.__context__
    return None


def _scrub_request(request: Any) -> Any:
    body = request.body
    if isinstance(body, bytes):
        text = body.decode("utf-8", "replace")
        clean = redact(text)
        if clean != text:
            request.body = clean.encode("utf-8")
    elif isinstance(body, str):
        request.body = redact(body)
    return request


def _scrub_response(response: dict[str, Any]) -> dict[str, Any]:
    headers = response.get("headers") or {}
    for name in list(headers):
        if name.lower() in SECRET_RESPONSE_HEADERS or name.lower() in SECRET_HEADERS:
            del headers[name]
    body = response.get("body") or {}
    data = body.get("string")
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return response
        clean = redact(text)
        if clean != text:
            body["string"] = clean.encode("utf-8")
    elif isinstance(data, str):
        body["string"] = redact(data)
    return response
