"""``fetch_page`` against the real pages server on 127.0.0.1, and the server itself."""

from __future__ import annotations

import http.server
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalkit.planes.pages import PagesServer
from evalkit.runtime import prompts
from evalkit.runtime.tools.research import FETCH_PAGE, host_allowed, html_to_text
from tests.tools_packs.conftest import RESEARCH, make_plane

pytestmark = pytest.mark.slow

ENV = ("EVALKIT_ALLOWED_HOSTS", "EVALKIT_MAX_PAGE_BYTES", "EVALKIT_FETCH_TIMEOUT_S")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def fetch(tmp_path: Path, url: str):  # noqa: ANN201 - a ToolResult
    return make_plane(tmp_path).dispatch("fetch_page", {"url": url})


# -- the tool ------------------------------------------------------------------------


def test_fetch_a_page_as_text_with_links(tmp_path: Path, pages: PagesServer) -> None:
    result = fetch(tmp_path, pages.url)
    assert result.ok and result.exit_code == 0
    assert result.structured == {"url": pages.url, "final_url": pages.url, "status": 200,
                                 "content_type": "text/html", "bytes": result.structured["bytes"],
                                 "cut": False}
    text = result.output
    assert text.startswith("Fenmoor Water Board — publications\n")
    assert "# Fenmoor Water Board\n" in text and "## Reports\n" in text
    assert f"- [Annual report 2023]({pages.url}annual-2023.html)\n" in text
    assert "document.documentElement" not in text and "font-family" not in text  # script, style


def test_follow_a_link_to_a_figure(tmp_path: Path, pages: PagesServer) -> None:
    report = fetch(tmp_path, pages.url + "annual-2023.html")
    assert report.ok and "1,284" not in report.output
    link = re.search(r"\[monitoring appendix\]\((\S+)\)", report.output)
    assert link and link.group(1) == pages.url + "appendix-sites-2023.html"
    appendix = fetch(tmp_path, link.group(1))
    assert appendix.ok and "All monitored sites | 1,284\n" in appendix.output


def test_two_reports_side_by_side(tmp_path: Path, pages: PagesServer) -> None:
    old = fetch(tmp_path, pages.url + "annual-2022.html").output
    new = fetch(tmp_path, pages.url + "annual-2023.html").output
    assert "- Leakage, as a share of water put into supply: 18.4%\n" in old
    assert "- Leakage, as a share of water put into supply: 15.9%\n" in new
    assert "- Households served at year end: 212,400\n" in old
    assert "- Households served at year end: 219,050\n" in new


def test_a_missing_page_is_a_failing_result_naming_the_status(tmp_path: Path,
                                                              pages: PagesServer) -> None:
    url = pages.url + "annual-2024.html"
    result = fetch(tmp_path, url)
    assert not result.ok and result.exit_code == 1
    assert result.error == f"HTTP 404 Not Found: {url}"
    assert result.structured == {"url": url, "status": 404}


