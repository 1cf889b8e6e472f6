"""The logs of the selected worker: stdout or stderr (Tab switches), refreshed each second."""
from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Footer, RichLog, Static

from mpwatch.tui import rundata
from mpwatch.tui.actions import RunActions

LINES = 500


@dataclass
class LogsLoaded(Message):
    stream: str
    lines: list[str]


class LogsScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,l", "close", "Back"), Binding("tab,o", "switch", "stdout/stderr")]

    def __init__(self, rank: int, stream: str = "stderr"):
        super().__init__()
        self.rank = rank
        self.stream = stream
        self._shown: list[str] | None = None
        self.loads = 0

    def compose(self) -> ComposeResult:
        yield Static(id="logs-title")
        yield RichLog(id="logs-body", wrap=False, markup=False, highlight=False, max_lines=LINES)
        yield Footer()

    def on_mount(self) -> None:
        self._title()
        self.reload()
        self.set_interval(1.0, self.reload)

    def _title(self) -> None:
        self.query_one("#logs-title", Static).update(
            Text(f"rank {self.rank} {self.stream} (last {LINES} lines; Tab: "
                 f"{'stdout' if self.stream == 'stderr' else 'stderr'}, Esc: back)", style="bold"))

    def reload(self) -> None:
        stream, app = self.stream, self.app
        assert isinstance(app, RunActions)  # this screen is pushed by the mpwatch App only
        self.run_worker(lambda: self.post_message(LogsLoaded(stream, rundata.log_tail(
            app.source, app.run_dir, self.rank, stream, LINES, app.live))),
            thread=True, group="logs", exclusive=True)

    def on_logs_loaded(self, msg: LogsLoaded) -> None:
        if msg.stream != self.stream or msg.lines == self._shown:
            return
        self.loads += 1
        log = self.query_one(RichLog)
        log.clear()
        for line in msg.lines or ["(empty)"]:
            log.write(Text(line))
        self._shown = msg.lines

    def action_switch(self) -> None:
        self.stream = "stdout" if self.stream == "stderr" else "stderr"
        self._shown = None
        self._title()
        self.reload()

    def action_close(self) -> None:
        self.dismiss(None)
