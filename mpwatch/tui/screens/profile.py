""""Profile" (`o`): the selected rank or every rank, asked first. The answer is "rank", "all"
or None (cancelled); tui.actions sends the request (contract.actions: torch.profiler for
PROFILE_STEPS steps, py-spy for as many seconds where a rank has not imported torch). UI thread."""
from __future__ import annotations

from collections.abc import Iterable

from textual.widgets import Label

from mpwatch.contract.actions import PROFILE_STEPS
from mpwatch.tui.screens.rank_or_all import RankOrAllDialog


class ProfileDialog(RankOrAllDialog):
    def lines(self) -> Iterable[Label]:
        yield Label(f"Profile {PROFILE_STEPS} steps?", classes="dialog-title")
        yield Label(f"torch.profiler runs from the next step for {PROFILE_STEPS} steps and writes "
                    "a Chrome trace into rank-N/profiles/ (Perfetto opens it); all ranks start at one "
                    "step.", classes="dialog-detail")
        yield Label("Other lengths: mpwatch ctl profile RANK|all --steps N.", classes="dialog-detail")
