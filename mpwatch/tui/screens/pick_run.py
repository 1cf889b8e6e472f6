"""`mpwatch attach` with several live runs and no RUN: pick the one to watch, never the newest
by chance. One option a run (its id and script; when it started and its directory), Enter
attaches, q (or Esc) leaves without attaching: the footer shows q, as the title says. UI
thread; the App is tui.picker's."""
from __future__ import annotations

import time
from collections.abc import Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, OptionList

from mpwatch.rundir.registry import RegistryEntry
from mpwatch.text import fmt
from mpwatch.tui.render import glyphs
from mpwatch.tui.render.segs import Line, line
from mpwatch.tui.widgets.lines import LineList, Lines


def option_lines(e: RegistryEntry, now: float, sep: str = " · ") -> list[Line]:
    """Three lines: the run and its workers; its script; when it started and where its files are."""
    started = time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(e['started']))
    workers = f"  {e['nprocs']} worker{'s' if e['nprocs'] != 1 else ''}"
    ago = fmt.duration(max(0.0, now - e['started']))
    return [line((e["run_id"], "bold cyan"), (workers, "")), line((f"  {e['script']}", "")),
            line((f"  started {started} ({ago} ago){sep}{e['run_dir']}", "bright_black"))]


class RunList(LineList):
    """The runs; Enter (the list's own select, after any key before it) attaches."""

    BINDINGS = [Binding("enter", "select", "Attach")]


class PickRunScreen(Screen[str | None]):
    BINDINGS = [Binding("q,escape", "leave", "Leave")]  # the footer shows the first: q

    def __init__(self, entries: Sequence[RegistryEntry]):
        super().__init__()
        self.entries = list(entries)

    def compose(self) -> ComposeResult:
        title = Lines(id="pick-title")
        title.show([line((f"{len(self.entries)} live runs: which one to attach to? "
                          "(Enter attaches, q or Esc leaves)", "bold"))])
        yield title
        now = time.time()
        sep = glyphs.pick().sep
        runs = RunList(id="pick-runs")
        runs.show_lines([(option_lines(e, now, sep), e["run_id"]) for e in self.entries],
                        line(("no live run", "bright_black")))
        yield runs
        yield Footer()

    def on_mount(self) -> None:
        ol = self.query_one(OptionList)
        ol.highlighted = 0  # the newest first, as listed: a key moves from there
        ol.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_leave(self) -> None:
        self.dismiss(None)
