"""The keys, on `?`."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from mpwatch.tui.render.glyphs import Glyphs
from mpwatch.tui.render.view import auto_mark

KEYS = [
    ("up/down, j", "select a worker (k is kill)"),
    ("Enter", "detail: loss plot (y: log/linear), stdout/stderr tail, stack dump, children"),
    ("g", "GPU screen: memory and utilization over time (w: 2 min/10 min/1 h), ranks, outsiders, alerts"),
    ("p", "pause or resume the selected worker"),
    ("P", "pause or resume all workers"),
    ("k", "kill the selected worker (asks first)"),
    ("r", "restart the selected worker (asks first)"),
    ("+ / -", "resize the run by one worker"),
    ("d", "dump the stacks of the selected worker"),
    ("l", "logs of the selected worker (stdout and stderr)"),
    ("e", "events: every event of the run, from the first"),
    (", . [ ]", "replay (mpwatch show): step an event back/on, jump to the last/next failure, stall, restart, alert"),
    ("Home End", "replay: the run's start, its end"),
    ("f / F", "fold or unfold children of the selected worker / of all"),
    ("/", "filter rows; Esc clears the filter"),
    ("s", "sort by the next column (rank, state, step, loss, ...)"),
    ("Ctrl+P", "command palette: every action by name"),
    ("q", "leave: detach (the run goes on), stop the run, or cancel"),
    ("?", "this help"),
]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close")]

    def __init__(self, glyphs: Glyphs) -> None:
        super().__init__()
        self.glyphs = glyphs

    def compose(self) -> ComposeResult:
        lines = ["[b]mpwatch keys[/b]", ""] + [f"  [b]{k:<11}[/b] {v}" for k, v in KEYS]
        g = self.glyphs
        lines += ["", "States: " + "  ".join(f"{sym} {name}" for name, sym in g.state.items()),
                  "TIME bar (mpwatch.phase()): " + "  ".join(f"{ch} {name}" for name, ch in g.phase.items()),
                  f"STEP {auto_mark(g)}: counted automatically (optimizer steps; the script "
                  "never calls mpwatch.report())",
                  "", "Esc closes this help."]
        with VerticalScroll(classes="dialog wide"):
            yield Static("\n".join(lines).replace("[/b]", "[/]").replace("[b]", "[bold]"), markup=True)

    def action_close(self) -> None:
        self.dismiss(None)
