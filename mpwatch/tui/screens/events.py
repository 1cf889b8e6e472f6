"""Every event the TUI has of the run (`e`): from the first when attached to a live run
(the control socket keeps the last 1000, and the TUI keeps what it was given, the first
snapshot's too), or the whole recorded run in a replay, where the cursor's event is marked,
those after it are dim, and Enter moves the cursor to the chosen one. Newest at the bottom,
shown there at first. Dismissed with the chosen event's seq (None: closed). UI thread.
"""
from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option

from mpwatch.contract.status import EventFields
from mpwatch.tui.render import event_lines
from mpwatch.tui.widgets.cells import to_text


class EventsScreen(ModalScreen[int | None]):
    DEFAULT_CSS = """
    EventsScreen { background: $background; }
    #events-title { height: 1; padding: 0 1; background: $boost; }
    #events-list { height: 1fr; border: none; }
    """
    BINDINGS = [Binding("escape,q,e", "close", "Back")]

    def __init__(self, events: Sequence[EventFields], started: float | None, current: int | None = None,
                 title: str = "events"):
        super().__init__()
        self.events = list(events)
        self.started = started
        self.current = current  # the replay cursor's seq; None: a live run (nothing is ahead)
        self.title_text = title
        self.list = OptionList(id="events-list")

    def compose(self) -> ComposeResult:
        yield Static(id="events-title")
        yield self.list
        yield Footer()

    def on_mount(self) -> None:
        hint = "Enter: go to that moment, " if self.current is not None else ""
        self.query_one("#events-title", Static).update(
            Text(f"{self.title_text}: {len(self.events)} ({hint}Esc: back)", style="bold"))
        highlight = len(self.events) - 1
        options = []
        for i, rec in enumerate(self.events):
            line = event_lines.event_line(rec, self.started)
            seq = rec.get("seq")
            if self.current is not None and seq is not None:
                if seq == self.current:
                    line = ((">", "bold reverse"),) + line
                    highlight = i
                elif seq > self.current:
                    line = tuple((t, "dim") for t, _ in line)
            options.append(Option(to_text(line), id=f"seq-{seq}" if seq is not None else None))
        self.list.add_options(options or [Option(Text("no events yet", style="bright_black"), disabled=True)])
        if self.events:
            self.list.highlighted = highlight
            self.list.scroll_to_highlight()
        self.list.focus()

    def on_option_list_option_selected(self, msg: OptionList.OptionSelected) -> None:
        oid = msg.option.id
        if self.current is not None and oid and oid.startswith("seq-"):
            self.dismiss(int(oid[4:]))

    def action_close(self) -> None:
        self.dismiss(None)
