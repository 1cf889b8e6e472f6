"""Every event the TUI has of the run (`e`): from the first when attached to a live run
(the control socket keeps the last 1000, and the TUI keeps what it was given, the first
snapshot's too), or the whole recorded run in a replay, where the cursor's event is marked,
those after it are dim, and Enter moves the cursor to the chosen one. Newest at the bottom,
shown there at first. Dismissed with the chosen event's seq (None: closed). UI thread.
"""
from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Footer, OptionList

from mpwatch.contract import EventFields
from mpwatch.tui.render import event_lines, segs
from mpwatch.tui.render.segs import Line, line
from mpwatch.tui.widgets.lines import LineList, Lines


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
        self.list = LineList(id="events-list")
        self.title_bar = Lines(id="events-title")

    def compose(self) -> ComposeResult:
        yield self.title_bar
        yield self.list
        yield Footer()

    def on_mount(self) -> None:
        hint = "Enter: go to that moment, " if self.current is not None else ""
        self.title_bar.show([line((f"{self.title_text}: {len(self.events)} ({hint}Esc: back)", "bold"))])
        highlight = len(self.events) - 1
        rows: list[tuple[list[Line], str | None]] = []
        for i, rec in enumerate(self.events):
            shown = event_lines.event_line(rec, self.started)
            seq = rec.get("seq")
            if self.current is not None and seq is not None:
                if seq == self.current:
                    shown = line((">", "bold reverse")) + shown
                    highlight = i
                elif seq > self.current:
                    shown = segs.restyle(shown, "dim")
            rows.append(([shown], f"seq-{seq}" if seq is not None else None))
        self.list.show_lines(rows, line(("no events yet", "bright_black")))
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