def test_a_host_off_limits_is_refused_by_name(tmp_path: Path, pages: PagesServer,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALKIT_ALLOWED_HOSTS", "example.org, .fenmoor.test")
    result = fetch(tmp_path, pages.url)
    assert not result.ok and result.error == (
        "host 127.0.0.1 is off limits (allowed hosts: example.org, .fenmoor.test); "
        "set by EVALKIT_ALLOWED_HOSTS")
    monkeypatch.setenv("EVALKIT_ALLOWED_HOSTS", f"example.org,127.0.0.1:{pages.port}")
    assert fetch(tmp_path, pages.url).ok
    monkeypatch.setenv("EVALKIT_ALLOWED_HOSTS", "127.0.0.1:1")
    assert "off limits" in fetch(tmp_path, pages.url).error


def test_host_matching() -> None:
    hosts = ["example.org", ".fenmoor.test", "127.0.0.1:8000", "[::1]:9000"]
    assert host_allowed("example.org", 443, hosts) and host_allowed("EXAMPLE.org.", 80, hosts)
    assert not host_allowed("www.example.org", 443, hosts)
    assert host_allowed("fenmoor.test", 80, hosts) and host_allowed("a.b.fenmoor.test", 80, hosts)
    assert not host_allowed("notfenmoor.test", 80, hosts)
    assert host_allowed("127.0.0.1", 8000, hosts) and not host_allowed("127.0.0.1", 8001, hosts)
    assert host_allowed("::1", 9000, hosts) and not host_allowed("::1", 9001, hosts)
    assert host_allowed("anything.at.all", None, None)


def test_only_http_urls(tmp_path: Path) -> None:
    for url in ("file:///etc/passwd", "ftp://example.org/x", "example.org/page", "http://"):
        result = fetch(tmp_path, url)
        assert not result.ok and result.exit_code == 1, url
    assert fetch(tmp_path, "file:///etc/passwd").error == (
        "only http and https URLs are fetched; 'file:///etc/passwd' is not one")


def test_the_page_size_bound_cuts_the_page(tmp_path: Path, pages: PagesServer,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    url = pages.url + "inspection-log-2023.html"
    whole = fetch(tmp_path, url)
    assert whole.ok and not whole.structured["cut"]
    assert whole.structured["bytes"] == (RESEARCH / "fixtures" / "inspection-log-2023.html").stat(
    ).st_size
    monkeypatch.setenv("EVALKIT_MAX_PAGE_BYTES", "3000")
    cut = fetch(tmp_path, url)
    assert cut.ok and cut.structured["cut"] is True and cut.structured["bytes"] == 3000
    assert cut.output.endswith("[evalkit: page cut at 3000 bytes (EVALKIT_MAX_PAGE_BYTES); "
                               "the rest was not read]\n")
    assert "27,365" in whole.output and "27,365" not in cut.output


def test_a_figure_past_the_truncation_is_read_back_through_mission_result(
        tmp_path: Path, pages: PagesServer) -> None:
    plane = make_plane(tmp_path)
    result = plane.dispatch("fetch_page", {"url": pages.url + "inspection-log-2023.html"})
    handle = plane.results.put(result.output)  # what the loop does with every result
    view, truncated = prompts.result_view(result.output, result.error, result.ok, handle)
    assert truncated and "27,365" not in view and "call mission_result" in view
    at = result.output.index("27,365")
    assert at > prompts.RESULT_VIEW_CHARS
    more = plane.dispatch("mission_result", {"handle": handle, "offset": at - 100, "length": 200})
    assert more.ok and "total licensed abstraction for 2023 came to 27,365 megalitres" in more.output


class _Slow(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/redirect-out":
            self.send_response(302)
            self.send_header("Location", f"http://localhost:{self.server.server_address[1]}/")
            self.end_headers()
            return
        if self.path == "/image":
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.end_headers()
            self.wfile.write(b"\x89PNG\r\n")
            return
        time.sleep(5)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def odd_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_time_bound(tmp_path: Path, odd_server: str,
                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALKIT_FETCH_TIMEOUT_S", "1")
    began = time.monotonic()
    result = fetch(tmp_path, odd_server + "/slow")
    assert time.monotonic() - began < 3
    assert not result.ok and result.exit_code is None
    assert result.error == (f"fetching {odd_server}/slow timed out after 1 s "
                            "(EVALKIT_FETCH_TIMEOUT_S)")


def test_every_redirect_hop_is_checked(tmp_path: Path, odd_server: str,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALKIT_ALLOWED_HOSTS", "127.0.0.1")
    result = fetch(tmp_path, odd_server + "/redirect-out")
    assert not result.ok and result.error.startswith("host localhost is off limits")


def test_not_a_text_page_and_nothing_listening(tmp_path: Path, odd_server: str) -> None:
    image = fetch(tmp_path, odd_server + "/image")
    assert image.error == (f"{odd_server}/image is not a text page (image/png, 6 bytes); "
                           "fetch_page reads text")
    with PagesServer(tmp_path) as server:
        closed = server.url
    refused = fetch(tmp_path, closed)
    assert not refused.ok and refused.error.startswith(f"fetching {closed} failed: ")
    assert "refused" in refused.error.lower()


def test_plain_text_pages_come_back_as_they_are(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "notes.txt").write_text("line one\n  <b>not html</b>\n")
    with PagesServer(site) as server:
        result = fetch(tmp_path, server.url + "notes.txt")
        listing = fetch(tmp_path, server.url)
    assert result.ok and result.output == "line one\n  <b>not html</b>\n"
    assert result.structured["content_type"] == "text/plain"
    assert listing.error.startswith("HTTP 404")  # no directory listings


def test_html_to_text() -> None:
    html = ("<html><head><title>T</title><style>p{}</style></head><body><h2>Head</h2>"
            "<p>One &amp; two,\n   spread <a href='../x.html'>out <em>here</em></a>.</p>"
            "<ol><li>first</li><li>second</li></ol><pre>  kept\n    as is</pre>"
            "<table><tr><th>k</th><th>v</th></tr><tr><td>a</td><td>1</td></tr></table>"
            "<p>a<br>b <img src='i.png' alt='chart'> <a href='javascript:void(0)'>js</a></p>"
            "<script>ignored()</script></body></html>")
    assert html_to_text(html, "http://h/d/page.html") == (
        "T\n\n## Head\n\nOne & two, spread [out here](http://h/x.html).\n\n- first\n- second\n\n"
        "  kept\n    as is\n\nk | v\na | 1\n\na\nb [image: chart] js\n")


def test_the_descriptor_declares_scope_and_network(tmp_path: Path) -> None:
    assert FETCH_PAGE.scopes == ("http.read",) and FETCH_PAGE.network is True
    assert FETCH_PAGE.as_dict()["network"] is True and FETCH_PAGE.code is False
    plane = make_plane(tmp_path)
    assert plane.descriptor("fetch_page") == FETCH_PAGE
    assert all("network" not in d.as_dict() for d in plane.catalogue() if d.name != "fetch_page")


# -- the pages server as a program ----------------------------------------------------


def test_the_pages_server_runs_as_a_module() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "evalkit.planes.pages",
                             str(RESEARCH / "fixtures"), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", url)
        with urllib.request.urlopen(url + "annual-2022.html", timeout=10) as response:
            assert response.status == 200 and b"18.4%" in response.read()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(url + "annual-2024.html", timeout=10)
        assert missing.value.code == 404
        missing.value.close()
        result = make_plane(RESEARCH).dispatch("fetch_page", {"url": url})
        assert result.ok and "Fenmoor Water Board" in result.output
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0 and err == ""


def test_the_pages_server_refuses_a_missing_directory(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "evalkit.planes.pages", str(tmp_path / "nope")],
                          capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 2 and done.stdout == ""
    assert "not a directory" in done.stderr
