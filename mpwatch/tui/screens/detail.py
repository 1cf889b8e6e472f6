"""The detail view of one worker (Enter): loss plot of all ranks with this one
highlighted, the tail of its stdout and stderr, its latest stack dump, its children.

Data is fetched on a worker thread once a second and posted back as a message; after
the run has ended it comes from the run directory.
"""
from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from mpwatch import stackfmt
from mpwatch.tui import rundata, view
from mpwatch.tui.widgets.loss_plot import LossPlot

LOG_LINES = 12
OVERLAY_RANKS = 16  # at most this many curves besides the selected one


@dataclass(frozen=True)
class DetailData:
    series: dict
    stdout: list
    stderr: list
    dump: str


class DetailLoaded(Message):
    def __init__(self, data: DetailData):
        super().__init__()
        self.data = data


def _dump_text(dump: str) -> Text:
    """The stack dump, with each thread's innermost frame of the user's own code marked."""
    lines = dump.splitlines()
    if not lines:
        return Text("no stack dump yet (press d to take one)", style="bright_black")
    marked = stackfmt.user_frame_lines(dump)
    text = Text(no_wrap=True, overflow="ellipsis")
    for i, line in enumerate(lines):
        if i:
            text.append("\n")
        text.append(("> " + line.lstrip()) if i in marked else line, style="bold reverse" if i in marked else "")
    return text


def _plain(lines, empty: str) -> Text:
    if not lines:
        return Text(empty, style="bright_black")
    return Text("\n".join(lines), no_wrap=True, overflow="ellipsis")


class DetailScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,enter", "close", "Back"),
                Binding("p", "app.pause", "Pause/resume"), Binding("d", "app.dump", "Dump stacks"),
                Binding("k", "app.kill", "Kill"), Binding("r", "app.restart", "Restart"),
                Binding("l", "app.logs", "Logs")]

    def __init__(self, rank: int):
        super().__init__()
        self.rank = rank
        self.loads = 0

    def compose(self) -> ComposeResult:
        yield Static(id="detail-title")
        yield LossPlot(self.app.glyphs, id="detail-plot")
        with Horizontal(id="detail-logs"):
            with VerticalScroll(classes="pane"):
                yield Static("stdout", classes="pane-title")
                yield Static(id="detail-stdout")
            with VerticalScroll(classes="pane"):
                yield Static("stderr", classes="pane-title")
                yield Static(id="detail-stderr")
        with Horizontal(id="detail-bottom"):
            with VerticalScroll(classes="pane"):
                yield Static("latest stack dump", classes="pane-title")
                yield Static(id="detail-dump")
            with VerticalScroll(classes="pane"):
                yield Static("children", classes="pane-title")
                yield Static(id="detail-children")
        yield Footer()

    def worker(self) -> dict | None:
        st = self.app.status
        return next((w for w in st.get("workers", []) if w["rank"] == self.rank), None) if st else None

    def on_mount(self) -> None:
        self.show_worker()
        self.reload()
        self.set_interval(1.0, self.reload)

    def show_worker(self) -> None:
        w = self.worker()
        title = self.query_one("#detail-title", Static)
        if w is None:
            title.update(Text(f"rank {self.rank}: no longer in the run", style="bold red"))
            return
        g = self.app.glyphs
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f"rank {w['rank']} ", style="bold")
        t.append(f"{g.state.get(w['state'], '?')} {w['state']}", style=view.STATE_STYLE.get(w["state"], ""))
        t.append(f"  pid {w.get('pid')}  step {view.fmt_num(w.get('step')) or '-'}"
                 f"  loss {view.fmt_num(w.get('loss')) or '-'}  restarts {w.get('restarts', 0)}")
        note = view.note_text(w)
        if note:
            t.append(f"\n{note}", style="yellow")
        title.update(t)
        kids = w.get("children") or []
        body = "\n".join(f"{c.get('pid')}  {c.get('status', '')}  cpu {c.get('cpu_percent', '-')}%  "
                         f"rss {view.fmt_bytes(c.get('rss_bytes'))}  {c.get('cmd') or c.get('name') or ''}"
                         for c in kids)
        self.query_one("#detail-children", Static).update(_plain(body.splitlines(), "no child processes"))

    def reload(self) -> None:
        w = self.worker()
        ranks = [self.rank] + [x["rank"] for x in (self.app.status or {}).get("workers", [])
                               if x["rank"] != self.rank][:OVERLAY_RANKS]
        dump_path = w.get("last_dump") if w else None
        self.run_worker(lambda: self._fetch(ranks, dump_path), thread=True, group="detail", exclusive=True)

    def _fetch(self, ranks, dump_path) -> None:
        app = self.app
        live = app.live
        series = rundata.histories(app.source, app.run_dir, ranks, live)
        out = rundata.log_tail(app.source, app.run_dir, self.rank, "stdout", LOG_LINES, live)
        err = rundata.log_tail(app.source, app.run_dir, self.rank, "stderr", LOG_LINES, live)
        dump = rundata.read_dump(dump_path, app.run_dir)
        self.post_message(DetailLoaded(DetailData(series, out, err, dump)))

    def on_detail_loaded(self, msg: DetailLoaded) -> None:
        d = msg.data
        self.loads += 1
        self.show_worker()
        self.query_one(LossPlot).set_data(d.series, self.rank)
        self.query_one("#detail-stdout", Static).update(_plain(d.stdout, "(empty)"))
        self.query_one("#detail-stderr", Static).update(_plain(d.stderr, "(empty)"))
        self.query_one("#detail-dump", Static).update(_dump_text(d.dump))

    def action_close(self) -> None:
        self.dismiss(None)
