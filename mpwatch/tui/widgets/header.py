"""The run header: name, script, state, uptime, counts by state, restarts, sort/filter."""
from __future__ import annotations

from textual.widgets import Static

from mpwatch.tui.segs import Line
from mpwatch.tui.widgets.cells import lines_to_text


class RunHeader(Static):
    DEFAULT_CSS = "RunHeader { height: 3; padding: 0 1; background: $boost; }"

    def __init__(self, id: str | None = None) -> None:
        super().__init__("mpwatch: connecting…", id=id)
        self._lines: list[Line] | None = None

    def show(self, lines: list[Line]) -> None:
        if lines != self._lines:  # only repaint when the text changed
            if self._lines is None or len(lines) != len(self._lines):
                self.styles.height = len(lines)  # 3, and a line per node of a merged view
            self._lines = lines
            # A fixed height (3): no layout pass, which at 256 rows costs more than the paint.
            self.update(lines_to_text(lines), layout=False)
