"""The detail view of one worker (Enter): its pace (seconds a step, each phase and its speed
against the other ranks), the loss plot of all ranks with this one highlighted (on the log scale
where the loss spans 10x; `y` switches), its latest profile once one was asked (`o`: where it
stands, where its trace is, its top operators by self time), the end of its stdout and stderr,
its latest stack dump (the main thread first, mpwatch's threads folded, one line a frame), its
children.

Data is fetched on a worker thread once a second and posted back as a message; after the
run has ended it comes from the run directory. Drawing runs on the UI thread.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message

from mpwatch.contract import WorkerStatus
from mpwatch.tui import keys, rundata
from mpwatch.tui.render import detail_text, pace
from mpwatch.tui.render.segs import cell, line
from mpwatch.tui.screens.run_screen import RunScreen
from mpwatch.tui.widgets.cells import toast
from mpwatch.tui.widgets.keys_footer import KeysFooter
from mpwatch.tui.widgets.lines import Lines
from mpwatch.tui.widgets.loss_plot import LossPlot

LOG_LINES = 40  # the most a log box shows: the file's last lines, as many as fit
OVERLAY_RANKS = 16  # at most this many curves besides the selected one
TOP_SHOWN = (4, 8)  # operators of a profile the view lists, on a short and a tall screen (the trace has all)
TALL = 40  # rows from which a screen is tall


@dataclass(frozen=True)
class DetailData:
    series: dict[int, list[tuple[float, float]]]
    stdout: list[str]
    stderr: list[str]
    dump: str


@dataclass
class DetailLoaded(Message):
    data: DetailData


def _pane(title: str, body: Lines) -> VerticalScroll:
    """A box of the view: its title over its body, which scrolls."""
    return VerticalScroll(Lines(cell(title), classes="pane-title"), body, classes="pane")


class DetailScreen(RunScreen):
    BINDINGS = list(keys.DETAIL)

    def __init__(self, rank: int):
        super().__init__()
        self.rank = rank
        self.loads = 0
        self.title_bar = Lines(id="detail-title")
        self.pace_line = Lines(id="detail-pace")
        self.profile_pane = Lines(id="detail-profile")
        self.children_pane = Lines(id="detail-children")

    def compose(self) -> ComposeResult:
        yield self.title_bar
        yield self.pace_line
        yield LossPlot(self.run.glyphs, id="detail-plot")
        yield self.profile_pane
        yield Horizontal(_pane("stdout", Lines(id="detail-stdout")),
                         _pane("stderr", Lines(id="detail-stderr")), id="detail-logs")
        yield Horizontal(_pane("latest stack dump", Lines(id="detail-dump")),
                         _pane("children", self.children_pane), id="detail-bottom")
        yield KeysFooter()  # whole keys only: at 80 columns it cut 'l Logs' to 'l Log'

    def worker(self) -> WorkerStatus | None:
        return self.run.worker(self.rank)

    def on_mount(self) -> None:
        self.show_status()
        self.reload()
        self.set_interval(1.0, self.reload)

    def show_status(self) -> None:
        w = self.worker()
        if w is None:
            self.title_bar.show(detail_text.gone_lines(self.rank))
            return
        g = self.run.glyphs
        self.title_bar.show(detail_text.title_lines(w, g))
        style = "" if w["pace"] else "bright_black"
        self.pace_line.show([line((t, style)) for t in pace.pace_text(w, g).split("\n")])
        st = self.run.status
        top_n = TOP_SHOWN[self.size.height >= TALL]
        prof = detail_text.profile_lines(w, (st.get("profiles") or []) if st is not None else [], top_n)
        self.profile_pane.display = prof is not None
        if prof is not None:
            self.profile_pane.show(prof)
        self.children_pane.show(detail_text.children_lines(w))

    def reload(self) -> None:
        w = self.worker()
        st = self.run.status
        ranks = [self.rank] + [x["rank"] for x in (st["workers"] if st else []) if x["rank"] != self.rank]
        dump_path = w["last_dump"] if w else None
        if dump_path and st and self.run.run_dir:  # under the run directory: read it from ours
            try:
                dump_path = str(Path(dump_path).relative_to(st["run"]["dir"]))
            except ValueError:
                pass
        self.run_worker(lambda: self._fetch(ranks[:OVERLAY_RANKS + 1], dump_path), thread=True,
                        group="detail", exclusive=True)

    def _fetch(self, ranks: list[int], dump_path: str | None) -> None:
        app = self.run
        live = app.live
        series = rundata.histories(app.source, app.run_dir, ranks, live)
        out = rundata.log_tail(app.source, app.run_dir, self.rank, "stdout", LOG_LINES, live)
        err = rundata.log_tail(app.source, app.run_dir, self.rank, "stderr", LOG_LINES, live)
        dump = rundata.read_dump(dump_path, app.run_dir)
        self.post_message(DetailLoaded(DetailData(series, out, err, dump)))

    def on_detail_loaded(self, msg: DetailLoaded) -> None:
        d = msg.data
        self.loads += 1
        self.show_status()
        self.query_one(LossPlot).set_data(d.series, self.rank)
        self._show_log("stdout", d.stdout)
        self._show_log("stderr", d.stderr)
        self.query_one("#detail-dump", Lines).show(detail_text.dump_lines(d.dump, self.run.can_act))

    def _show_log(self, stream: str, lines: list[str]) -> None:
        """The file's last lines, as many as the box shows below its title: its end in view,
        never the start of a longer tail (the logs view, `l`, has the rest)."""
        body = self.query_one(f"#detail-{stream}", Lines)
        box = body.parent
        room = box.scrollable_content_region.height - 1 if isinstance(box, VerticalScroll) else 0
        body.show(detail_text.plain_lines(lines[-max(room, 1):], "(empty)"))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The keys that act leave the footer where nothing can act (a replay, an ended run)."""
        return self.run.can_act or action != "act"

    def action_act(self, name: str) -> None:
        """A key that acts on this worker: the App's action of that name (it asks first where it must)."""
        getattr(self.run, f"action_{name}")()

    def action_log_scale(self) -> None:
        log = self.query_one(LossPlot).toggle_log()
        toast(self.app, [cell(f"loss plot: {'log' if log else 'linear'} scale")], "information", timeout=2)

    def action_close(self) -> None:
        self.dismiss(None)
