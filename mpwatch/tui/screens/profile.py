""""Profile" (`o`): the selected rank or every rank, asked first. The answer is "rank", "all"
or None (cancelled); tui.actions sends the request (contract.actions: torch.profiler for
PROFILE_STEPS steps, py-spy for as many seconds where a rank has not imported torch). UI thread."""
from __future__ import annotations

from collections.abc import Iterable

from mpwatch.contract import PROFILE_STEPS
from mpwatch.tui.render.segs import cell
from mpwatch.tui.screens.rank_or_all import RankOrAllDialog
from mpwatch.tui.widgets.lines import LineLabel


class ProfileDialog(RankOrAllDialog):
    def lines(self) -> Iterable[LineLabel]:
        yield LineLabel(cell(f"Profile {PROFILE_STEPS} steps?"), classes="dialog-title")
        yield LineLabel(cell(f"torch.profiler runs from the next step for {PROFILE_STEPS} steps and writes a "
                             "Chrome trace into rank-N/profiles/ (Perfetto opens it); all ranks start at one "
                             "step."),
                        classes="dialog-detail")
        yield LineLabel(cell("Other lengths: mpwatch ctl profile RANK|all --steps N."),
                        classes="dialog-detail")
