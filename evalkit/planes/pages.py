"""A tiny static HTTP server for the research pack's pages, on 127.0.0.1 only.

``python -m evalkit.planes.pages DIR [--port 0]`` serves the files under
``DIR`` and prints its base URL (``http://127.0.0.1:PORT/``) as the first
line on stdout, flushed, so whoever started it can read the port; it runs
until SIGTERM or SIGINT. ``serve_pages(DIR)`` does the same on a background
thread for in-process use (tests, the corpus recorder).

Only GET and HEAD; ``/`` serves ``index.html``; no directory listings; a
missing page is an ordinary 404.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"


class _Handler(http.server.SimpleHTTPRequestHandler):
    server_version = "evalkit-pages/1"
    sys_version = ""
    protocol_version = "HTTP/1.0"

    def list_directory(self, path: Any) -> None:  # no listings: a page is there or it is not
        self.send_error(404, "Not Found")
        return None

    def log_message(self, format: str, *args: Any) -> None:
        if getattr(self.server, "verbose", False):
            super().log_message(format, *args)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    verbose = False


class PagesServer:
    """A running pages server: ``url``, ``port``, ``close()``; a context manager."""

    def __init__(self, directory: Path | str, port: int = 0, *, verbose: bool = False) -> None:
        root = Path(directory).resolve()
        if not root.is_dir():
            raise NotADirectoryError(f"not a directory: {directory}")
        self.directory = root
        handler = functools.partial(_Handler, directory=str(root))
        self._server = _Server((HOST, port), handler)
        self._server.verbose = verbose
        self.port: int = self._server.server_address[1]
        self.url = f"http://{HOST}:{self.port}/"
        self._thread: threading.Thread | None = None

    def start(self) -> PagesServer:
        """Serve on a background thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._server.serve_forever,
                                            name="evalkit-pages", daemon=True)
            self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve on this thread until ``close()`` (from a signal handler or another thread)."""
        self._server.serve_forever()

    def close(self) -> None:
        """Stop serving and release the port; idempotent."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> PagesServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_pages(directory: Path | str, port: int = 0) -> PagesServer:
    """Start serving ``directory`` on 127.0.0.1 in the background; ``close()`` when done."""
    return PagesServer(directory, port).start()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m evalkit.planes.pages",
        description="Serve a directory of static pages on 127.0.0.1; prints the URL first.")
    parser.add_argument("directory", help="the directory to serve")
    parser.add_argument("--port", type=int, default=0, help="port (default 0: any free one)")
    parser.add_argument("--verbose", action="store_true", help="log each request to stderr")
    options = parser.parse_args(argv)
    try:
        server = PagesServer(options.directory, options.port, verbose=options.verbose)
    except OSError as exc:
        print(f"evalkit.planes.pages: {exc}", file=sys.stderr)
        return 2

    def stop(signum: int, frame: Any) -> None:
        # shutdown() waits for serve_forever, which runs on this thread: stop it from another.
        threading.Thread(target=server._server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(server.url, flush=True)
    try:
        server.serve_forever()
    finally:
        server._server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
