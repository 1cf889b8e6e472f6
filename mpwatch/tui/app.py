"""The mpwatch App: the main screen, wired to a data source (sources.source).

A Poller thread posts snapshots; on_snapshot_ready applies them inside batch_update, diffing
rows so only changed cells are touched. The keys are tui.keys' table; what they do is in
tui.actions (the App's base class). Everything here runs on the UI thread.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path

from textual import events
from textual.app import ComposeResult, SystemCommand
from textual.screen import Screen

from mpwatch.contract import Event, EventFields, RunState, State, Status, devices
from mpwatch.sources.source import Source
from mpwatch.text import eventtext
from mpwatch.tui import keys, priority
from mpwatch.tui.actions import RunActions
from mpwatch.tui.outcome import Outcome
from mpwatch.tui.poller import INTERVAL_S, Poller, PollFailed, RunGone, SnapshotReady
from mpwatch.tui.render import control_rows, findings, gpu_rows, node_rows, view
from mpwatch.tui.render.glyphs import Glyphs
from mpwatch.tui.render.segs import Line, cell
from mpwatch.tui.screens.alerts import AlertsScreen
from mpwatch.tui.screens.detail import DetailScreen
from mpwatch.tui.screens.events import EventsScreen
from mpwatch.tui.screens.gpu import GpuScreen
from mpwatch.tui.screens.help import HelpScreen
from mpwatch.tui.screens.logs import LogsScreen
from mpwatch.tui.screens.tunables import TunablesScreen
from mpwatch.tui.widgets.cells import toast
from mpwatch.tui.widgets.gpu_panel import AlertLines, GpuPanel
from mpwatch.tui.widgets.header import RunHeader
from mpwatch.tui.widgets.keys_footer import KeysFooter
from mpwatch.tui.widgets.lines import Lines
from mpwatch.tui.widgets.worker_table import WorkerTable

__all__ = ["MpwatchApp", "Outcome"]
MAX_NOTICES = 3  # per snapshot; the rest are summed up in one line
SMALL_H = 20  # a terminal this short keeps its rows for the table
# Toasts only where they leave the table in view; the status line says everything anyway.
TOAST_W, TOAST_H = 120, 36
EVENTS_KEPT = 1000  # events the TUI keeps for its events screen (as many as the supervisor's recent events)

class MpwatchApp(RunActions):
    CSS_PATH = "app.tcss"
    TITLE = "mpwatch"
    ENABLE_COMMAND_PALETTE = True
    KEYS: tuple[keys.Key, ...] = keys.LIVE  # what the help and the palette offer (tui.keys)
    BINDINGS = list(keys.LIVE)

    def __init__(self, source: Source | None, run_dir: Path | str | None = None, *,
                 glyphs: Glyphs, interval: float = INTERVAL_S, notices: bool = True):
        super().__init__(source, run_dir, glyphs)
        self.interval = interval
        self.notices = notices
        self.snapshots = 0  # applied snapshots, for tests and the bench
        self.messages: list[tuple[str, str]] = []  # everything said to the user
        self.header = RunHeader(id="header")
        self.gpu_panel = GpuPanel(id="gpus")
        self.alert_lines = AlertLines(id="alerts")
        # the plain texts: the banner (an ended run, a replay's notes), the selected worker, the status line
        self.banner = Lines(id="banner", wrap=True)
        self.selected_line, self.status_line = (Lines(id=name, fixed=True) for name in ("selected-line",
                                                                                        "status-line"))
        self._told_exit: dict[int | None, int | None] = {}  # rank -> pid of the last exit a notice told of
        self._selected_shown: Line | None = None
        self._multi_node = False  # a merged view of several nodes: the NODE column
        self._has_gpus = True  # the status has GPU data (a replay without any has no GPU column)
        self._has_pace = False  # a rank has had a pace (the PACE column, from then on)
        self._mig = False  # a GPU has MIG slices: a wider GPU column
        # every event received, the first snapshot's too (events screen)
        self.event_log: list[EventFields] = []
        self._group_nice: int | None = None  # the session's scheduling group's nice before the TUI's

    # ---------------------------------------------------------------- layout ----
    def compose(self) -> ComposeResult:
        # Kept as attributes: app.query_one searches the active screen, which may be a dialog.
        yield from (self.header, self.banner, self.table, self.selected_line, self.gpu_panel,
                    self.alert_lines, self.status_line)
        yield KeysFooter()

    def on_mount(self) -> None:
        self.set_class(self.size.height < SMALL_H, "small")
        self._set_columns(self.size.width)
        self.table.focus()
        self.say("connecting to the run", "information", notify=False)
        if not self.is_headless:  # a terminal's TUI beside a busy run: its keys first (tui.priority)
            self._group_nice = priority.raise_own()
        if self.source is not None:
            self.poller = Poller(self.source, self, self.interval)
            self.poller.start()

    def on_unmount(self) -> None:
        priority.restore(self._group_nice)
        if self.poller is not None:
            self.poller.stop()
        close = getattr(self._act_source, "close", None)
        if self._act_source is not self.source and close is not None:
            close()

    def on_resize(self, event: events.Resize) -> None:
        self.set_class(event.size.height < SMALL_H, "small")
        self._set_columns(event.size.width)
        self.refresh_view()

    def _set_columns(self, width: int) -> None:
        cols = view.columns(width, nodes=self._multi_node, replay=self.READ_ONLY, gpus=self._has_gpus,
                            pace=self._has_pace, mig=self._mig)
        if cols != self.table.cols:
            self.table.set_columns(cols)
            self.refresh_view()

    # -------------------------------------------------------------- snapshots ----
    def _showing(self) -> bool:
        """The app has a screen to show a poller's message on: a message posted as the app quits
        lands after its screens are gone (a RunGone as the source closes under the poller)."""
        return self.is_running and bool(self.screen_stack)

    def on_snapshot_ready(self, msg: SnapshotReady) -> None:
        if not self._showing():
            return
        try:
            first = self.snapshots == 0
            self.keep_events(msg.snapshot.events)
            self.apply_status(msg.snapshot.status)
            if first:
                self.say(f"watching run {msg.snapshot.status['run']['id']}: "
                         "? for keys, g for GPUs, q to leave", "information", notify=False)
            else:
                self._notices(msg.snapshot.events)
        finally:
            if self.poller is not None:
                self.poller.applied.set()

    def apply_status(self, status: Status) -> None:
        old, self.status = self.status, status
        self.snapshots += 1
        news = control_rows.news(old, status) if old else []
        for text, severity in node_rows.changes(old, status) + news:
            self.say(text, severity)
        mig = any("slices" in gpu for gpu in status["gpus"])
        paced = self._has_pace or any(w["pace"] for w in status["workers"])
        now = (node_rows.multi(status), bool(status["gpus"]), mig, paced)
        if now != (self._multi_node, self._has_gpus, self._mig, self._has_pace):
            self._multi_node, self._has_gpus, self._mig, self._has_pace = now
            self._set_columns(self.size.width)
        self.refresh_view()

    def refresh_view(self) -> None:
        st = self.status
        if st is None or not self.table.cols:
            return
        g = self.glyphs
        width, height = self.size.width, self.size.height
        small = height < SMALL_H  # the table keeps its rows: one GPU line, one alert, no sort line
        gpu_rows_n = len(devices(st["gpus"]))  # a GPU in MIG mode has a row per slice too
        gpu_fit = 1 if small else min(gpu_rows_n + bool(st["gpu_status"] and st["gpus"]),
                                      max(2, height // 5)) or 1
        gpu_width = width - 2 - (1 if gpu_rows_n > gpu_fit else 0)
        with self.batch_update():
            head = view.header_lines(st, g, sort=self.sort, filter_text=self.filter_text,
                                     finished=not self.live)
            self.header.show(head[:-1] if small and self.sort == "rank" and not self.filter_text else head)
            self.table.apply(view.table_rows(st, folded=self.folded, filter_text=self.filter_text,
                                             sort=self.sort))
            self.gpu_panel.show(gpu_rows.gpu_rows(st, g, gpu_width),
                                cell(gpu_rows.title(st, g, width, gpu_fit)), gpu_fit)
            self.alert_lines.show(findings.finding_lines(st, g, width - 2, findings.budget(height, small)))
            self._show_selected()
        if isinstance(self.screen, (DetailScreen, GpuScreen, TunablesScreen, AlertsScreen)):
            self.screen.show_status()

    def keep_events(self, recs: Iterable[EventFields]) -> None:
        last = self.event_log[-1].get("seq", 0) if self.event_log else 0
        self.event_log += [r for r in recs if r.get("seq", last + 1) > last]
        del self.event_log[:-EVENTS_KEPT]

    def _notices(self, recs: Iterable[EventFields]) -> None:
        """What the new events say, on the status line (and as toasts where there is room).
        A new finding's notice is its headline, on the status line only: the finding is whole
        under the table, where a toast would cover it (tui.render.findings)."""
        notes: list[tuple[str, eventtext.Severity, bool]] = []
        recs = list(recs)
        exits = [rec for rec in recs if rec["event"] == Event.WORKER_EXITED]
        for rec in exits:
            self._told_exit[rec["rank"]] = rec.get("pid")
        for rec in recs:
            if len(exits) > 1 and rec["event"] == Event.WORKER_EXITED:
                if rec is exits[0]:  # ranks that end together (a process group failing at once): one notice
                    notes.append((*eventtext.exits_notice(exits), True))
                continue
            note = eventtext.notice(rec)
            if note is not None:
                notes.append((*note, rec["event"] not in (Event.ALERT, Event.GPU_ALERT)))
        for text, sev, popup in notes[:MAX_NOTICES]:
            self.say(text, sev, notify=popup)
        if len(notes) > MAX_NOTICES:
            self.say(f"and {len(notes) - MAX_NOTICES} more events (see the table, or e)", "warning")

    def on_poll_failed(self, msg: PollFailed) -> None:
        if not self._showing():
            return
        text = f"cannot read the run's status: {msg.why}"
        if not self.messages or self.messages[-1][0] != text:
            self.say(text, "error")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The keys that act leave the footer once the run has ended (a replay says why, pressed)."""
        return not (action in keys.ACTING and self.source is not None and not self.live)

    def on_run_gone(self, msg: RunGone) -> None:
        self.live = False
        if not self._showing():
            return
        self.refresh_bindings()
        final, info = msg.final, msg.info or {}
        code = info.get("exit_code") if info.get("finished") else None
        if final is not None:
            code = final["run"]["exit_code"] if code is None else code
            run = final["run"].copy()
            run["exit_code"], run["state"] = code, RunState.FINISHED
            final = final.copy()
            final["run"] = run
            self.apply_status(final)
            # A worker that failed after the last poll (the run ended in between): say so now.
            for w in final["workers"]:
                if w["state"] in (State.FAILED, State.KILLED) and self._told_exit.get(w["rank"]) != w["pid"]:
                    self.say(f"rank {w['rank']} {w['state']}: {w['cause']}",
                             "error" if w["state"] == State.FAILED else "warning")
            lines = view.ending_lines(final, eventtext.first_failure(self.event_log))
            self.say(lines[0], "information" if code == 0 else "error", notify=False)  # the banner says it
        else:
            lines = [f"lost the connection to the run ({msg.why}); "
                     f"its files are in {self.run_dir or 'its run directory'}; press q to leave"]
            self.say(lines[0], "error", notify=False)  # the banner says it
            self.refresh_view()
        self.final_exit_code = code
        self.banner.show([cell(t) for t in lines])
        self.banner.add_class("shown")
        if self.leaving == "stop":
            self.exit(Outcome("stopped", code))

    # ---------------------------------------------------------------- telling ----
    def say(self, text: str, severity: str = "information", notify: bool = True) -> None:
        """Tell the user: the status line always, a notification too when asked. The status
        line's and the toasts' one way in: the text through the sanitiser here."""
        lines = [cell(t) for t in text.splitlines()] or [cell("")]
        said = lines[0]
        self.messages.append((text, severity))
        del self.messages[:-200]
        status = self.status_line
        status.show([said])
        status.set_class(severity == "error", "error")
        status.set_class(severity == "warning", "warning")
        if notify and self.notices and self.size.width >= TOAST_W and self.size.height >= TOAST_H:
            toast(self, lines, "error" if severity == "error" else "warning" if severity == "warning"
                  else "information", timeout=8 if severity == "error" else 4)

    def _show_selected(self) -> None:
        line = view.selected_line(self.worker(self.table.selected_rank()), self.glyphs)
        if line != self._selected_shown:
            self._selected_shown = line
            self.selected_line.show([line])  # one line, always

    # --------------------------------------------------------------- screens ----
    def action_cursor_down(self) -> None:
        self.table.action_cursor_down()

    def on_worker_table_row_highlighted(self, event: WorkerTable.RowHighlighted) -> None:
        self._show_selected()

    def on_worker_table_row_selected(self, event: WorkerTable.RowSelected) -> None:
        self.action_detail()

    def action_detail(self) -> None:
        self._open_on_selected(DetailScreen)

    def action_logs(self) -> None:
        self._open_on_selected(LogsScreen)

    def _open_on_selected(self, screen: Callable[[int], Screen[None]]) -> None:
        """A screen of the selected worker (its detail, its logs); a warning where none is."""
        rank = self.table.selected_rank()
        if rank is None:
            self.say("no worker selected", "warning")
            return
        self.push_screen(screen(rank))

    def action_events(self) -> None:
        started = self.status["run"]["started"] if self.status is not None else None
        self.push_screen(EventsScreen(self.event_log, started))

    def action_gpus(self) -> None:
        if self.status is not None and not self.status["gpus"]:
            self.say(f"no GPU to show: {self.status['gpu_status'] or 'no NVIDIA GPU found'}", "warning")
            return
        self.push_screen(GpuScreen())

    def action_tunables(self) -> None:
        self.push_screen(TunablesScreen())

    def action_alerts(self) -> None:
        self.push_screen(AlertsScreen())

    def offered_keys(self) -> list[keys.Key]:
        """The keys the help and the palette offer: the table's, less those that act where
        nothing can be acted on (a replay, a run that has ended)."""
        return keys.offered(self.KEYS, self.can_act)

    def action_help(self) -> None:
        rows = [(self.get_key_display(k), keys.said(k, self.can_act)) for k in self.offered_keys()]
        self.push_screen(HelpScreen(self.glyphs, rows, can_act=self.can_act))

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """Textual's own commands (but its Quit, which would leave without the quit dialog),
        then every key offered, by its name (tui.keys)."""
        yield from (c for c in super().get_system_commands(screen) if c.callback != self.action_quit)
        for k in self.offered_keys():
            yield SystemCommand(k.description, f"{keys.said(k, self.can_act)} ({self.get_key_display(k)})",
                                partial(self.run_action, k.action))
