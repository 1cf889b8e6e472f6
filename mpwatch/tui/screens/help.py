"""The keys, on `?`: the rows the App hands in (tui.keys' table, less the keys that act where
nothing can be acted on), then the legend of the screen's marks. UI thread."""
from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen

from mpwatch.tui.render.cells import auto_mark
from mpwatch.tui.render.glyphs import Glyphs
from mpwatch.tui.render.segs import cell, line
from mpwatch.tui.widgets.lines import KeyTable

KEY_W = 6  # the key column's least width (Enter, Home)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close")]

    def __init__(self, glyphs: Glyphs, rows: Sequence[tuple[str, str]], can_act: bool = True) -> None:
        super().__init__()
        self.glyphs = glyphs
        self.rows = list(rows)  # (key as shown, what it does)
        self.can_act = can_act  # a live run: the keys that act are among the rows

    def compose(self) -> ComposeResult:
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
            rows = [(cell(key), cell(what)) for key, what in self.rows]
            yield KeyTable(line(("mpwatch keys", "bold")), rows, [cell(t) for t in lines], KEY_W)

    def action_close(self) -> None:
        self.dismiss(None)
