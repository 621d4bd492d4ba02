"""The research built-in: ``fetch_page`` reads one web page as text.

It runs in this process (no sandbox sees it), so its own bounds are the
policy, read from the environment at call time:

- ``EVALKIT_ALLOWED_HOSTS`` — comma-separated hosts the tool may reach
  (``example.org``, ``127.0.0.1``, ``host:8080`` for one port); a leading
  dot (``.example.org``) covers the domain and every subdomain. Unset or
  empty: no restriction. Every redirect hop is checked too.
- ``EVALKIT_MAX_PAGE_BYTES`` (default 4 MiB) — bytes of body read; a bigger
  page is cut there and the result says so.
- ``EVALKIT_FETCH_TIMEOUT_S`` (default 20) — wall time for the whole fetch.

HTML becomes readable text through the standard library's ``html.parser``:
headings, paragraphs, list items and table rows on lines of their own,
scripts and styles dropped, and links kept as ``[text](absolute href)`` so
the agent can follow them. A 4xx/5xx answer is a failing result naming the
status; a host off limits is a refusal naming the host.
"""

from __future__ import annotations

import http
import os
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from html.parser import HTMLParser
from typing import Any

from evalkit.runtime.tools.descriptor import ToolDescriptor, ToolResult

#: The research built-ins, in catalogue order.
RESEARCH_NAMES: tuple[str, ...] = ("fetch_page",)

ALLOWED_HOSTS_ENV = "EVALKIT_ALLOWED_HOSTS"
MAX_PAGE_BYTES_ENV = "EVALKIT_MAX_PAGE_BYTES"
TIMEOUT_ENV = "EVALKIT_FETCH_TIMEOUT_S"
DEFAULT_MAX_PAGE_BYTES = 4 * 1024 * 1024
DEFAULT_TIMEOUT_S = 20.0
MAX_REDIRECTS = 5
USER_AGENT = "evalkit-fetch_page/1"

FETCH_PAGE = ToolDescriptor(
    name="fetch_page",
    description=(
        "Fetch one web page (http or https) and return its text: HTML is turned into readable "
        "text with links kept as [text](url). Fails on an HTTP error status (naming it) and "
        "refuses hosts that are off limits. A long page may be cut; read the rest with "
        "mission_result."
    ),
    parameters={
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "the absolute http(s) URL of the page"},
        },
        "required": ["url"],
        "additionalProperties": False,
    },
    scopes=("http.read",),
    network=True,
)

DESCRIPTORS: dict[str, ToolDescriptor] = {FETCH_PAGE.name: FETCH_PAGE}


# -- policy ------------------------------------------------------------------------


def allowed_hosts(environ: dict[str, str] | None = None) -> list[str] | None:
    """The allow-list from the environment, lower-cased; None when unrestricted."""
    raw = (os.environ if environ is None else environ).get(ALLOWED_HOSTS_ENV, "")
    hosts = [h.strip().lower().rstrip(".") for h in raw.split(",") if h.strip()]
    return hosts or None


def host_allowed(host: str, port: int | None, hosts: list[str] | None) -> bool:
    """Whether ``host`` (and ``port``) is on the list; a leading dot covers subdomains."""
    if hosts is None:
        return True
    host = host.lower().rstrip(".")
    for entry in hosts:
        if entry.startswith("."):
            domain = entry[1:]
            if host == domain or host.endswith(entry):
                return True
            continue
        entry_host, _, entry_port = entry.rpartition(":") if _has_port(entry) else (entry, "", "")
        entry_host = entry_host.strip("[]")
        if host == entry_host and (not entry_port or str(port) == entry_port):
            return True
    return False


def _has_port(entry: str) -> bool:
    if entry.startswith("["):  # [::1]:8080
        return "]:" in entry
    return entry.count(":") == 1


