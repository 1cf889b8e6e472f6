"""Leaving: detach (the run goes on), stop the run, or cancel."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button

from mpwatch.tui.render.segs import cell
from mpwatch.tui.widgets.cells import button
from mpwatch.tui.widgets.lines import LineLabel


class QuitDialog(ModalScreen[str]):
    BINDINGS = [Binding("d", "choose('detach')", "Detach"), Binding("s", "choose('stop')", "Stop the run"),
                Binding("c,escape,n", "choose('cancel')", "Cancel")]

    def __init__(self, run_id: str):
        super().__init__()
        self.run_id = run_id

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield LineLabel(cell(f"Leave run {self.run_id}?"), classes="dialog-title")
            yield LineLabel(cell("detach: the run goes on; 'mpwatch attach' shows it again."),
                            classes="dialog-detail")
            yield LineLabel(cell("stop: stop every worker and end the run."), classes="dialog-detail")
            with Horizontal(classes="dialog-buttons"):
                yield button(cell("[d] Detach"), id="detach", variant="primary")
                yield button(cell("[s] Stop the run"), id="stop", variant="error")
                yield button(cell("[c] Cancel"), id="cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id)

    def action_choose(self, choice: str) -> None:
        self.dismiss(choice)
