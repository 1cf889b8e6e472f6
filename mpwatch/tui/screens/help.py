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
    ("r", "restart the selected worker (asks first; in a process group, offers to restart all)"),
    ("R", "restart all workers (asks first)"),
    ("+ / -", "resize the run by one worker (asks first when every worker restarts: --resize-mode restart)"),
    ("d", "dump the stacks of the selected worker"),
    ("c", "checkpoint now: the selected rank or all (asks first); should_checkpoint() is True at one step"),
    ("t", "tunables: mpwatch.tunable() values, who changed them when; Enter changes one on every rank"),
    ("l", "logs of the selected worker (stdout and stderr)"),
    ("e", "events: every event of the run, from the first"),
    (", . [ ]", "replay (mpwatch show): step an event back/on, jump to the last/next failure, "
                "stall, restart, alert"),
    ("Home End", "replay: the run's start, its end"),
    ("f / F", "fold or unfold children of the selected worker / of all"),
    ("/", "filter rows; Esc clears the filter"),
    ("s", "sort by the next column (rank, state, step, loss, ...)"),
    ("Ctrl+P", "command palette: every action by name"),
    ("q", "leave: detach (the run goes on), stop the run, or cancel"),
    ("?", "this help"),
]


ACTING_KEYS = frozenset({"p", "P", "k", "r", "R", "+ / -", "d"})  # they act on the run's processes


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close")]

    def __init__(self, glyphs: Glyphs, can_act: bool = True) -> None:
        super().__init__()
        self.glyphs = glyphs
        self.can_act = can_act  # a live run: the keys that act are listed

    def compose(self) -> ComposeResult:
        keys = [(k, v) for k, v in KEYS if self.can_act or k not in ACTING_KEYS]
        lines = ["[b]mpwatch keys[/b]", ""] + [f"  [b]{k:<11}[/b] {v}" for k, v in keys]
        if not self.can_act:
            lines += ["", "Read-only: nothing here acts on a process (pause, kill, restart, resize, dump)."]
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
