"""Loss over steps for every rank, the selected one drawn last and highlighted, on a linear
or a log scale (a loss that falls over orders of magnitude is flat after the first steps on
a linear one): it opens on the log scale where the losses span 10x or more, as the TREND
does (tui.render.bars), and `y` switches. `plot_lines` is pure (series in, lines of
segments out); LossPlot draws it to fit its own size, on the UI thread.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from textual.widgets import Static

from mpwatch.tui.render import bars
from mpwatch.tui.render.glyphs import Glyphs
from mpwatch.tui.render.segs import Line, Part, line
from mpwatch.tui.widgets.cells import lines_to_text

AXIS_W = 9
Points = Sequence[tuple[float, float]]


def _finite(points: Points, log: bool) -> list[tuple[float, float]]:
    out = []
    for s, v in points:
        if not (math.isfinite(s) and math.isfinite(v)):
            continue
        if log:
            if v <= 0:
                continue
            v = math.log10(v)
        out.append((s, v))
    return out


def _label(y: float, log: bool) -> str:
    return f"{10 ** y:.3g}" if log else f"{y:.3g}"


def scale_label(log: bool) -> str:
    """The scale shown, then what `y` shows instead (the key, not the axis)."""
    return "log scale (press y for linear)" if log else "linear scale (press y for log)"


def spans_log(series: Mapping[int, Points]) -> bool:
    """The losses are all positive and span 10x or more: the scale the plot opens on is log."""
    ys = [v for p in series.values() for _, v in _finite(p, False)]
    return bool(ys) and bars.spans_log(min(ys), max(ys))


def plot_lines(series: Mapping[int, Points], selected: int | None, width: int, height: int, g: Glyphs,
               log: bool = False) -> list[Line]:
    scale = scale_label(log)
    curves = {r: _finite(p, log) for r, p in series.items()}
    curves = {r: p for r, p in curves.items() if p}
    if not curves:
        why = "no positive loss to draw on a log scale" if log and series else "no loss reported yet"
        return [line((why, "bright_black")), line((scale, "bright_black"))]
    cols, rows = max(width - AXIS_W, 4), max(height - 1, 2)
    xs = [s for p in curves.values() for s, _ in p]
    ys = [v for p in curves.values() for _, v in p]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    if x1 == x0:
        x1 = x0 + 1
    if bars.flat(*((10 ** y0, 10 ** y1) if log else (y0, y1))):  # one value but for rounding
        y1 = y0 + abs(y0) * 0.1 + 1e-9
    grid: list[list[Part]] = [[(" ", "")] * cols for _ in range(rows)]
    order = sorted(curves, key=lambda r: r == selected)  # the selected rank last, on top
    for r in order:
        mark, style = (g.dot_selected, "bold yellow") if r == selected else (g.dot_other, "cyan")
        for s, v in curves[r]:
            c = min(int((s - x0) / (x1 - x0) * (cols - 1) + 0.5), cols - 1)
            y = min(int((v - y0) / (y1 - y0) * (rows - 1) + 0.5), rows - 1)
            grid[rows - 1 - y][c] = (mark, style)
    out: list[Line] = []
    for i, row in enumerate(grid):
        label = _label(y1, log) if i == 0 else (_label(y0, log) if i == rows - 1 else "")
        segs: list[Part] = [(f"{label:>{AXIS_W - 1}} ", "bright_black")]
        for ch, st in row:  # runs of one style as one segment: fewer to render
            if segs and segs[-1][1] == st and len(segs) > 1:
                segs[-1] = (segs[-1][0] + ch, st)
            else:
                segs.append((ch, st))
        out.append(line(*segs))
    # two spaces apart, not the separator: with ASCII dots it read "others . . log scale"
    legend = f"rank {selected} {g.dot_selected}, others {g.dot_other}  " if selected is not None else ""
    left, right = f"step {x0:g}  {legend}{scale}", f"{x1:g}"
    pad = max(cols - len(left) - len(right), 1)
    out.append(line((" " * AXIS_W + left + " " * pad + right, "bright_black")))
    return out


class LossPlot(Static):
    DEFAULT_CSS = "LossPlot { height: 12; }"

    def __init__(self, glyphs: Glyphs, id: str | None = None) -> None:
        super().__init__("", id=id)
        self.glyphs = glyphs
        self.series: dict[int, list[tuple[float, float]]] = {}
        self.selected: int | None = None
        self.chosen: bool | None = None  # the scale `y` chose (log: True); None: by the losses' span

    @property
    def log_scale(self) -> bool:
        return spans_log(self.series) if self.chosen is None else self.chosen

    def set_data(self, series: dict[int, list[tuple[float, float]]], selected: int | None) -> None:
        self.series, self.selected = series, selected
        self._draw()

    def toggle_log(self) -> bool:
        self.chosen = not self.log_scale
        self._draw()
        return self.chosen

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        w, h = self.content_size.width or 60, self.content_size.height or 10
        self.update(lines_to_text(plot_lines(self.series, self.selected, w, h, self.glyphs, self.log_scale)))
