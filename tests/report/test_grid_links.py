"""The missions × configurations grid of a measure report opens the runs behind each cell.

Parsed with html.parser: every cell of every half's grid must carry a link, the
link's target must be a transcript of that mission in that configuration, and
with repeats the cell must reach each repeat's run, not only the first.
"""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from evalkit.report import folders as folder_reader
from evalkit.report.html import report_html
from tests.report._folders import make_suite, measure_folder


class Grid(HTMLParser):
    """The cells of each ``table.grid`` (their links) and every transcript's attributes."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.grids: dict[str, dict] = {}
        self.transcripts: dict[str, dict[str, str | None]] = {}
        self._grid: dict | None = None
        self._row: list | None = None
        self._cell: list | None = None
        self._head: str | None = None
        self._body = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        found = dict(attrs)
        if tag == "details" and "transcript" in (found.get("class") or "").split():
            self.transcripts[found["id"]] = found
        if tag == "table" and "grid" in (found.get("class") or "").split():
            self._grid = self.grids[found["id"]] = {"columns": [], "rows": []}
        elif self._grid is not None:
            if tag == "th":
                self._head = ""
            elif tag == "tbody":
                self._body = True
            elif tag == "tr" and self._body:
                self._row = []
            elif tag == "td":
                self._cell = []
            elif tag == "a" and self._cell is not None:
                self._cell.append(found)

    def handle_data(self, data):
        if self._head is not None:
            self._head += data

    def handle_endtag(self, tag):
        if self._grid is None:
            return
        if tag == "th" and self._head is not None:
            if self._row is None:
                self._grid["columns"].append(self._head.strip())
            else:
                self._row.append(self._head.strip())
            self._head = None
        elif tag == "td" and self._row is not None:
            self._row.append(self._cell)
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self._grid["rows"].append(self._row)
            self._row = None
        elif tag == "table":
            self._grid, self._body = None, False


def _swarm(key: str, rep: int) -> str:
    return "fail" if key == "t2" and rep != 2 else "pass"


def _native(key: str, rep: int) -> str | None:
    return None if key == "h2" and rep == 3 else "pass"


@pytest.mark.slow
def test_every_grid_cell_links_to_each_repeat_of_its_own_mission_and_row(tmp_path):
    suite = make_suite(tmp_path / "suite.yaml")
    folder = measure_folder(tmp_path / "m", suite, {
        "direct": lambda key, rep: "fail" if key == "t1" else "pass",
        "swarm": _swarm, "native": _native}, repeat=3)
    page = Grid(report_html(folder_reader.load(folder)))
    assert set(page.grids) == {"grid-train", "grid-test"}
    for half, keys in (("train", 5), ("test", 3)):
        grid = page.grids[f"grid-{half}"]
        assert grid["columns"] == ["mission", "direct", "swarm", "native"]
        assert len(grid["rows"]) == keys
        for key, *cells in grid["rows"]:
            for config, links in zip(grid["columns"][1:], cells, strict=True):
                assert links, f"{half}: {key} in {config} has no link"
                targets = [a["href"].removeprefix("#") for a in links]
                for target in targets:
                    t = page.transcripts.get(target)
                    assert t is not None, f"{key}/{config}: #{target} is no transcript"
                    assert t["data-key"] == key
                    assert t["data-config"] == config
                    assert all(a.get("aria-label", "").startswith(f"{key} in {config}")
                               for a in links)
                # The status chip opens rep 1; the numbers open every repeat, in order.
                reps = [page.transcripts[t]["data-rep"] for t in targets[1:]]
                assert reps == ["rep1", "rep2", "rep3"], (key, config)
                assert targets[0] == targets[1]
    # A flaky cell's repeat links carry each run's own verdict.
    t2 = next(r for r in page.grids["grid-train"]["rows"] if r[0] == "t2")
    assert [a["class"] for a in t2[2][1:]] == ["rep fail", "rep pass", "rep fail"]
    assert "chip flaky" in t2[2][0]["class"]
    # A run that never happened still opens: its transcript says there is no stream.
    h2 = next(r for r in page.grids["grid-test"]["rows"] if r[0] == "h2")
    assert h2[3][-1]["class"] == "rep missing"


@pytest.mark.slow
def test_a_row_name_with_markup_is_text_in_the_grid(tmp_path):
    name = 'x"><img src=y onerror=alert(1)>'
    suite = make_suite(tmp_path / "suite.yaml")
    folder = measure_folder(tmp_path / "m", suite, {
        "direct": lambda k, rep: "pass", name: lambda k, rep: "fail"}, repeat=1)
    text = report_html(folder_reader.load(folder))
    grid = text[text.index('<table class="sortable grid"'):]
    grid = grid[:grid.index("</table>")]
    assert "<img" not in grid and "&lt;img src=y onerror=alert(1)&gt;" in grid
    page = Grid(text)
    assert page.grids["grid-train"]["columns"][-1] == name
