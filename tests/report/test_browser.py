"""The report and the diff in a real browser: headless Chromium over the DevTools protocol.

Chromium is Debian's ``chromium`` (``.ci/run`` installs it). The page is opened
from a file URL; the test fails on any console error, uncaught exception or
network request other than the page itself, checks the tables and charts are
there (with JavaScript on and off) and that a heading click sorts a table, and
saves full-page screenshots to ``reports/browser/`` (kept out of git) as the
test's artifacts.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from evalkit.eval.diff import compare
from evalkit.eval.suite import load_suite
from evalkit.report import folders as folder_reader
from evalkit.report.html import diff_html, report_html, write
from tests.report._browser import Browser, find_chromium
from tests.report._folders import write_runs

pytestmark = pytest.mark.slow

ARTIFACTS = Path(__file__).resolve().parents[2] / "reports" / "browser"
CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium is not installed here (apt-get install chromium; .ci/run installs it)")

COUNT = """(() => ({
  tables: document.querySelectorAll("table").length,
  sortable: document.querySelectorAll("table.sortable").length,
  charts: Array.from(document.querySelectorAll("svg.chart"))
          .filter(s => { const r = s.getBoundingClientRect(); return r.width > 150 && r.height > 80; }).length,
  kpiRows: document.querySelectorAll("table.kpis tbody tr").length,
  headings: Array.from(document.querySelectorAll("h2")).map(h => h.textContent.trim()),
}))()"""


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed here (apt-get install chromium; .ci/run installs it)")
    with Browser(CHROMIUM) as b:
        yield b


def _open(browser: Browser, page: Path, javascript: bool = True) -> None:
    browser.open(page.resolve().as_uri(), javascript=javascript)
    assert browser.console_errors() == []
    assert browser.requests() == [page.resolve().as_uri()]


@needs_chromium
def test_the_measure_report_renders_in_chromium_without_errors(browser, folders):
    page = write(report_html(folder_reader.load(folders["measure"])),
                 folders["root"] / "measure.html")
    _open(browser, page)
    seen = browser.evaluate(COUNT)
    assert seen["charts"] == 6  # per half: pass rate, quality/cost, paired (the grid is a table)
    assert seen["kpiRows"] == 6  # three configurations in each of two halves
    assert seen["sortable"] >= 7 and seen["tables"] == seen["sortable"]
    assert seen["headings"][:3] == ["Provenance", "train half", "test half"]
    shot = browser.screenshot(ARTIFACTS / "measure-report.png", full_page=True)
    assert shot.stat().st_size > 20_000


@needs_chromium
def test_a_heading_click_sorts_the_table(browser, folders):
    page = write(report_html(folder_reader.load(folders["measure"])),
                 folders["root"] / "measure.html")
    _open(browser, page)
    first = "document.querySelector('#kpis-train tbody tr td').textContent.trim()"
    assert browser.evaluate(first).startswith("direct")
    tokens = ("Array.from(document.querySelectorAll('#kpis-train thead th'))"
              ".find(th => th.textContent.trim() === 'tokens')")
    browser.evaluate(f"{tokens}.click()")
    browser.evaluate(f"{tokens}.click()")  # descending: the costliest row first
    assert browser.evaluate(first) == "native"
    assert browser.evaluate(f"{tokens}.getAttribute('aria-sort')") == "descending"
    assert browser.console_errors() == []


@needs_chromium
def test_the_report_reads_with_javascript_off(browser, folders):
    page = write(report_html(folder_reader.load(folders["run"])), folders["root"] / "run.html")
    _open(browser, page, javascript=False)
    # Runtime.evaluate still runs with page scripts disabled; the content is static HTML.
    seen = browser.evaluate(COUNT)
    assert seen["charts"] == 4 and seen["kpiRows"] == 2
    assert browser.evaluate("document.querySelector('th').tabIndex") == -1  # no page JS ran
    browser.screenshot(ARTIFACTS / "run-report-no-js.png", full_page=True)


@needs_chromium
def test_the_diff_renders_in_chromium(browser, folders, tmp_path):
    suite = load_suite(folders["suite"])
    shapes = {"t0": "ungrounded", "t2": "ungrounded", "h0": "fail"}
    regrade = write_runs(tmp_path / "regrade", suite, lambda key: shapes.get(key, "pass"))
    diff = compare(folder_reader.load(folders["run"]).side(),
                   folder_reader.load(regrade, suite).side())
    page = write(diff_html(diff), tmp_path / "diff.html")
    _open(browser, page)
    rows = browser.evaluate("document.querySelectorAll('table.flips tbody tr').length")
    assert rows == 5
    assert "4,218,000" in browser.evaluate("document.body.innerText")
    shutil.copy(browser.screenshot(tmp_path / "diff.png", full_page=True),
                ARTIFACTS / "diff.png")


@needs_chromium
def test_transcripts_open_filter_and_search_without_overflow(browser, folders):
    """A person's path through the transcripts: open one from the missions table, keep only
    the failures, search a mission; at a desktop and a phone width nothing runs off sideways."""
    page = write(report_html(folder_reader.load(folders["run"])), folders["root"] / "run-t.html")
    for width in (1400, 500):
        browser.open(page.resolve().as_uri(), width=width)
        assert browser.console_errors() == []
        overflow = "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        assert browser.evaluate(overflow) <= 0, f"horizontal overflow at {width} px"
        total = browser.evaluate("document.querySelectorAll('#train details.transcript').length")
        assert total == 5
        # A failed cell of the missions table opens its transcript.
        browser.evaluate("document.querySelector('#train table.missions a.chip.fail').click()")
        opened = browser.evaluate("location.hash && document.querySelector(location.hash).open")
        assert opened is True
        assert "called mcp.echo" in browser.evaluate(
            "document.querySelector(location.hash).innerText")
        assert browser.evaluate(overflow) <= 0, f"an open transcript overflows at {width} px"
        visible = ("Array.from(document.querySelectorAll('#train details.transcript'))"
                   ".filter(t => t.offsetParent !== null).map(t => t.dataset.key)")
        browser.evaluate("(() => { const s = document.querySelector('#train .tstatus');"
                         " s.value = 'notpass'; s.dispatchEvent(new Event('change')); })()")
        assert browser.evaluate(visible) == ["t1"]
        browser.evaluate("(() => { const s = document.querySelector('#train .tstatus');"
                         " s.value = ''; s.dispatchEvent(new Event('change'));"
                         " const q = document.querySelector('#train .tsearch');"
                         " q.value = 'T3'; q.dispatchEvent(new Event('input')); })()")
        assert browser.evaluate(visible) == ["t3"]
        assert browser.console_errors() == []
        browser.screenshot(ARTIFACTS / f"transcripts-{width}.png", full_page=width == 500)


ACTIVE = "document.activeElement"


def _soon(browser: Browser, expression: str, seconds: float = 3.0) -> bool:
    """True once ``expression`` is: hashchange is dispatched as a task after the click."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if browser.evaluate(expression) is True:
            return True
        time.sleep(0.05)
    return False


