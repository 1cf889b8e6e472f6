"""The GPU panel: memory bar, utilization and holders per GPU, or why there is none."""
from __future__ import annotations

from textual.widgets import Static

from mpwatch.tui.widgets.cells import lines_to_text


class GpuPanel(Static):
    DEFAULT_CSS = "GpuPanel { height: auto; max-height: 8; padding: 0 1; border-top: solid $primary-darken-2; }"

    def __init__(self, **kw):
        super().__init__("", **kw)
        self._lines = None

    def show(self, lines: list) -> None:
        if lines != self._lines:
            # Its height follows its line count: a layout pass only when that changes.
            grows = self._lines is None or len(lines) != len(self._lines)
            self._lines = lines
            self.update(lines_to_text(lines), layout=grows)
