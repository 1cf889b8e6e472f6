"""The App around tui.screens.pick_run: `mpwatch attach` asks which run, then attaches to the
chosen one (cli.live). Returns the run id, or None when the user left. UI thread."""
from __future__ import annotations

from collections.abc import Sequence

from textual.app import App

from mpwatch.rundir.registry import RegistryEntry
from mpwatch.tui.screens.pick_run import PickRunScreen


class RunPicker(App[str | None]):
    TITLE = "mpwatch attach"
    ENABLE_COMMAND_PALETTE = False
    CSS = "#pick-title { height: 1; padding: 0 1; background: $boost; } #pick-runs { height: 1fr; }"

    def __init__(self, entries: Sequence[RegistryEntry]):
        super().__init__()
        self.entries = list(entries)

    def on_mount(self) -> None:
        self.push_screen(PickRunScreen(self.entries), self.exit)
