"""How the TUI ended, as App.run() returns it to the CLI (cli.tui_launch, cli.attach_nodes):
left while the run goes on, the run stopped from the TUI, or the run over. A module of its
own so tui.actions and tui.view_actions (its mixin) both name it without importing each other."""
from __future__ import annotations

from typing import NamedTuple


class Outcome(NamedTuple):
    kind: str  # "detach" | "stopped" | "finished"
    exit_code: int | None