def _press_enter(browser: Browser) -> None:
    for kind in ("keyDown", "keyUp"):
        browser.call("Input.dispatchKeyEvent", {"type": kind, "key": "Enter", "code": "Enter",
                                                "windowsVirtualKeyCode": 13, "text": "\r"})


@needs_chromium
def test_a_grid_cell_opens_each_repeat_from_the_keyboard_even_past_the_filter(browser, folders):
    """Tab to a repeat of a flaky grid cell, press Enter: that run's transcript opens and has
    the focus, even when the verdict filter was hiding it; nothing overflows sideways."""
    page = write(report_html(folder_reader.load(folders["measure"])),
                 folders["root"] / "measure-grid.html")
    for width in (1400, 500):
        browser.open(page.resolve().as_uri(), width=width)
        assert browser.console_errors() == []
        links = browser.evaluate(
            "Array.from(document.querySelectorAll('table.grid a')).map(a => a.hash.slice(1))")
        cells = browser.evaluate("document.querySelectorAll('table.grid td.cell').length")
        assert cells == 3 * 8 and len(links) >= cells
        assert browser.evaluate(
            f"{links!r}.every(id => document.getElementById(id)?.matches('details.transcript'))")
        # Keep only passing runs, then open swarm's rep 1 of t2, which failed.
        browser.evaluate("(() => { const s = document.querySelector('#train .tstatus');"
                         " s.value = 'pass'; s.dispatchEvent(new Event('change')); })()")
        rep = "document.querySelector('#grid-train a.rep.fail[aria-label^=\"t2 in swarm\"]')"
        browser.evaluate(f"{rep}.focus()")
        assert browser.evaluate(f"{ACTIVE}.getAttribute('aria-label')").startswith("t2 in swarm")
        _press_enter(browser)
        target = browser.evaluate("location.hash.slice(1)")
        assert target and target == browser.evaluate(f"{rep}.hash.slice(1)")
        opened = f"document.getElementById({target!r})"
        assert _soon(browser, f"{opened}.open"), "hashchange never opened the transcript"
        assert browser.evaluate(f"{opened}.offsetParent !== null") is True
        assert browser.evaluate(f"{opened}.dataset.key + ' ' + {opened}.dataset.rep") == "t2 rep1"
        assert browser.evaluate(f"{ACTIVE}.closest('details') === {opened}") is True
        overflow = "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        assert browser.evaluate(overflow) <= 0, f"horizontal overflow at {width} px"
        assert browser.console_errors() == []
        browser.screenshot(ARTIFACTS / f"grid-{width}.png")
