"""Headless Chromium driven over the DevTools protocol on a pipe (no websocket, no downloads).

``--remote-debugging-pipe`` makes Chromium read NUL-separated JSON commands on
fd 3 and write replies and events on fd 4. That is all a test needs: open a
page from a file URL, collect console errors, exceptions and network requests,
evaluate a few DOM queries and take a screenshot.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    def __init__(self, executable: str, *, width: int = 1280, height: int = 900) -> None:
        self.profile = tempfile.mkdtemp(prefix="evalkit-chromium-")
        to_child, self._out = os.pipe()
        self._in, from_child = os.pipe()
        # Chromium wants the pipe on fds 3 and 4. bash puts it there (no preexec_fn, which
        # is unsafe with threads; dash cannot name fds past 9); the ends are first moved to
        # fds >= 10 so the redirections can never overwrite each other.
        a = fcntl.fcntl(to_child, fcntl.F_DUPFD, 10)
        b = fcntl.fcntl(from_child, fcntl.F_DUPFD, 10)
        args = ["--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--disable-extensions", "--mute-audio",
                f"--window-size={width},{height}", f"--user-data-dir={self.profile}",
                "about:blank"]
        self.proc = subprocess.Popen(
            [shutil.which("bash") or "/bin/bash", "-c",
             f'exec "$0" "$@" 3<&{a} 4>&{b} {a}<&- {b}>&-', executable, *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(a, b))
        for fd in (to_child, from_child, a, b):
            os.close(fd)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []
        self.session: str | None = None
        self.target: str | None = None

    # -- the protocol ---------------------------------------------------------------------

    def _recv(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._in], [], [], max(0.0, left))
            if not ready:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise EOFError("Chromium closed the DevTools pipe")
            self._buf += chunk
        message, self._buf = self._buf.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, params: dict[str, Any] | None = None, *,
             session: bool = True, timeout: float = 30.0) -> dict[str, Any]:
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._recv(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        for event in self.events:
            if event.get("method") == method:
                return event
        while True:
            event = self._recv(deadline)
            self.events.append(event)
            if event.get("method") == method:
                return event

    # -- what a test uses ---------------------------------------------------------------

    def open(self, url: str, *, width: int = 1280, height: int = 900,
             javascript: bool = True) -> None:
        """Open ``url`` in a new tab (the previous one stays) and wait for its load event."""
        if self.target is not None:
            self.call("Target.closeTarget", {"targetId": self.target}, session=False)
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)
        self.target = target["targetId"]
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": target["targetId"], "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Page.enable", "Runtime.enable", "Log.enable", "Network.enable"):
            self.call(domain)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        if not javascript:
            self.call("Emulation.setScriptExecutionDisabled", {"value": True})
        self.events.clear()
        self.call("Page.navigate", {"url": url})
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def console_errors(self) -> list[str]:
        found = []
        for e in self.events:
            method, params = e.get("method"), e.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(" ".join(str(a.get("value", a.get("description")))
                                      for a in params.get("args", ())))
            elif method == "Runtime.exceptionThrown":
                found.append(params.get("exceptionDetails", {}).get("text", "exception"))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                found.append(params["entry"].get("text", ""))
        return found

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events
                if e.get("method") == "Network.requestWillBeSent"]

    def screenshot(self, path: Path, *, full_page: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"],
                              "height": min(size["height"], 16000), "scale": 1}
            params["captureBeyondViewport"] = True
        data = self.call("Page.captureScreenshot", params)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.call("Browser.close", session=False, timeout=5)
        except (OSError, EOFError, TimeoutError, RuntimeError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._in, self._out):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
