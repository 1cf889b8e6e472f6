""""Checkpoint now" (`c`): for the selected rank or for every rank, asked first. The answer is
"rank", "all" or None (cancelled); tui.actions sends the request. UI thread."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class CheckpointDialog(ModalScreen[str | None]):
    BINDINGS = [Binding("r", "choose('rank')", "This rank"), Binding("a", "choose('all')", "All ranks"),
                Binding("n,escape", "choose(None)", "Cancel")]

    def __init__(self, rank: int, ranks: int, polls: bool):
        super().__init__()
        self.rank = rank
        self.ranks = ranks
        self.polls = polls  # the rank's process calls mpwatch.should_checkpoint()

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Checkpoint now?", classes="dialog-title")
            yield Label("mpwatch.should_checkpoint() returns True once in the training loop, at a step "
                        f"mpwatch picks: on rank {self.rank} alone, or on every rank at the same step.",
                        classes="dialog-detail", markup=False)
            if not self.polls:
                yield Label(f"Rank {self.rank} has not called mpwatch.should_checkpoint() yet: "
                            "it answers when it does.", classes="dialog-detail dialog-warning warning")
            with Horizontal(classes="dialog-buttons"):
                yield Button(Content(f"[r] Rank {self.rank}"), id="rank", variant="primary")
                yield Button(Content(f"[a] All {self.ranks} ranks"), id="all", variant="warning")
                yield Button(Content("[n] Cancel"), id="cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id if event.button.id in ("rank", "all") else None)

    def action_choose(self, choice: str | None) -> None:
        self.dismiss(choice)
