"""Widgets that show the formatting layer's lines (tui.render.segs), and only those: a Static
that repaints only when its lines change (most refreshes bring the same text), a label, a
list of options, a table, a log, a text input. Their setters take `Safe` text alone (through
tui.widgets.cells, the gate), so the screens cannot hand a widget a run's raw text.
UI thread.
"""
from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group
from rich.padding import Padding
from rich.table import Table
from textual.widgets import DataTable, Input, Label, OptionList, RichLog, Static
from textual.widgets.option_list import Option

from mpwatch.text.safe import Safe
from mpwatch.tui.render.segs import BLANK, Cell, Line
from mpwatch.tui.widgets.cells import lines_to_text, to_text


class Lines(Static):
    def __init__(self, text: Safe | None = None, id: str | None = None, classes: str | None = None,
                 wrap: bool = False, fixed: bool = False) -> None:
        super().__init__(to_text(text) if text is not None else "", id=id, classes=classes)
        self.wrap = wrap  # a line longer than the widget goes on under it
        self.fixed = fixed  # its height never changes: a repaint needs no layout pass
        self._lines: list[Cell] | None = None

    def show(self, lines: Sequence[Cell]) -> None:
        lines = list(lines)
        if lines != self._lines:
            old, self._lines = self._lines, lines
            self.paint(lines, old)

    def paint(self, lines: list[Cell], old: list[Cell] | None) -> None:
        self.update(lines_to_text(lines, wrap=self.wrap), layout=not self.fixed)


class KeyTable(Static):
    """The help's body: its title, a grid of (key, what it does), whose long lines wrap under
    their own column, then lines of text."""

    def __init__(self, title: Line, rows: Sequence[tuple[Safe, Safe]], lines: Sequence[Cell],
                 key_w: int) -> None:
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="bold", no_wrap=True, min_width=key_w)
        grid.add_column()
        for key, what in rows:
            grid.add_row(to_text(key), lines_to_text([what], wrap=True))
        super().__init__(Group(lines_to_text([title, BLANK]), Padding(grid, (0, 0, 1, 2)),
                               lines_to_text(lines, wrap=True)))


class LineLabel(Label):
    """A label of one or more lines (a dialog's question), never read as markup."""

    def __init__(self, lines: Cell | list[Line], classes: str = "", id: str | None = None) -> None:
        shown: list[Cell] = list(lines) if isinstance(lines, list) else [lines]
        super().__init__(lines_to_text(shown, wrap=True), classes=classes, id=id)


class LineList(OptionList):
    """Options, each a line (an event, a run to attach to); an option's id is plain data."""

    def show_lines(self, rows: Sequence[tuple[Sequence[Cell], str | None]], empty: Line) -> None:
        options = [Option(lines_to_text(lines), id=oid) for lines, oid in rows]
        self.add_options(options or [Option(to_text(empty), disabled=True)])


class LineTable(DataTable[object]):
    """A table whose cells are lines (two where a tunable's change is pending)."""

    def set_columns(self, columns: Sequence[tuple[Safe, int | None]]) -> None:
        """Its columns: each a label (its key too) and a width (None: as wide as its cells)."""
        for label, width in columns:
            self.add_column(to_text(label), key=label, width=width)

    def add_lines_row(self, cells: Sequence[Sequence[Cell]], key: str | None = None) -> None:
        height = max((len(c) for c in cells), default=1)
        self.add_row(*(lines_to_text(c) for c in cells), height=height, key=key)


class LineLog(RichLog):
    def write_lines(self, lines: Sequence[Cell]) -> None:
        for line in lines:
            self.write(to_text(line, cut=False))  # a long line scrolls sideways


class SafeInput(Input):
    """A text input whose first value may come from the run (a tunable's value in force)."""

    def __init__(self, value: Safe, placeholder: Safe | None = None, id: str | None = None) -> None:
        super().__init__(value=value, placeholder=placeholder or "", id=id)
