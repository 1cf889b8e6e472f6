"""The GPU screen (`g`): per GPU, memory over time stacked by rank with the capacity line,
utilization, and markers (a GPU in MIG mode: per MIG slice, memory and markers: MIG reports no
utilization); then the ranks' memory as torch and NVML see it, the processes
outside the run, and every alert with its full text and hint. `w` switches the window
(2 min, 10 min, 1 h). The timeline is fetched on a worker thread every 2 s (the
`gpu_timeline` control command); the tables follow each status the App applies.
"""
from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Footer

from mpwatch.contract import DevKey, GpuMark, GpuTick, GpuTimelineReply, GpuView, Status, dev_key
from mpwatch.sources.local import ClientError
from mpwatch.tui.render import gpu_charts, gpu_tables
from mpwatch.tui.render.glyphs import Glyphs
from mpwatch.tui.render.gpu_rows import own_ranks
from mpwatch.tui.render.segs import Line, cell, line
from mpwatch.tui.screens.run_screen import RunScreen
from mpwatch.tui.widgets.lines import Lines

RELOAD_S = 2.0
MARK_LINES = 3  # the latest marks of each GPU, as text


@dataclass
class TimelineLoaded(Message):
    window: float
    timeline: GpuTimelineReply | None
    why: str | None  # why there is no timeline


def chart_lines(status: Status, timeline: GpuTimelineReply | None, why: str | None, window: float, width: int,
                tall: bool, g: Glyphs) -> list[Line]:
    """Every GPU's heading and charts (pure)."""
    out: list[Line] = gpu_charts.legend(g)
    ticks = timeline["ticks"] if timeline else []
    marks = timeline["marks"] if timeline else []
    now = ticks[-1]["ts"] if ticks else gpu_tables.now_of(status)
    for gpu in status["gpus"]:
        out.append(())
        out.append(gpu_tables.gpu_heading(gpu, g))
        out += gpu_tables.gpu_notes(gpu)
        slices = gpu.get("slices") or []
        if not ticks:
            for s in slices:
                out += [gpu_tables.slice_heading(s, g), *gpu_tables.gpu_notes(s, "      ")]
            out.append(line((f"  no timeline: {why or 'no samples yet'}", "bright_black")))
            continue
        if not slices:
            out += _charts(gpu, dev_key(gpu), ticks, marks, (now, window, width), 6 if tall else 4,
                           3 if tall else 2, g)
        for s in slices:  # MIG: no utilization to chart
            out += [gpu_tables.slice_heading(s, g), *gpu_tables.gpu_notes(s, "      ")]
            out += _charts(s, dev_key(s), ticks, marks, (now, window, width), 4 if tall else 3, 0, g)
    return out


def _charts(v: GpuView, key: DevKey, ticks: list[GpuTick], marks: list[GpuMark],
            span: tuple[float, float, int], mem_h: int, util_h: int, g: Glyphs) -> list[Line]:
    """One device's charts: its ranks, memory, utilization (util_h rows; 0: none), marks."""
    now, window, width = span
    out = [gpu_charts.rank_legend(own_ranks(v), g, "MIG slice" if "mig" in v else "GPU")]
    out += gpu_charts.memory_chart(ticks, key, now, window, width, mem_h, g)
    if util_h:
        out += gpu_charts.util_chart(ticks, key, now, window, width, util_h, g)
    out.append(gpu_charts.marks_line(marks, key, now, window, width, g))
    out.append(gpu_charts.time_axis(window, width))
    out += gpu_charts.recent_marks(marks, key, now, window, MARK_LINES)
    return out


class GpuScreen(RunScreen):
    BINDINGS = [Binding("escape,q,g", "close", "Back"), Binding("w", "window", "Window")]

    def __init__(self) -> None:
        super().__init__()
        self.window_i = 0
        self.timeline: GpuTimelineReply | None = None
        self.why: str | None = None
        self.loads = 0  # timelines received, for tests
        self.charts = Lines(id="gpu-charts")
        self.ranks = Lines(id="gpu-ranks")
        self.outside = Lines(id="gpu-outside")
        self.alerts = Lines(id="gpu-alerts")
        self.title_bar = Lines(id="gpu-title")
        self.body = VerticalScroll(id="gpu-body")

    @property
    def window(self) -> float:
        return gpu_charts.WINDOWS[self.window_i]

    def compose(self) -> ComposeResult:
        yield self.title_bar
        with self.body:
            yield self.charts
            yield Lines(cell("ranks: torch's allocator (ALLOC, RSRV reserved, PEAK) and NVML "
                             "(GAP = NVML - RSRV, FRAG = RSRV - ALLOC)"), classes="pane-title")
            yield self.ranks
            yield Lines(cell("processes outside the run"), classes="pane-title")
            yield self.outside
            yield Lines(cell("alerts"), classes="pane-title")
            yield self.alerts
        yield Footer()

    def on_mount(self) -> None:
        self.body.focus()
        self.show_status()
        self.reload()
        self.set_interval(RELOAD_S, self.reload)

    def show_status(self) -> None:
        st = self.run.status
        # The body always has its scrollbar (app.tcss): the width does not change as it fills.
        width = max(self.body.scrollable_content_region.width or self.size.width - 3, 40)
        g = self.run.glyphs
        name = gpu_charts.window_name(self.window)
        others = ", ".join(gpu_charts.window_name(w) for w in gpu_charts.WINDOWS if w != self.window)
        self.title_bar.show([line((f"GPUs over the last {name} (w: {others}){g.sep}Esc: back", "bold"))])
        if st is None:
            return
        tall = self.size.height >= 40
        self.charts.show(chart_lines(st, self.timeline, self.why, self.window, width, tall, g))
        self.ranks.show(gpu_tables.rank_table(st, width))
        self.outside.show(gpu_tables.outside_table(st, width))
        self.alerts.show(gpu_tables.alert_list(st, g))

    def on_resize(self) -> None:
        self.show_status()

    def reload(self) -> None:
        source, live = self.run.source, self.run.live
        window = self.window

        def fetch() -> None:
            if source is None or not live:
                self.post_message(TimelineLoaded(window, None, "the run has ended"))
                return
            try:
                self.post_message(TimelineLoaded(window, source.gpu_timeline(window), None))
            except ClientError as exc:
                self.post_message(TimelineLoaded(window, None, str(exc)))
        self.run_worker(fetch, thread=True, group="gpu-timeline", exclusive=True, exit_on_error=False)

    def on_timeline_loaded(self, msg: TimelineLoaded) -> None:
        if msg.window != self.window:
            return  # asked for before the window changed
        self.loads += 1
        self.timeline, self.why = msg.timeline, msg.why
        self.show_status()

    def action_window(self) -> None:
        self.window_i = (self.window_i + 1) % len(gpu_charts.WINDOWS)
        self.show_status()
        self.reload()

    def action_close(self) -> None:
        self.dismiss(None)

