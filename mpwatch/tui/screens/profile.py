""""Profile" (`o`): the selected rank or every rank, asked first. The answer is "rank", "all"
or None (cancelled); tui.actions sends the request (contract.actions: torch.profiler for
PROFILE_STEPS steps, py-spy for as many seconds where a rank has not imported torch). UI thread."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Label

from mpwatch.contract.actions import PROFILE_STEPS


class ProfileDialog(ModalScreen[str | None]):
    BINDINGS = [Binding("r", "choose('rank')", "This rank"), Binding("a", "choose('all')", "All ranks"),
                Binding("n,escape", "choose(None)", "Cancel")]

    def __init__(self, rank: int, ranks: int):
        super().__init__()
        self.rank = rank
        self.ranks = ranks

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"Profile {PROFILE_STEPS} steps?", classes="dialog-title")
            yield Label(f"torch.profiler runs from the next step for {PROFILE_STEPS} steps and writes "
                        "a Chrome trace into rank-N/profiles/ (Perfetto opens it); all ranks start at one "
                        "step.", classes="dialog-detail")
            yield Label("Other lengths: mpwatch ctl profile RANK|all --steps N.", classes="dialog-detail")
            with Horizontal(classes="dialog-buttons"):
                yield Button(Content(f"[r] Rank {self.rank}"), id="rank", variant="primary")
                yield Button(Content(f"[a] All {self.ranks} ranks"), id="all", variant="warning")
                yield Button(Content("[n] Cancel"), id="cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id if event.button.id in ("rank", "all") else None)

    def action_choose(self, choice: str | None) -> None:
        self.dismiss(choice)
