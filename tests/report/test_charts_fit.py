"""Charts keep what they draw inside the figure: the grid's legend, whatever the grid's width.

The legend was placed from the axes' left edge, which moves right with the mission keys'
length: a run report (one column) with keys of a dozen characters lost its fifth label."""

from __future__ import annotations

import pytest

from evalkit.report import charts
from evalkit.report.kpis import MissionRow


def _figure_of(monkeypatch, draw):
    kept = {}

    def keep(fig, title):
        kept["fig"] = fig
        return "<svg></svg>"

    monkeypatch.setattr(charts, "_svg", keep)
    draw()
    return kept["fig"]


@pytest.mark.parametrize("configs", [1, 2, 3, 4, 5, 7, 9])
@pytest.mark.parametrize("key", ["t0", "orientation", "chaining-q3-rev", "a-rather-long-key-of-30-chars"])
def test_the_grid_legend_shows_all_five_labels_inside_the_figure(monkeypatch, configs, key):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    names = [f"row{i}" for i in range(configs)]
    missions = [MissionRow(key=f"{key}{i}", flag="chaining",
                           cells=[("pass", 1, 1)] * configs, reasons=[]) for i in range(4)]
    fig = _figure_of(monkeypatch, lambda: charts.grid(missions, names, "train"))
    renderer = FigureCanvasAgg(fig).get_renderer()
    (legend,) = fig.legends
    box, whole = legend.get_window_extent(renderer), fig.bbox
    assert box.x0 >= whole.x0 and box.x1 <= whole.x1 + 0.5, (box, whole)
    assert box.y0 >= whole.y0 and box.y1 <= whole.y1 + 0.5
    texts = [t.get_window_extent(renderer) for t in legend.get_texts()]
    assert len(texts) == 5 and all(t.x1 <= whole.x1 for t in texts)
    axes = fig.axes[0].get_window_extent(renderer)
    assert box.y0 >= axes.y1 - 1  # above the cells, not over them
