"""The keys, on `?`: the rows the App hands in (tui.keys' table, less the keys that act where
nothing can be acted on), then the legend of the screen's marks. UI thread."""
from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from mpwatch.tui.render.glyphs import Glyphs
from mpwatch.tui.render.view import auto_mark

KEY_W = 6  # the key column's least width (Enter, Home)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close")]

    def __init__(self, glyphs: Glyphs, rows: Sequence[tuple[str, str]], can_act: bool = True) -> None:
        super().__init__()
        self.glyphs = glyphs
        self.rows = list(rows)  # (key as shown, what it does)
        self.can_act = can_act  # a live run: the keys that act are among the rows

    def compose(self) -> ComposeResult:
        # A grid, so that a long line wraps under its own column; plain text, no markup ("[" is a key).
        keys = Table.grid(padding=(0, 1))
        keys.add_column(style="bold", no_wrap=True, min_width=KEY_W)
        keys.add_column()
        for key, what in self.rows:
            keys.add_row(key, what)
        lines = ["Ctrl+P opens the command palette: every key here, by its name."]
        if not self.can_act:
            lines += ["", "Read-only: nothing here acts on the run (pause, kill, restart, resize, dump, "
                          "checkpoint)."]
        g = self.glyphs
        lines += ["", "States: " + "  ".join(f"{sym} {name}" for name, sym in g.state.items()),
                  "TIME bar (mpwatch.phase()): " + "  ".join(f"{ch} {name}" for name, ch in g.phase.items()),
                  f"STEP {auto_mark(g)}: counted automatically (optimizer steps; the script "
                  "never calls mpwatch.report())",
                  "", "Esc closes this help."]
        with VerticalScroll(classes="dialog wide"):
            yield Static(Group(Text("mpwatch keys\n", style="bold"), Padding(keys, (0, 0, 1, 2)),
                               Text("\n".join(lines))))

    def action_close(self) -> None:
        self.dismiss(None)
