"""The keys that only change the view: filter, sort, fold a worker's children. A mixin of
tui.actions' RunActions, which declares the state these keys change (sort, filter_text,
folded) in its __init__. UI thread; nothing here talks to the run.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from mpwatch.tui.render import view
from mpwatch.tui.screens.filter import FilterDialog

if TYPE_CHECKING:
    from textual.app import App

    from mpwatch.contract import Status, WorkerStatus
    from mpwatch.tui.outcome import Outcome
    from mpwatch.tui.widgets.worker_table import WorkerTable

    _App = App[Outcome]
else:
    _App = object  # the App comes after this mixin in RunActions' bases


class ViewActions(_App):
    # RunActions' (declared in its __init__)
    status: Status | None
    sort: str
    filter_text: str
    folded: set[int]
    table: WorkerTable

    if TYPE_CHECKING:
        def say(self, text: str, severity: str = "information", notify: bool = True) -> None: ...

        def refresh_view(self) -> None: ...

        def worker(self, rank: int | None) -> WorkerStatus | None: ...

    def action_filter(self) -> None:
        def done(text: str | None) -> None:
            if text is None:
                self.say("filter unchanged", notify=False)
                return
            self.filter_text = text
            self.refresh_view()
            shown = sum(1 for k in self.table.order if "." not in k)
            self.say(f"filter '{text}': {shown} worker(s) shown" if text else "filter cleared", notify=False)
        self.push_screen(FilterDialog(self.filter_text), done)

    def action_clear_filter(self) -> None:
        if self.filter_text:
            self.filter_text = ""
            self.refresh_view()
            self.say("filter cleared", notify=False)

    def action_sort(self) -> None:
        i = view.SORTS.index(self.sort)
        self.sort = view.SORTS[(i + 1) % len(view.SORTS)]
        self.refresh_view()
        self.say(f"sorted by {self.sort}", notify=False)

    def action_fold(self) -> None:
        rank = self.table.selected_rank()
        w = self.worker(rank)
        if rank is None or w is None:
            self.say("no worker selected", "warning")
            return
        kids = len(w["children"])
        if rank in self.folded:
            self.folded.discard(rank)
            self.say(f"rank {rank}: {kids} child process(es) shown", notify=False)
        else:
            self.folded.add(rank)
            self.table.select_key(view.row_key(rank))
            self.say(f"rank {rank}: {kids} child process(es) folded", notify=False)
        self.refresh_view()

    def action_fold_all(self) -> None:
        ranks = {w["rank"] for w in (self.status or {"workers": []})["workers"]}
        if ranks - self.folded:
            self.folded |= ranks
            self.say("children folded", notify=False)
        else:
            self.folded.clear()
            self.say("children shown", notify=False)
        self.refresh_view()
