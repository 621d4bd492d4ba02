"""A chat-completions endpoint on a real socket, for testing the openai backend.

Standard library only: ``http.server`` in a thread on 127.0.0.1, port chosen
by the OS. Replies are queued in advance and served in order. A queued
``reply`` is rendered the way the request asked — one JSON body, or SSE
chunks when the request says ``"stream": true`` — so one queue works for both
modes. ``status`` queues an error response (429, 503, ...) with headers;
``stall`` queues a request that is never answered: it is held open until the
client hangs up, and ``hung_up`` is set then. ``raw`` queues bytes sent as
they are, whatever the request asked (an HTML page with status 200, JSON that
is no chat completion, an event stream cut anywhere): what a misbehaving
proxy or server really puts on the wire. Every request body is kept in
``requests``.
"""

from __future__ import annotations

import json
import select
import socket
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Canned:
    """One queued response."""

    status: int = 200
    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    message_extra: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    error: str = "error"
    #: Never answer: hold the request until the client hangs up.
    stalls: bool = False
    #: Send these bytes as the body, as they are, with ``headers`` (``raw``).
    body: bytes | None = None


class ChatServer:
    """``with ChatServer() as server: ... server.base_url ...``"""

    def __init__(self) -> None:
        self.queue: deque[Canned] = deque()
        self.requests: list[dict[str, Any]] = []
        #: Set when a client hung up on a stalled request.
        self.hung_up = threading.Event()
        self._closing = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,),
                                        daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def reply(self, content: str | None = None, *, tool_calls: list[dict[str, Any]] | None = None,
              usage: dict[str, Any] | None = None, **message_extra: Any) -> None:
        """Queue a successful reply. ``tool_calls`` items are wire-shaped
        (``{id, type, function: {name, arguments}, ...extras}``)."""
        self.queue.append(Canned(content=content, tool_calls=tool_calls or [], usage=usage,
                                 message_extra=message_extra))

    def status(self, code: int, *, headers: dict[str, str] | None = None,
               error: str = "unavailable") -> None:
        """Queue an error status with optional headers (e.g. Retry-After)."""
        self.queue.append(Canned(status=code, headers=headers or {}, error=error))

    def raw(self, body: bytes, *, content_type: str, status: int = 200) -> None:
        """Queue a body sent byte for byte, whatever the request asked."""
        self.queue.append(Canned(status=status, body=body,
                                 headers={"Content-Type": content_type}))

    def stall(self) -> None:
        """Queue a request that is never answered (a model that hangs mid-call)."""
        self.queue.append(Canned(stalls=True))

    def __enter__(self) -> ChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()


def closed_port_url() -> str:
    """A base URL nothing listens on: connecting to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def completion(canned: Canned, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": canned.content,
                               **canned.message_extra}
    if canned.tool_calls:
        message["tool_calls"] = canned.tool_calls
    body: dict[str, Any] = {
        "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": message,
                     "finish_reason": "tool_calls" if canned.tool_calls else "stop"}],
    }
    if canned.usage is not None:
        body["usage"] = canned.usage
    return body


def chunks(canned: Canned, model: str, *, include_usage: bool) -> list[dict[str, Any]]:
    """The reply as streamed chunks: content in small pieces, tool calls in fragments."""
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    text = canned.content or ""
    for at in range(0, len(text), 7):
        out.append(chunk({"content": text[at:at + 7]}))
    for key, value in canned.message_extra.items():
        out.append(chunk({key: value}))
    for index, call in enumerate(canned.tool_calls):
        extras = {k: v for k, v in call.items() if k not in ("id", "type", "function")}
        name, args = call["function"]["name"], call["function"]["arguments"]
        out.append(chunk({"tool_calls": [{"index": index, "id": call.get("id"),
                                          "type": "function",
                                          "function": {"name": name, "arguments": ""},
                                          **extras}]}))
        for at in range(0, len(args), 5):
            out.append(chunk({"tool_calls": [{"index": index,
                                              "function": {"arguments": args[at:at + 5]}}]}))
    out.append(chunk({}, "tool_calls" if canned.tool_calls else "stop"))
    if include_usage and canned.usage is not None:
        out.append({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0,
                    "model": model, "choices": [], "usage": canned.usage})
    return out


def _handler_for(server: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            request = json.loads(self.rfile.read(length) or b"{}")
            server.requests.append(request)
            canned = server.queue.popleft() if server.queue else Canned(
                status=500, error="the test queued no reply for this request")
            if canned.stalls:
                self._hold()
                return
            if canned.body is not None:
                self.send_response(canned.status)
                for key, value in canned.headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(canned.body)))
                self.end_headers()
                self.wfile.write(canned.body)
                return
            if canned.status != 200:
                self._send(canned.status, {"error": {"message": canned.error}}, canned.headers)
                return
            model = request.get("model", "test-model")
            if not request.get("stream"):
                self._send(200, completion(canned, model), canned.headers)
                return
            include = bool((request.get("stream_options") or {}).get("include_usage"))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for piece in chunks(canned, model, include_usage=include):
                self.wfile.write(f"data: {json.dumps(piece)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

        def _hold(self) -> None:
            """Say nothing until the client closes the connection (or the server stops)."""
            while not server._closing.is_set():
                readable, _, _ = select.select([self.connection], [], [], 0.05)
                if readable and not self.connection.recv(1024):
                    server.hung_up.set()
                    break
            self.close_connection = True

        def _send(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

    return Handler
