"""The report's charts, drawn with matplotlib as inline SVG text.

matplotlib is imported here only, and only when a chart is drawn, so no
other command pays for it. No pyplot and no global backend: each chart is a
``Figure`` saved through the SVG backend, inside an ``rc_context`` that makes
the bytes deterministic (a fixed hash salt per chart, so element ids are stable
and distinct across the charts of one page; no date in the metadata) and keeps
user text literal (mission keys are never parsed as mathtext).
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from typing import Any

from evalkit.report.kpis import (
    FAIL,
    FLAKY,
    INFRA,
    MISSING,
    PASS,
    KpiRow,
    PairedRow,
)

COLOURS = {PASS: "#2e7d32", FAIL: "#c62828", FLAKY: "#f9a825", INFRA: "#7b1fa2",
           MISSING: "#bdbdbd"}
BASE_COLOUR, ROW_COLOUR, INK = "#757575", "#1565c0", "#212121"
VERDICT_COLOURS = {"better": PASS, "worse": FAIL}
WIDTH = 5.6  # inches: two charts side by side in a report column

_RC = {
    "svg.fonttype": "path",  # glyphs as shapes: the same picture in every browser
    "text.parse_math": False,
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
}
_PROLOGUE = re.compile(r"\A.*?(?=<svg\b)", re.S)


#: Inches per character of a label at 9 pt (DejaVu Sans averages ~0.6 em).
CHAR_IN = 0.075


def _figure(height: float, width: float, margins: tuple[float, float, float, float]):
    """A figure whose axes sit inside fixed margins (left, right, top, bottom, in inches).

    Margins are worked out from the labels' lengths: a layout engine would measure every
    text twice over and double the time a chart takes, for the same picture.
    """
    from matplotlib.figure import Figure

    left, right, top, bottom = margins
    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=left / width, right=1 - right / width, top=1 - top / height,
                        bottom=bottom / height)
    return fig


def _label_in(labels: Sequence[str], scale: float = 1.0) -> float:
    return CHAR_IN * scale * max((len(label) for label in labels), default=0)


def _svg(fig: Any, title: str) -> str:
    """The figure as an inline ``<svg>`` element: no XML prologue, labelled for screen readers.

    Called inside ``_draw``'s ``rc_context``, which fixes the hash salt and keeps math off.
    """
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Title": title})
    text = _PROLOGUE.sub("", buf.getvalue(), count=1)
    return text.replace("<svg ", f'<svg role="img" aria-label="{_attr(title)}" class="chart" ', 1)


def _attr(text: str) -> str:
    return (text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
            .replace(">", "&gt;"))


def _short(text: str, size: int = 28) -> str:
    return text if len(text) <= size else text[: size - 1] + "…"


def _draw(salt: str, title: str, height: float, paint, *, width: float = WIDTH,
          margins: tuple[float, float, float, float]) -> str:
    import matplotlib

    with matplotlib.rc_context({**_RC, "svg.hashsalt": salt}):
        fig = _figure(height, width, margins)
        paint(fig)
        return _svg(fig, title)


def pass_rates(rows: Sequence[KpiRow], half: str) -> str:
    """Pass rate per configuration, a horizontal bar each, 95% interval as whiskers."""
    title = f"Pass rate per configuration ({half})"

    def paint(fig: Any) -> None:
        ax = fig.add_subplot()
        names = [_short(r.name) for r in rows]
        ys = list(range(len(rows)))[::-1]
        rates = [r.rate or 0.0 for r in rows]
        colours = [BASE_COLOUR if r.baseline else ROW_COLOUR for r in rows]
        ax.barh(ys, rates, color=colours, height=0.6)
        for y, r in zip(ys, rows, strict=True):
            if r.whiskers is not None and r.rate is not None:
                lo, hi = r.whiskers
                ax.errorbar(r.rate, y, xerr=_whiskers(r.rate, lo, hi), fmt="none",
                            ecolor=INK, capsize=4, lw=1.2)
            label = "—" if r.rate is None else f"{r.rate:.0%}  ({r.passed}/{r.runs})"
            ax.text(1.02, y, label, va="center", fontsize=8, transform=ax.get_yaxis_transform())
        ax.set_yticks(ys, names)
        ax.set_xlim(0, 1)
        ax.xaxis.set_major_formatter(_percent())
        boot = any(r.bootstrap for r in rows)
        ax.set_xlabel("runs passed (bar), 95% interval (whiskers: "
                      + ("bootstrap over missions)" if boot else "Wilson)"))
        ax.set_title(title, loc="left")

    left = 0.25 + _label_in([_short(r.name) for r in rows])
    return _draw(f"pass-{half}", title, 1.1 + 0.38 * len(rows), paint,
                 margins=(left, 1.0, 0.32, 0.6))


def quality_cost(rows: Sequence[KpiRow], half: str) -> str:
    """Pass rate against mean cost (cost when every row has it, else tokens), each row with
    both its intervals: the pass rate's (vertical) and the cost's bootstrap over missions
    (horizontal), so a row that looks dearer only by noise shows it."""
    use_cost = all(r.mean_cost is not None for r in rows)
    unit = "mean cost per mission" if use_cost else "mean tokens per run"
    title = f"Quality against cost ({half})"

    xs = [x for r in rows if (x := r.mean_cost if use_cost else r.mean_tokens) is not None]
    middle = (min(xs) + max(xs)) / 2 if xs else 0.0

    def paint(fig: Any) -> None:
        ax = fig.add_subplot()
        if not xs:
            ax.text(0.5, 0.5, "no run recorded its token usage or cost", ha="center",
                    va="center", transform=ax.transAxes, color=BASE_COLOUR)
            ax.set_xticks([])
        for i, r in enumerate(rows):
            x = r.mean_cost if use_cost else r.mean_tokens
            if x is None or r.rate is None:
                continue
            colour = BASE_COLOUR if r.baseline else ROW_COLOUR
            yerr = _whiskers(r.rate, *r.whiskers) if r.whiskers is not None else None
            xerr = _whiskers(x, *r.cost_interval) \
                if use_cost and r.cost_interval is not None else None
            if yerr is not None or xerr is not None:
                ax.errorbar(x, r.rate, yerr=yerr, xerr=xerr, fmt="o",
                            color=colour, ecolor=colour, capsize=3, ms=7)
            else:
                ax.plot([x], [r.rate], "o", color=colour, ms=7)
            right_half = x > middle
            ax.annotate(_short(r.name, 20), (x, r.rate),
                        xytext=(-6 if right_half else 6, 4 if i % 2 == 0 else -11),
                        textcoords="offset points", fontsize=8,
                        ha="right" if right_half else "left")
        ax.set_ylim(-0.02, 1.05)
        ax.yaxis.set_major_formatter(_percent())
        ax.set_xlabel(unit + " (lower is cheaper)"
                      + (", 95% bootstrap over missions" if use_cost and any(
                          r.cost_interval for r in rows) else ""))
        ax.set_ylabel("runs passed")
        ax.margins(x=0.2)
        ax.set_title(title, loc="left")

    return _draw(f"cost-{half}", title, 3.2, paint, margins=(0.8, 0.25, 0.32, 0.6))


def paired(rows: Sequence[PairedRow], baseline: str, half: str) -> str:
    """Each configuration against the baseline: pass-rate delta, 95% interval, verdict."""
    title = f"Against the baseline '{baseline}' ({half})"

    def paint(fig: Any) -> None:
        ax = fig.add_subplot()
        ys = list(range(len(rows)))[::-1]
        for y, r in zip(ys, rows, strict=True):
            colour = COLOURS.get(VERDICT_COLOURS.get(r.verdict, ""), BASE_COLOUR)
            lo, hi = r.interval
            if not (math.isnan(lo) or math.isnan(hi)):
                ax.plot([lo, hi], [y, y], color=colour, lw=2.5, solid_capstyle="butt")
            ax.plot([r.delta], [y], "D", color=colour, ms=7)
            ax.text(1.02, y, f"{r.verdict} (p={r.p_value:.3g})", va="center", fontsize=8,
                    transform=ax.get_yaxis_transform())
        ax.axvline(0, color=INK, lw=0.8, ls="--")
        ax.set_yticks(ys, [_short(r.name) for r in rows])
        ax.set_xlim(-1, 1)
        ax.set_xticks([-1, -0.5, 0, 0.5, 1])
        ax.xaxis.set_major_formatter(_percent(signed=True))
        ax.set_xlabel("pass-rate difference against the baseline, paired (95% interval)")
        ax.set_title(title, loc="left")

    left = 0.25 + _label_in([_short(r.name) for r in rows])
    right = 0.2 + _label_in([f"{r.verdict} (p={r.p_value:.3g})" for r in rows], 8 / 9)
    return _draw(f"paired-{half}", title, 1.3 + 0.38 * max(len(rows), 1), paint,
                 width=max(WIDTH, left + right + 3.0), margins=(left, right, 0.32, 0.75))


def _whiskers(value: float, lo: float, hi: float) -> list[list[float]]:
    """Error-bar lengths below and above; never negative (rounding, or an interval not
    centred on the pooled rate, can put the rate a hair outside it)."""
    return [[max(0.0, value - lo)], [max(0.0, hi - value)]]


def _percent(signed: bool = False):
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda x, _: f"{x:+.0%}" if signed and x else f"{x:.0%}")
