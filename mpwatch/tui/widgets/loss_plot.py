"""Loss over steps for every rank, the selected one drawn last and highlighted.

`plot_lines` is pure (series in, lines of segments out); LossPlot re-draws it to fit
its own size.
"""
from __future__ import annotations

import math

from textual.widgets import Static

from mpwatch.tui.glyphs import Glyphs
from mpwatch.tui.widgets.cells import lines_to_text

AXIS_W = 9


def _finite(points):
    return [(s, v) for s, v in points
            if isinstance(s, (int, float)) and isinstance(v, (int, float)) and math.isfinite(v) and math.isfinite(s)]


def plot_lines(series: dict, selected: int | None, width: int, height: int, g: Glyphs) -> list[tuple]:
    series = {r: _finite(p) for r, p in series.items()}
    series = {r: p for r, p in series.items() if p}
    if not series:
        return [(("no loss reported yet", "bright_black"),)]
    cols, rows = max(width - AXIS_W, 4), max(height - 1, 2)
    xs = [s for p in series.values() for s, _ in p]
    ys = [v for p in series.values() for _, v in p]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y1 = y0 + abs(y0) * 0.1 + 1e-9
    grid = [[(" ", "")] * cols for _ in range(rows)]
    order = sorted(series, key=lambda r: r == selected)  # the selected rank last, on top
    for r in order:
        mark, style = (g.dot_selected, "bold yellow") if r == selected else (g.dot_other, "cyan")
        for s, v in series[r]:
            c = min(int((s - x0) / (x1 - x0) * (cols - 1) + 0.5), cols - 1)
            y = min(int((v - y0) / (y1 - y0) * (rows - 1) + 0.5), rows - 1)
            grid[rows - 1 - y][c] = (mark, style)
    out = []
    for i, row in enumerate(grid):
        label = f"{y1:.3g}" if i == 0 else (f"{y0:.3g}" if i == rows - 1 else "")
        segs = [(f"{label:>{AXIS_W - 1}} ", "bright_black")]
        # Merge runs of one style: fewer segments to render.
        run_text, run_style = "", None
        for ch, st in row:
            if st != run_style and run_text:
                segs.append((run_text, run_style))
                run_text = ""
            run_text += ch
            run_style = st
        segs.append((run_text, run_style))
        out.append(tuple(segs))
    left, right = f"step {x0:g}", f"{x1:g}"
    pad = max(cols - len(left) - len(right), 1)
    legend = f"  rank {selected} {g.dot_selected}, others {g.dot_other}" if selected is not None else ""
    out.append(((" " * AXIS_W + left + " " * pad + right + legend, "bright_black"),))
    return out


class LossPlot(Static):
    DEFAULT_CSS = "LossPlot { height: 12; }"

    def __init__(self, glyphs: Glyphs, **kw):
        super().__init__("", **kw)
        self.glyphs = glyphs
        self.series: dict = {}
        self.selected: int | None = None

    def set_data(self, series: dict, selected: int | None) -> None:
        self.series, self.selected = series, selected
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        w, h = self.content_size.width or 60, self.content_size.height or 10
        self.update(lines_to_text(plot_lines(self.series, self.selected, w, h, self.glyphs)))
