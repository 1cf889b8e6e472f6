"""The mpwatch App: the main screen and every key, wired to a data source.

The source is a mpwatch.client.Client (or anything with its methods). A Poller thread
posts snapshots; on_snapshot_ready applies them inside batch_update, diffing rows so only
changed cells are touched. Every control request runs on a worker thread and reports
back with ActionDone, so the UI thread never waits on the socket, and every action
says what happened (the supervisor's message, or why it failed).
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from rich.text import Text
from textual import events
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.message import Message
from textual.widgets import Footer, Static

from mpwatch.client import ClientError
from mpwatch.tui import glyphs as glyphs_mod
from mpwatch.tui import view
from mpwatch.tui.poller import INTERVAL_S, Poller, PollFailed, RunGone, SnapshotReady
from mpwatch.tui.screens.confirm import ConfirmDialog
from mpwatch.tui.screens.detail import DetailScreen
from mpwatch.tui.screens.filter import FilterDialog
from mpwatch.tui.screens.help import HelpScreen
from mpwatch.tui.screens.logs import LogsScreen
from mpwatch.tui.screens.quit import QuitDialog
from mpwatch.tui.widgets.cells import to_text
from mpwatch.tui.widgets.gpu_panel import GpuPanel
from mpwatch.tui.widgets.header import RunHeader
from mpwatch.tui.widgets.worker_table import WorkerTable

WIDE_COLS = 120
MAX_NOTICES = 3  # per snapshot; the rest are summed up in one line
KICK_AFTER_S = 0.1  # after an action's reply, poll this soon (not at a stretched interval)


class Outcome(NamedTuple):
    kind: str  # "detach" | "stopped" | "finished"
    exit_code: int | None


class ActionDone(Message):
    def __init__(self, text: str, severity: str, then: Callable | None = None):
        super().__init__()
        self.text = text
        self.severity = severity
        self.then = then  # called on the UI thread after the message is shown


# (action, title, help) for the command palette; the keys are in BINDINGS and help.
COMMANDS = [
    ("detail", "Detail of the selected worker", "Loss plot, stdout/stderr, stack dump, children (Enter)"),
    ("pause", "Pause / resume the selected worker", "SIGSTOP / SIGCONT its process group (p)"),
    ("pause_all", "Pause / resume all workers", "(P)"),
    ("kill", "Kill the selected worker", "Asks first (k)"),
    ("restart", "Restart the selected worker", "Asks first (r)"),
    ("grow", "Add one worker", "Resize the run by +1 (+)"),
    ("shrink", "Remove one worker", "Resize the run by -1 (-)"),
    ("dump", "Dump stacks of the selected worker", "faulthandler / py-spy (d)"),
    ("logs", "Logs of the selected worker", "stdout and stderr (l)"),
    ("filter", "Filter rows", "By rank, pid, state or cause (/)"),
    ("clear_filter", "Clear the filter", "(Esc)"),
    ("sort", "Sort by the next column", "(s)"),
    ("fold", "Fold / unfold children of the selected worker", "(f)"),
    ("fold_all", "Fold / unfold all children", "(F)"),
    ("help", "Keys", "(?)"),
    ("quit_dialog", "Leave", "Detach, stop the run, or cancel (q)"),
]


class MpwatchApp(App[Outcome]):
    CSS_PATH = "app.tcss"
    TITLE = "mpwatch"
    ENABLE_COMMAND_PALETTE = True
    BINDINGS = [
        Binding("enter", "detail", "Detail", show=False),
        Binding("j", "cursor_down", "Down", show=False),
        Binding("p", "pause", "Pause"),
        Binding("P", "pause_all", "Pause all", show=False),
        Binding("k", "kill", "Kill"),
        Binding("r", "restart", "Restart", show=False),
        Binding("plus", "grow", "+1", show=False),
        Binding("minus", "shrink", "-1", show=False),
        Binding("d", "dump", "Dump"),
        Binding("l", "logs", "Logs"),
        Binding("slash", "filter", "Filter"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("s", "sort", "Sort", show=False),
        Binding("f", "fold", "Fold", show=False),
        Binding("F", "fold_all", "Fold all", show=False),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit_dialog", "Quit"),
    ]

    def __init__(self, source, run_dir: Path | str | None = None, *, glyphs: glyphs_mod.Glyphs | None = None,
                 interval: float = INTERVAL_S, notices: bool = True):
        super().__init__()
        self.source = source
        self.run_dir = Path(run_dir) if run_dir else None
        self.glyphs = glyphs or glyphs_mod.pick()
        self.interval = interval
        self.notices = notices
        self.status: dict | None = None
        self.live = True
        self.leaving: str | None = None
        self.final_exit_code: int | None = None
        self.sort = "rank"
        self.filter_text = ""
        self.folded: set[int] = set()
        self.wide: bool | None = None
        self.snapshots = 0  # applied snapshots, for tests and the bench
        self.messages: list[tuple[str, str]] = []  # everything said to the user
        self.poller: Poller | None = None
        self._act_source = None
        self._act_lock = threading.Lock()
        self._told_exit: dict = {}  # rank -> pid of the last exit a notice told of

    # ---------------------------------------------------------------- layout ----
    def compose(self) -> ComposeResult:
        # Kept as attributes: app.query_one searches the active screen, which may be a dialog.
        self.header = RunHeader(id="header")
        self.banner = Static(id="banner")
        self.table = WorkerTable(formatter=self._format_row, id="workers")
        self.selected_line = Static(id="selected-line")
        self.gpu_panel = GpuPanel(id="gpus")
        self.status_line = Static(id="status-line")
        yield from (self.header, self.banner, self.table, self.selected_line, self.gpu_panel,
                    self.status_line)
        yield Footer(show_command_palette=False)

    def _format_row(self, source) -> tuple:
        return view.row_cells(source, self.table.cols, self.glyphs)

    def on_mount(self) -> None:
        self._set_columns(self.size.width)
        self.table.focus()
        self.say("connecting to the run…", "information", notify=False)
        if self.source is not None:
            self.poller = Poller(self.source, self, self.run_dir, self.interval)
            self.poller.start()

    def on_unmount(self) -> None:
        if self.poller is not None:
            self.poller.stop()
        if self._act_source is not None and self._act_source is not self.source:
            self._act_source.close()

    def _actions(self):
        """A connection of its own for actions (worker threads): a key press never waits
        behind a status poll, which for a big run on a busy machine takes a while."""
        with self._act_lock:
            if self._act_source is None:
                another = getattr(self.source, "another", None)
                try:
                    self._act_source = another() if another is not None else self.source
                except ClientError:
                    self._act_source = self.source
            return self._act_source

    def on_resize(self, event: events.Resize) -> None:
        self._set_columns(event.size.width)

    def _set_columns(self, width: int) -> None:
        wide = width >= WIDE_COLS
        cols = view.columns(wide, width)
        if cols != self.table.cols:
            self.wide = wide
            self.table.set_columns(cols)
            self.refresh_view()

    # -------------------------------------------------------------- snapshots ----
    def on_snapshot_ready(self, msg: SnapshotReady) -> None:
        if not self.is_running:
            return
        try:
            first = self.snapshots == 0
            self.apply_status(msg.snapshot.status)
            if first:
                self.say(f"watching run {msg.snapshot.status['run'].get('id')}: ? for keys, q to leave",
                         "information", notify=False)
            else:
                self._notices(msg.snapshot.events)
        finally:
            if self.poller is not None:
                self.poller.applied.set()

    def apply_status(self, status: dict) -> None:
        self.status = status
        self.snapshots += 1
        self.refresh_view()

    def refresh_view(self) -> None:
        st = self.status
        if st is None or self.wide is None:
            return
        g = self.glyphs
        with self.batch_update():
            self.header.show(view.header_lines(
                st, g, sort=self.sort, filter_text=self.filter_text, finished=not self.live))
            self.table.apply(view.table_rows(st, g, folded=self.folded, filter_text=self.filter_text,
                                             sort=self.sort))
            self.gpu_panel.show(view.gpu_lines(st, g))
            self._show_selected()
        if isinstance(self.screen, DetailScreen):
            self.screen.show_worker()

    def _notices(self, recs) -> None:
        for rec in recs:
            if rec.get("event") == "worker_exited":
                self._told_exit[rec.get("rank")] = rec.get("pid")
        notes = [n for n in map(view.event_notice, recs) if n is not None]
        for text, sev in notes[:MAX_NOTICES]:
            self.say(text, sev)
        if len(notes) > MAX_NOTICES:
            self.say(f"… and {len(notes) - MAX_NOTICES} more events (see the table)", "warning")

    def on_poll_failed(self, msg: PollFailed) -> None:
        text = f"cannot read the run's status: {msg.why}"
        if not self.messages or self.messages[-1][0] != text:
            self.say(text, "error")

    def on_run_gone(self, msg: RunGone) -> None:
        self.live = False
        final, info = msg.final, msg.info or {}
        code = info.get("exit_code") if info.get("finished") else None
        if final is not None:
            code = final.get("run", {}).get("exit_code", code) if code is None else code
            final = dict(final, run=dict(final.get("run", {}), exit_code=code, state="finished"))
            self.apply_status(final)
            # A worker that failed after the last poll (the run ended in between): say so now.
            for w in final.get("workers", []):
                if w.get("state") in ("failed", "killed") and self._told_exit.get(w["rank"]) != w.get("pid"):
                    self.say(f"rank {w['rank']} {w['state']}: {w.get('cause')}",
                             "error" if w["state"] == "failed" else "warning")
            lines = view.ending_lines(final)
            self.say(lines[0], "information" if code == 0 else "error")
        else:
            lines = [f"lost the connection to the run ({msg.why}); "
                     f"its files are in {self.run_dir or 'its run directory'} — press q to leave"]
            self.say(lines[0], "error")
            self.refresh_view()
        self.final_exit_code = code
        banner = self.banner
        banner.update(Text("\n".join(lines)))
        banner.add_class("shown")
        if self.leaving == "stop":
            self.exit(Outcome("stopped", code))

    # ---------------------------------------------------------------- telling ----
    def say(self, text: str, severity: str = "information", notify: bool = True) -> None:
        """Tell the user: the status line always, a notification too when asked."""
        self.messages.append((text, severity))
        del self.messages[:-200]
        line = self.status_line
        line.update(Text(text.splitlines()[0] if text else "", no_wrap=True, overflow="ellipsis"), layout=False)
        line.set_class(severity == "error", "error")
        line.set_class(severity == "warning", "warning")
        if notify and self.notices:
            self.notify(text, severity=severity, timeout=8 if severity == "error" else 4)

    def on_action_done(self, msg: ActionDone) -> None:
        self.say(msg.text, msg.severity)
        if self.poller is not None:
            # The next snapshot shows the action's effect: soon, but after this reply is drawn.
            self.set_timer(KICK_AFTER_S, self.poller.kick)
        if msg.then is not None:
            msg.then()

    def _request(self, what: str, call: Callable[[], str], then: Callable | None = None,
                 failed: Callable | None = None) -> None:
        """Run one control request off the UI thread; report its message or its failure."""
        def run():
            try:
                text = call()
            except ClientError as exc:
                self.post_message(ActionDone(f"{what} failed: {exc}", "error", failed))
                return
            self.post_message(ActionDone(text, "information", then))
        self.run_worker(run, thread=True, group="requests", exit_on_error=False)

    def _can_act(self, verb: str) -> bool:
        if self.source is None or not self.live:
            self.say(f"cannot {verb}: the run has ended", "warning")
            return False
        if self.status is None:
            self.say(f"cannot {verb} yet: still connecting to the run", "warning")
            return False
        return True

    def _selected(self, verb: str) -> dict | None:
        if not self._can_act(verb):
            return None
        rank = self.table.selected_rank()
        w = next((x for x in self.status.get("workers", []) if x["rank"] == rank), None)
        if w is None:
            self.say(f"cannot {verb}: no worker selected", "warning")
        return w

    # ---------------------------------------------------------------- actions ----
    def action_cursor_down(self) -> None:
        self.table.action_cursor_down()

    def _show_selected(self) -> None:
        rank = self.table.selected_rank()
        w = next((x for x in (self.status or {}).get("workers", []) if x["rank"] == rank), None)
        line = view.selected_line(w, self.glyphs)
        if line != getattr(self, "_selected_shown", None):
            self._selected_shown = line
            self.selected_line.update(to_text(line), layout=False)  # one line, always

    def on_worker_table_row_highlighted(self, event: WorkerTable.RowHighlighted) -> None:
        self._show_selected()

    def on_worker_table_row_selected(self, event: WorkerTable.RowSelected) -> None:
        self.action_detail()

    def action_detail(self) -> None:
        rank = self.table.selected_rank()
        if rank is None:
            self.say("no worker selected", "warning")
            return
        self.push_screen(DetailScreen(rank))

    def action_logs(self) -> None:
        rank = self.table.selected_rank()
        if rank is None:
            self.say("no worker selected", "warning")
            return
        self.push_screen(LogsScreen(rank))

    def action_pause(self) -> None:
        w = self._selected("pause")
        if w is None:
            return
        cmd = "resume" if w["state"] == "paused" else "pause"
        rank = w["rank"]
        self._request(f"{cmd} rank {rank}", lambda: self._actions().act(cmd, rank),
                      then=lambda: self._assume_state(rank, "paused" if cmd == "pause" else "running"))

    def _assume_state(self, rank: int, state: str) -> None:
        """Show what the supervisor just confirmed until the next snapshot says more, so a
        second `p` right away resumes what the first one paused."""
        st = self.status
        if st is None or not self.live:
            return
        self.status = dict(st, workers=[dict(w, state=state) if w["rank"] == rank else w
                                        for w in st.get("workers", [])])
        self.refresh_view()

    def action_pause_all(self) -> None:
        if not self._can_act("pause all"):
            return
        alive = [w for w in self.status["workers"] if w["state"] in view.ALIVE]
        cmd = "resume" if alive and all(w["state"] == "paused" for w in alive) else "pause"
        self._request(f"{cmd} all", lambda: self._actions().act(cmd, "all"))

    def _confirmed(self, verb: str, w: dict, detail: str) -> None:
        def answer(yes: bool | None) -> None:
            if yes:
                self._request(f"{verb} rank {w['rank']}", lambda: self._actions().act(verb, w["rank"]))
            else:
                self.say(f"{verb} of rank {w['rank']} cancelled", notify=False)
        self.push_screen(ConfirmDialog(f"{verb.capitalize()} rank {w['rank']} (pid {w.get('pid')})?", detail),
                         answer)

    def action_kill(self) -> None:
        w = self._selected("kill")
        if w is not None:
            self._confirmed("kill", w, "SIGTERM to its process group, SIGKILL after the grace period.")

    def action_restart(self) -> None:
        w = self._selected("restart")
        if w is not None:
            self._confirmed("restart", w, "Stop it (SIGTERM, then SIGKILL) and start it again.")

    def _resize(self, delta: int) -> None:
        if not self._can_act("resize"):
            return
        n = len(self.status["workers"]) + delta
        if n < 1:
            self.say("cannot resize below 1 worker", "warning")
            return
        self._request(f"resize to {n}", lambda: self._actions().resize(n))

    def action_grow(self) -> None:
        self._resize(+1)

    def action_shrink(self) -> None:
        self._resize(-1)

    def action_dump(self) -> None:
        w = self._selected("dump stacks")
        if w is not None:
            self._request(f"dump rank {w['rank']}", lambda: self._actions().act("dump", w["rank"]))

    def action_filter(self) -> None:
        def done(text: str | None) -> None:
            if text is None:
                self.say("filter unchanged", notify=False)
                return
            self.filter_text = text
            self.refresh_view()
            shown = sum(1 for k in self.table.order if "." not in k)
            self.say(f"filter '{text}': {shown} worker(s) shown" if text else "filter cleared", notify=False)
        self.push_screen(FilterDialog(self.filter_text), done)

    def action_clear_filter(self) -> None:
        if self.filter_text:
            self.filter_text = ""
            self.refresh_view()
            self.say("filter cleared", notify=False)

    def action_sort(self) -> None:
        i = view.SORTS.index(self.sort)
        self.sort = view.SORTS[(i + 1) % len(view.SORTS)]
        self.refresh_view()
        self.say(f"sorted by {self.sort}", notify=False)

    def action_fold(self) -> None:
        rank = self.table.selected_rank()
        if rank is None:
            self.say("no worker selected", "warning")
            return
        w = next((x for x in (self.status or {}).get("workers", []) if x["rank"] == rank), None)
        kids = len((w or {}).get("children") or [])
        if rank in self.folded:
            self.folded.discard(rank)
            self.say(f"rank {rank}: {kids} child process(es) shown", notify=False)
        else:
            self.folded.add(rank)
            self.table.select_key(view.row_key(rank))
            self.say(f"rank {rank}: {kids} child process(es) folded", notify=False)
        self.refresh_view()

    def action_fold_all(self) -> None:
        ranks = {w["rank"] for w in (self.status or {}).get("workers", [])}
        if ranks - self.folded:
            self.folded |= ranks
            self.say("children folded", notify=False)
        else:
            self.folded.clear()
            self.say("children shown", notify=False)
        self.refresh_view()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.glyphs))

    def action_quit_dialog(self) -> None:
        if not self.live:
            self.exit(Outcome("finished", self.final_exit_code))
            return
        if self.leaving == "stop":
            self.exit(Outcome("stopped", None))  # do not wait here: the launcher waits
            return
        run_id = (self.status or {}).get("run", {}).get("id", "?")

        def chosen(choice: str | None) -> None:
            if choice == "detach":
                self.exit(Outcome("detach", None))
            elif choice == "stop":
                self.leaving = "stop"
                self._request("stop the run", lambda: self._actions().stop(),
                              failed=lambda: setattr(self, "leaving", None))
            else:
                self.say("still watching", notify=False)
        self.push_screen(QuitDialog(run_id), chosen)

    def get_system_commands(self, screen):
        yield from super().get_system_commands(screen)
        for action, title, help_text in COMMANDS:
            yield SystemCommand(title, help_text, getattr(self, f"action_{action}"))
