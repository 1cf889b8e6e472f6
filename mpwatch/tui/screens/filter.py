"""Filter the rows: a rank or pid number, or words matched against state and cause."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input

from mpwatch.tui.render.segs import cell
from mpwatch.tui.widgets.lines import LineLabel, SafeInput


class FilterDialog(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, current: str = ""):
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield LineLabel(cell("Filter rows (a rank or pid, or words such as 'failed'); empty shows all"),
                            classes="dialog-title")
            yield SafeInput(value=cell(self.current), placeholder=cell("e.g. 3, stalled, failed exit"),
                            id="filter-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)
