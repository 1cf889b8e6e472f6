"""Every standing alert, whole (`a`): the run's findings and the GPUs' alerts, each with since
when (and what it cost the run, for a straggler) and its hint, wrapped to the screen; where the
main screen has no room for them all, or on a short terminal. It follows each status the App
applies (a replay's: as of the moment shown). UI thread.
"""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Footer

from mpwatch.tui.render import gpu_tables, segs
from mpwatch.tui.render.segs import Line, line
from mpwatch.tui.screens.run_screen import RunScreen
from mpwatch.tui.widgets.lines import Lines


class AlertsScreen(RunScreen):
    DEFAULT_CSS = """
    AlertsScreen { background: $background; }
    #alerts-title { height: 1; padding: 0 1; background: $boost; }
    #alerts-body { height: 1fr; padding: 0 1; }
    """
    BINDINGS = [Binding("escape,q,a", "close", "Back")]

    def __init__(self) -> None:
        super().__init__()
        self.title_bar = Lines(id="alerts-title")
        self.body = Lines(id="alerts-list")

    def compose(self) -> ComposeResult:
        yield self.title_bar
        with VerticalScroll(id="alerts-body"):
            yield self.body
        yield Footer()

    def on_mount(self) -> None:
        self.show_status()

    def on_resize(self) -> None:
        self.show_status()

    def show_status(self) -> None:
        st = self.run.status
        if st is None:
            return
        width = max(self.size.width - 3, 20)
        shown = gpu_tables.alert_list(st, self.run.glyphs)
        n = len(st["alerts"]) + sum(len(gpu["alerts"]) for gpu in st["gpus"])
        self.title_bar.show([line((f"alerts: {n} standing, each whole · Esc: back", "bold"))])
        self.body.show(wrapped(shown, width))

    def action_close(self) -> None:
        self.dismiss(None)


def wrapped(lines: list[Line], width: int) -> list[Line]:
    """Each line wrapped to the width, under its own start past its mark (two cells)."""
    return [part for ln in lines for part in segs.wrap(ln, width, indent=2)]
