"""The run header: name, script, state, uptime, counts by state, restarts, sort/filter."""
from __future__ import annotations

from mpwatch.tui.render.segs import Cell, cell
from mpwatch.tui.widgets.cells import lines_to_text
from mpwatch.tui.widgets.lines import Lines


class RunHeader(Lines):
    DEFAULT_CSS = "RunHeader { height: 3; padding: 0 1; background: $boost; }"

    def __init__(self, id: str | None = None) -> None:
        super().__init__(cell("mpwatch: connecting"), id=id)

    def paint(self, lines: list[Cell], old: list[Cell] | None) -> None:
        if old is None or len(lines) != len(old):
            self.styles.height = len(lines)  # 3, and a line per node of a merged view
        # A fixed height (3): no layout pass, which at 256 rows costs more than the paint.
        self.update(lines_to_text(lines), layout=False)
