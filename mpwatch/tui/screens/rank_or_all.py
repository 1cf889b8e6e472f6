"""A question asked of the selected rank or of every rank (checkpoint now, profile): its words
from the subclass (`lines`), the answer "rank", "all" or None (cancelled). UI thread."""
from __future__ import annotations

from collections.abc import Iterable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button

from mpwatch.tui.render.segs import cell
from mpwatch.tui.widgets.cells import button
from mpwatch.tui.widgets.lines import LineLabel


class RankOrAllDialog(ModalScreen[str | None]):
    BINDINGS = [Binding("r", "choose('rank')", "This rank"), Binding("a", "choose('all')", "All ranks"),
                Binding("n,escape", "choose(None)", "Cancel")]

    def __init__(self, rank: int, ranks: int):
        super().__init__()
        self.rank = rank
        self.ranks = ranks

    def lines(self) -> Iterable[LineLabel]:
        """The question's title and what it does."""
        raise NotImplementedError

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield from self.lines()
            with Horizontal(classes="dialog-buttons"):
                yield button(cell(f"[r] Rank {self.rank}"), id="rank", variant="primary")
                yield button(cell(f"[a] All {self.ranks} ranks"), id="all", variant="warning")
                yield button(cell("[n] Cancel"), id="cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id if event.button.id in ("rank", "all") else None)

    def action_choose(self, choice: str | None) -> None:
        self.dismiss(choice)