def _number(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        return default
    return value if value > 0 else default


# -- fetching ------------------------------------------------------------------------


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects come back as responses, so every hop is checked against the allow-list."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class _Refused(Exception):
    """A URL the policy will not fetch; the message is for the model."""


def _check_url(url: str, hosts: list[str] | None) -> urllib.parse.SplitResult:
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise _Refused(f"not a valid URL: {url!r} ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise _Refused(f"only http and https URLs are fetched; {url!r} is not one")
    if not parts.hostname:
        raise _Refused(f"the URL {url!r} names no host")
    if not host_allowed(parts.hostname, port, hosts):
        raise _Refused(f"host {parts.hostname} is off limits (allowed hosts: "
                       f"{', '.join(hosts or [])}); set by {ALLOWED_HOSTS_ENV}")
    return parts


def _opener(host: str) -> urllib.request.OpenerDirector:
    handlers: list[Any] = [_NoRedirect()]
    if host in ("127.0.0.1", "localhost", "::1") or host.startswith("127."):
        handlers.append(urllib.request.ProxyHandler({}))  # loopback never goes via a proxy
    return urllib.request.build_opener(*handlers)


class _Fetch:
    """One fetch, run on a worker thread so the whole of it is bounded in wall time."""

    def __init__(self, url: str, hosts: list[str] | None, max_bytes: int,
                 timeout_s: float) -> None:
        self.url = url
        self.hosts = hosts
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.cancelled = threading.Event()
        self.result: ToolResult | None = None

    def run(self) -> None:
        try:
            self.result = self._fetch()
        except _Refused as refused:
            self.result = ToolResult.failure(str(refused))
        except Exception as exc:  # the network, told as one sentence
            if _is_timeout(exc):
                self.result = _timed_out(self.url, self.timeout_s)
            else:
                self.result = ToolResult.failure(f"fetching {self.url} failed: {_reason(exc)}")

    def _fetch(self) -> ToolResult:
        url = self.url
        for _ in range(MAX_REDIRECTS + 1):
            parts = _check_url(url, self.hosts)
            request = urllib.request.Request(url, headers={
                "User-Agent": USER_AGENT, "Accept": "text/html, text/plain;q=0.9, */*;q=0.5"})
            try:
                response = _opener(parts.hostname or "").open(request, timeout=self.timeout_s)
            except urllib.error.HTTPError as error:
                with error:
                    if error.code in (301, 302, 303, 307, 308) and error.headers.get("Location"):
                        url = urllib.parse.urljoin(url, error.headers["Location"])
                        continue
                    return _status_failure(url, error.code, error.reason)
            with response:
                return self._read(url, response)
        return ToolResult.failure(f"fetching {self.url} failed: more than {MAX_REDIRECTS} "
                                  "redirects")

    def _read(self, url: str, response: Any) -> ToolResult:
        status = getattr(response, "status", 200)
        if status >= 400:
            return _status_failure(url, status, getattr(response, "reason", ""))
        chunks: list[bytes] = []
        size = 0
        cut = False
        while size <= self.max_bytes:
            if self.cancelled.is_set():
                return ToolResult.failure("cancelled")
            chunk = response.read1(65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        body = b"".join(chunks)
        if len(body) > self.max_bytes:
            body, cut = body[:self.max_bytes], True
        content_type = response.headers.get("Content-Type", "") or ""
        media = content_type.split(";", 1)[0].strip().lower()
        charset = response.headers.get_content_charset() or _meta_charset(body) or "utf-8"
        structured = {"url": self.url, "final_url": url, "status": status,
                      "content_type": media or None, "bytes": len(body), "cut": cut}
        if media and not _is_text(media):
            return ToolResult.failure(
                f"{url} is not a text page ({media}, {len(body)} bytes); fetch_page reads text")
        try:
            text = body.decode(charset, errors="replace")
        except LookupError:
            text = body.decode("utf-8", errors="replace")
        if media in ("text/html", "application/xhtml+xml") or (not media and _looks_html(text)):
            text = html_to_text(text, base_url=url)
        if cut:
            text += (f"\n[evalkit: page cut at {self.max_bytes} bytes "
                     f"({MAX_PAGE_BYTES_ENV}); the rest was not read]\n")
        return ToolResult.success(text, structured=structured)


def _status_failure(url: str, status: int, reason: Any) -> ToolResult:
    try:
        reason_text = http.HTTPStatus(status).phrase  # the standard phrase, whatever the server
    except ValueError:
        reason_text = str(reason or "").strip()
    return ToolResult.of(1, stderr=f"HTTP {status}{' ' + reason_text if reason_text else ''}: "
                                   f"{url}", structured={"url": url, "status": status})


def _timed_out(url: str, timeout_s: float) -> ToolResult:
    return ToolResult.failure(f"fetching {url} timed out after {timeout_s:g} s ({TIMEOUT_ENV})",
                              None)


def _is_timeout(exc: BaseException) -> bool:
    if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, BaseException):
        exc = exc.reason
    return isinstance(exc, TimeoutError)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__


def _is_text(media: str) -> bool:
    return (media.startswith("text/") or media in (
        "application/json", "application/xhtml+xml", "application/xml", "application/javascript",
        "application/ld+json", "application/rss+xml", "application/atom+xml")
        or media.endswith("+json") or media.endswith("+xml"))


def _looks_html(text: str) -> bool:
    head = text[:1024].lstrip().lower()
    return head.startswith("<!doctype html") or head.startswith("<html")


def _meta_charset(body: bytes) -> str | None:
    match = re.search(rb"<meta[^>]+charset=[\"']?([A-Za-z0-9_-]+)", body[:4096], re.IGNORECASE)
    return match.group(1).decode("ascii") if match else None


def fetch_page(arguments: dict[str, Any], environ: dict[str, str] | None = None) -> ToolResult:
    """Run one validated ``fetch_page`` call under the environment's bounds."""
    env = os.environ if environ is None else environ
    url = arguments["url"].strip()
    hosts = allowed_hosts(dict(env))
    max_bytes = int(_number(env, MAX_PAGE_BYTES_ENV, DEFAULT_MAX_PAGE_BYTES))
    timeout_s = _number(env, TIMEOUT_ENV, DEFAULT_TIMEOUT_S)
    try:
        _check_url(url, hosts)  # refuse before a thread is spent on it
    except _Refused as refused:
        return ToolResult.failure(str(refused))
    fetch = _Fetch(url, hosts, max_bytes, timeout_s)
    worker = threading.Thread(target=fetch.run, name="fetch_page", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive() or fetch.result is None:
        fetch.cancelled.set()
        return _timed_out(url, timeout_s)
    return fetch.result


# -- HTML to text ---------------------------------------------------------------------

_SKIP = frozenset({"script", "style", "noscript", "template", "svg", "head", "iframe", "object"})
_BLOCK = frozenset({
    "p", "div", "section", "article", "main", "header", "footer", "nav", "aside", "ul", "ol",
    "dl", "table", "thead", "tbody", "tfoot", "blockquote", "figure", "figcaption", "form",
    "fieldset", "address", "details", "summary", "hr", "body", "html", "caption",
})
_HEADINGS = {f"h{n}": n for n in range(1, 7)}


class _TextMaker(HTMLParser):
    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base_url = base_url
        self.lines: list[str] = []
        self.current: list[str] = []
        self.skip_depth = 0
        self.pre_depth = 0
        self.in_title = False
        self.seen_title = False
        self.title_parts: list[str] = []
        self.links: list[tuple[str, list[str]]] = []  # open <a>: href, text parts
        self.row: list[str] | None = None
        self.cell: list[str] | None = None

    # -- output helpers
    def _emit(self, text: str) -> None:
        if self.links:
            self.links[-1][1].append(text)
        elif self.cell is not None:
            self.cell.append(text)
        else:
            self.current.append(text)

    def _break(self, prefix: str = "") -> None:
        line = _squeeze("".join(self.current)) if not self.pre_depth else "".join(self.current)
        if line.strip():
            self.lines.append(line)
        self.current = [prefix] if prefix else []

    def _blank(self) -> None:
        self._break()
        if self.lines and self.lines[-1] != "":
            self.lines.append("")

    # -- parser callbacks
    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = not self.seen_title
            self.seen_title = True
            return
        if tag in _SKIP:
            self.skip_depth += 1
            return
        if self.skip_depth:
            return
        attr = dict(attrs)
        if tag in _HEADINGS:
            self._blank()
            self.current = ["#" * _HEADINGS[tag] + " "]
        elif tag == "li":
            self._break("- ")
        elif tag in ("dt", "dd"):
            self._break("" if tag == "dt" else "  ")
        elif tag == "br":
            if self.cell is not None:
                self.cell.append(" ")
            else:
                self._break()
        elif tag == "pre":
            self._blank()
            self.pre_depth += 1
        elif tag == "tr":
            self._break()
            self.row = []
        elif tag in ("td", "th"):
            self.cell = []
        elif tag == "a":
            self.links.append((attr.get("href") or "", []))
        elif tag == "img":
            alt = (attr.get("alt") or "").strip()
            if alt:
                self._emit(f"[image: {alt}]")
        elif tag in _BLOCK:
            self._blank()

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
            return
        if tag in _SKIP:
            self.skip_depth = max(0, self.skip_depth - 1)
            return
        if self.skip_depth:
            return
        if tag in _HEADINGS:
            self._break()
            self.lines.append("")
        elif tag == "pre":
            self._break()  # the last line of the block, kept as written
            self.pre_depth = max(0, self.pre_depth - 1)
            self._blank()
        elif tag == "a" and self.links:
            href, parts = self.links.pop()
            label = _squeeze("".join(parts))
            target = _absolute(self.base_url, href)
            self._emit(f"[{label or target}]({target})" if target else label)
        elif tag in ("td", "th") and self.cell is not None:
            if self.row is not None:
                self.row.append(_squeeze("".join(self.cell)))
            else:
                self.current.append(_squeeze("".join(self.cell)) + " ")
            self.cell = None
        elif tag == "tr" and self.row is not None:
            self.lines.append(" | ".join(self.row))
            self.row = None
        elif tag in ("li", "dt", "dd"):
            self._break()
        elif tag in _BLOCK:
            self._blank()

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title_parts.append(data)
            return
        if self.skip_depth:
            return
        if self.pre_depth:
            parts = data.split("\n")
            for i, part in enumerate(parts):
                if i:
                    self.lines.append("".join(self.current))
                    self.current = []
                self.current.append(part)
            return
        self._emit(data)

    def text(self) -> str:
        while self.links:  # an <a> never closed
            href, parts = self.links.pop()
            self._emit(_squeeze("".join(parts)))
        self._break()
        body = "\n".join(self.lines).strip("\n")
        body = re.sub(r"\n{3,}", "\n\n", body)
        title = _squeeze("".join(self.title_parts))
        if title and not body.startswith(f"# {title}"):
            return f"{title}\n\n{body}\n"
        return body + "\n"


def _squeeze(text: str) -> str:
    lead = text[:2] if text.startswith(("- ", "  ")) else ""
    core = " ".join(text[len(lead):].split())
    return lead + core if core else ""


def _absolute(base: str, href: str) -> str:
    href = href.strip()
    if not href or href.lower().startswith(("javascript:", "data:")):
        return ""
    return urllib.parse.urljoin(base, href)


def html_to_text(html: str, base_url: str = "") -> str:
    """Readable text of an HTML document; links as ``[text](absolute href)``."""
    maker = _TextMaker(base_url)
    maker.feed(html)
    maker.close()
    return maker.text()
