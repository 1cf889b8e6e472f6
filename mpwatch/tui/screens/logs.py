"""The logs of the selected worker: stdout or stderr (Tab switches), refreshed each second.
It opens on the stream that has something to show: stdout first, but a failed rank's stderr
(its traceback) first. Loaded on a worker thread; drawn on the UI thread."""
from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Footer

from mpwatch.contract import State
from mpwatch.tui import rundata
from mpwatch.tui.actions import RunActions
from mpwatch.tui.render.segs import cell, line
from mpwatch.tui.widgets.lines import LineLog, Lines

LINES = 500
STREAMS = ("stdout", "stderr")


def first_stream(out: list[str], err: list[str], failed: bool) -> str:
    """The stream to open on: the one with lines, stdout first, a failed rank's stderr first;
    stdout when both are empty."""
    order = ((err, "stderr"), (out, "stdout")) if failed else ((out, "stdout"), (err, "stderr"))
    return next((name for lines, name in order if lines), "stdout")


@dataclass
class LogsLoaded(Message):
    stream: str
    lines: list[str]


class LogsScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,l", "close", "Back"), Binding("tab,o", "switch", "stdout/stderr")]

    def __init__(self, rank: int, stream: str | None = None):
        super().__init__()
        self.rank = rank
        self.stream = stream  # None until the first load chose it (first_stream)
        self._shown: list[str] | None = None
        self.loads = 0

    def compose(self) -> ComposeResult:
        yield Lines(id="logs-title")
        yield LineLog(id="logs-body", wrap=False, markup=False, highlight=False, max_lines=LINES)
        yield Footer()

    def on_mount(self) -> None:
        self._title()
        self.reload()
        self.set_interval(1.0, self.reload)

    def _title(self) -> None:
        if self.stream is None:
            text = f"rank {self.rank} logs (reading them; Esc: back)"
        else:
            text = (f"rank {self.rank} {self.stream} (last {LINES} lines; Tab: "
                    f"{'stdout' if self.stream == 'stderr' else 'stderr'}, Esc: back)")
        self.query_one("#logs-title", Lines).show([line((text, "bold"))])

    def reload(self) -> None:
        stream, app = self.stream, self.app
        assert isinstance(app, RunActions)  # this screen is pushed by the mpwatch App only
        w = app.worker(self.rank)
        failed = w is not None and w["state"] == State.FAILED

        def load() -> None:
            tails = {s: rundata.log_tail(app.source, app.run_dir, self.rank, s, LINES, app.live)
                     for s in ((stream,) if stream is not None else STREAMS)}
            chosen = stream or first_stream(tails["stdout"], tails["stderr"], failed)
            self.post_message(LogsLoaded(chosen, tails[chosen]))
        self.run_worker(load, thread=True, group="logs", exclusive=True)

    def on_logs_loaded(self, msg: LogsLoaded) -> None:
        if self.stream is None:  # the first load chose it
            self.stream = msg.stream
            self._title()
        if msg.stream != self.stream or msg.lines == self._shown:
            return
        self.loads += 1
        log = self.query_one(LineLog)
        log.clear()
        log.write_lines([cell(t) for t in msg.lines or ["(empty)"]])
        self._shown = msg.lines

    def action_switch(self) -> None:
        if self.stream is None:  # not chosen yet: Tab waits for the first load
            return
        self.stream = "stdout" if self.stream == "stderr" else "stderr"
        self._shown = None
        self._title()
        self.reload()

    def action_close(self) -> None:
        self.dismiss(None)
