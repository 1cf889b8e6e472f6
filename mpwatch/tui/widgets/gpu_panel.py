"""The GPU panel (one row per GPU, scrolled when there are more GPUs than rows) and the
alert lines under it. They show lines made by tui.render.gpu_rows; UI thread only."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from mpwatch.text.safe import Safe
from mpwatch.tui.render.segs import Cell, Line
from mpwatch.tui.widgets.cells import lines_to_text, to_text
from mpwatch.tui.widgets.lines import Lines


class GpuPanel(VerticalScroll, can_focus=False):
    DEFAULT_CSS = """
    GpuPanel { height: auto; max-height: 5; padding: 0 1; border-top: solid $primary-darken-2;
               scrollbar-size-vertical: 1; }
    GpuPanel > Static { width: 100%; height: auto; }
    """

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self.body = Static("")
        self._lines: list[Line] | None = None
        self._title: Safe | None = None

    def compose(self) -> ComposeResult:
        yield self.body

    def show(self, lines: list[Line], title: Safe, rows: int) -> None:
        """`rows`: how many GPU rows fit; more scroll."""
        if title != self._title:
            self._title = title
            self.border_title = to_text(title)  # a str would be read as markup
        if self.styles.max_height is None or self.styles.max_height.value != rows + 1:
            self.styles.max_height = rows + 1  # the rows and the border
        if lines != self._lines:
            self._lines = lines
            self.body.update(lines_to_text(lines))


class AlertLines(Lines):
    """One line per standing alert, the worst first; a count of the ones that do not fit."""

    DEFAULT_CSS = "AlertLines { height: auto; padding: 0 1; }"

    def paint(self, lines: list[Cell], old: list[Cell] | None) -> None:
        self.display = bool(lines)
        self.update(lines_to_text(lines))
