""""Checkpoint now" (`c`): for the selected rank or for every rank, asked first. The answer is
"rank", "all" or None (cancelled); tui.actions sends the request. UI thread."""
from __future__ import annotations

from collections.abc import Iterable

from mpwatch.tui.render.segs import cell
from mpwatch.tui.screens.rank_or_all import RankOrAllDialog
from mpwatch.tui.widgets.lines import LineLabel


class CheckpointDialog(RankOrAllDialog):
    def __init__(self, rank: int, ranks: int, polls: bool):
        super().__init__(rank, ranks)
        self.polls = polls  # the rank's process calls mpwatch.should_checkpoint()

    def lines(self) -> Iterable[LineLabel]:
        yield LineLabel(cell("Checkpoint now?"), classes="dialog-title")
        yield LineLabel(cell("mpwatch.should_checkpoint() returns True once in the training loop, at a step "
                             f"mpwatch picks: on rank {self.rank} alone, or on every rank at the same step."),
                        classes="dialog-detail")
        if not self.polls:
            yield LineLabel(cell(f"Rank {self.rank} has not called mpwatch.should_checkpoint() yet: "
                                 "it answers when it does."), classes="dialog-detail dialog-warning warning")
