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

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.widgets import Static

from mpwatch.contract.status import ProfileRequest, WorkerStatus
from mpwatch.text import fmt, profile_text, stackfmt
from mpwatch.tui import rundata
from mpwatch.tui.render import pace, view
from mpwatch.tui.screens.run_screen import RunScreen
from mpwatch.tui.widgets.keys_footer import KeysFooter
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


def dump_text(dump: str, can_act: bool = True) -> Text:
    """The stack dump, one line a frame, function first: the main thread first, mpwatch's own
    threads folded to one line, the user's frames bright and library frames dim, each thread's
    innermost frame of the user's own code marked with `>` (readable without colour). `d`
    is offered only where it can act (a live run)."""
    if not dump.strip():
        return Text("no stack dump yet (press d to take one)" if can_act else "no stack dump at this moment",
                    style="bright_black")
    procs = stackfmt.stack_view(dump)
    if not procs:  # not a faulthandler dump: as written
        return Text(dump, no_wrap=True, overflow="ellipsis")
    text = Text(no_wrap=True, overflow="ellipsis")
    for proc in procs:
        if text:
            text.append("\n")
        text.append(proc.heading, style="bold")
        for t in proc.threads:
            text.append(f"\n{t.title}", style="bright_black" if t.mpwatch else "bold")
            if t.mpwatch:
                text.append(f": {len(t.frames)} frames folded", style="bright_black")
                continue
            for f in t.frames:
                text.append("\n> " if f.marked else "\n  ", style="bold reverse" if f.marked else "")
                text.append(f.func, style="bold" if f.user else "dim")
                text.append(f"  {f.where}", style="" if f.user else "dim")
        if proc.native:
            text.append("\n" + "\n".join(proc.native), style="dim")
    return text


def profile_view(w: WorkerStatus, profiles: list[ProfileRequest], top_n: int) -> Text | None:
    """The rank's latest profile: the request and where it stands, then its top operators."""
    req = profile_text.latest(profiles, w["rank"])
    if req is None:
        return None
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(profile_text.request_text(req), style="bold")
    state = profile_text.state_text(req, w["rank"], w["step"])
    text.append("\n" + state, style="red" if state.startswith(("failed", "missed")) else "")
    top = profile_text.top_lines(profile_text.result(req, w["rank"]), top_n)
    if top:
        text.append("\n" + top[0], style="bold")
        text.append("\n" + "\n".join(top[1:]))
    return text


def _plain(lines: list[str], empty: str) -> Text:
    if not lines:
        return Text(empty, style="bright_black")
    return Text("\n".join(lines), no_wrap=True, overflow="ellipsis")


class DetailScreen(RunScreen):
    BINDINGS = [Binding("escape,q,enter", "close", "Back"), Binding("y", "log_scale", "Log/linear"),
                Binding("p", "act('pause')", "Pause/resume"), Binding("d", "act('dump')", "Dump stacks"),
                Binding("k", "act('kill')", "Kill"), Binding("r", "act('restart')", "Restart"),
                Binding("l", "app.logs", "Logs")]

    def __init__(self, rank: int):
        super().__init__()
        self.rank = rank
        self.loads = 0
        self.title_bar = Static(id="detail-title")
        self.pace_line = Static(id="detail-pace")
        self.profile_pane = Static(id="detail-profile")
        self.children_pane = Static(id="detail-children")

    def compose(self) -> ComposeResult:
        yield self.title_bar
        yield self.pace_line
        yield LossPlot(self.run.glyphs, id="detail-plot")
        yield self.profile_pane
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
                yield self.children_pane
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
            self.title_bar.update(Text(f"rank {self.rank}: no longer in the run", style="bold red"))
            return
        g = self.run.glyphs
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f"rank {w['rank']} ", style="bold")
        t.append(f"{g.state.get(w['state'], '?')} {w['state']}", style=view.STATE_STYLE.get(w["state"], ""))
        t.append(f"  pid {w['pid']}  step {fmt.num(w['step'], na='-')}  loss {fmt.num(w['loss'], na='-')}"
                 f"  restarts {w['restarts']}")
        gpu = view.gpu_text(w["gpu"])
        if gpu:
            t.append(f"  GPU {gpu}")
        note = view.note_text(w)
        if note:
            t.append(f"\n{note}", style="yellow")
        memory = w.get("memory")
        if memory is not None and memory["snapshot"]:  # at its OOM, or asked with M / ctl memory
            t.append(f"\nCUDA memory snapshot: {memory['snapshot']} (pytorch.org/memory_viz opens it)")
        self.title_bar.update(t)
        self.pace_line.update(Text(pace.pace_text(w, g), style="" if w["pace"] else "bright_black"))
        st = self.run.status
        top_n = TOP_SHOWN[self.size.height >= TALL]
        prof = profile_view(w, (st.get("profiles") or []) if st is not None else [], top_n)
        self.profile_pane.display = prof is not None
        if prof is not None:
            self.profile_pane.update(prof)
        body = [f"{c['pid']}  {c['status']}  cpu {fmt.num(c['cpu_percent'], na='-')}%  "
                f"rss {fmt.size(c['rss_bytes'])}  {c['cmd'] or c['name']}" for c in w["children"]]
        self.children_pane.update(_plain(body, "no child processes"))

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
        self.query_one("#detail-dump", Static).update(dump_text(d.dump, self.run.can_act))

    def _show_log(self, stream: str, lines: list[str]) -> None:
        """The file's last lines, as many as the box shows below its title: its end in view,
        never the start of a longer tail (the logs view, `l`, has the rest)."""
        body = self.query_one(f"#detail-{stream}", Static)
        box = body.parent
        room = box.scrollable_content_region.height - 1 if isinstance(box, VerticalScroll) else 0
        body.update(_plain(lines[-max(room, 1):], "(empty)"))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The keys that act leave the footer where nothing can act (a replay, an ended run)."""
        return self.run.can_act or action != "act"

    def action_act(self, name: str) -> None:
        """A key that acts on this worker: the App's action of that name (it asks first where it must)."""
        getattr(self.run, f"action_{name}")()

    def action_log_scale(self) -> None:
        log = self.query_one(LossPlot).toggle_log()
        self.notify(f"loss plot: {'log' if log else 'linear'} scale", timeout=2)

    def action_close(self) -> None:
        self.dismiss(None)
