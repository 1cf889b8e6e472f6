"""A Static that shows segment lines (tui.render.segs) and repaints only when they
change: most refreshes bring the same text. UI thread."""
from __future__ import annotations

from textual.widgets import Static

from mpwatch.tui.render.segs import Line
from mpwatch.tui.widgets.cells import lines_to_text


class Lines(Static):
    def __init__(self, text: str = "", id: str | None = None) -> None:
        super().__init__(text, id=id)
        self._lines: list[Line] | None = None

    def show(self, lines: list[Line]) -> None:
        if lines != self._lines:
            old, self._lines = self._lines, lines
            self.paint(lines, old)

    def paint(self, lines: list[Line], old: list[Line] | None) -> None:
        self.update(lines_to_text(lines))
