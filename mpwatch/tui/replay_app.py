"""The TUI on a replay (`mpwatch show RUN`, `mpwatch attach` on an ended run): the same
screens, fed a replay.ReplaySource, plus what only a replay has: the cursor keys and the
timeline strip. Read-only: every key that acts on a process says so instead.

The screens stay source-blind: the source answers status, history, logs and the GPU
timeline as of the cursor's moment, so the table, GPU panel, alerts, detail, logs and GPU
screens show that moment. A cursor key moves the source's cursor and kicks the poller for
the status of the new moment (and the open detail, logs or GPU screen reloads). UI thread.
"""
from __future__ import annotations

from textual import events
from textual.timer import Timer

from mpwatch.contract import Event, State, Status
from mpwatch.sources.replay import ReplaySource
from mpwatch.text import eventtext
from mpwatch.tui import keys
from mpwatch.tui.app import MpwatchApp
from mpwatch.tui.outcome import Outcome
from mpwatch.tui.poller import TAIL_POINTS
from mpwatch.tui.render import view
from mpwatch.tui.render.glyphs import Glyphs
from mpwatch.tui.render.segs import cell
from mpwatch.tui.screens.detail import DetailScreen
from mpwatch.tui.screens.events import EventsScreen
from mpwatch.tui.screens.gpu import GpuScreen
from mpwatch.tui.screens.logs import LogsScreen
from mpwatch.tui.widgets.replay_strip import TimelineStrip, strip_line, where_line

INDEX_TICK_S = 0.01
_CURSOR_SCREENS = (DetailScreen, LogsScreen, GpuScreen)  # they show the cursor's moment too
_EDGE_SAID = {("step", -1): "at the run's start", ("step", 1): "at the end",
              ("jump", -1): "no failure, stall, restart or alert before this moment",
              ("jump", 1): "no failure, stall, restart or alert after this moment",
              ("start", 0): "at the run's start", ("end", 0): "at the end"}


class ReplayApp(MpwatchApp):
    READ_ONLY = True  # a replay: the keys that act leave every footer and pane (they say why, pressed)
    KEYS = keys.LIVE + keys.CURSOR  # its help and palette offer those that do not act (tui.keys)
    # The cursor's keys; the keys that act leave the footer (room for what a replay has at 80
    # columns); pressed, they still say why they cannot act here.
    BINDINGS = [*keys.CURSOR, *keys.off_footer(keys.LIVE)]

    def __init__(self, source: ReplaySource, *, glyphs: Glyphs, notices: bool = True):
        super().__init__(source, source.path, glyphs=glyphs, notices=notices)
        self.replay = source
        self.strip = TimelineStrip(id="timeline")
        # The source is asked for everything (history, logs, GPU timeline) as of the cursor,
        # and the header shows the run's state at that moment: a replay counts as live here;
        # what acts on processes is refused below.
        self.live = True
        self.moves = 0  # cursor moves, for tests and the bench
        self._moments: list[tuple[float, str | None]] = []
        self._notes_shown: list[str] = []  # the notes in the banner
        self._indexer: Timer | None = None  # builds the report index while idle
        self._open_on_failure = True  # until the table first has rows (tui.replay_app.refresh_view)

    def on_mount(self) -> None:  # Textual calls MpwatchApp.on_mount too (then the poller starts)
        self.mount(self.strip, before=self.status_line)
        self.event_log = list(self.replay.events_list)
        self.show_notes()
        self.set_interval(1.0, self.show_notes)  # some come later (counted with the report index)

    def show_notes(self) -> None:
        """What the files miss, in the banner, whenever it changed: notes are added, and one
        may take another's place with the same count of notes (a count that grew, a second
        thinning pass: rundir.RunDir.note's `replaces`)."""
        notes = list(self.replay.notes)
        if notes and notes != self._notes_shown:
            self._notes_shown = notes
            self.banner.show([cell(n) for n in notes])
            self.banner.add_class("shown")

    # ----------------------------------------------------------------- view ----
    def apply_status(self, status: Status) -> None:
        if status is self.status:
            return  # the same moment polled again: nothing to redraw
        first = self.snapshots == 0
        super().apply_status(status)
        self.show_strip()
        if first:  # after the App's own greeting, which follows the first status
            self._indexer = self.set_interval(INDEX_TICK_S, self._index_step)  # once the screen is drawn
            said = self.glyphs.sep.join(keys.summary(keys.CURSOR) + ["e events", "q leave"])
            self.call_later(self.say, f"replaying run {status['run']['id']} (read-only): {said}",
                            "information", False)

    def refresh_view(self) -> None:
        super().refresh_view()
        if self._open_on_failure and self.table.order:
            # Once, with the first rows: the first status can come before the first resize has
            # given the table its columns (a loaded machine), and its rows only with that resize.
            self._open_on_failure = False
            self._select_first_failure()

    def _select_first_failure(self) -> None:
        """A failed run opens on why it failed: the row of the rank that failed first."""
        first = next((e for e in self.replay.events_list if e["event"] == Event.WORKER_EXITED
                      and eventtext.exit_state(e) == State.FAILED and e["rank"] is not None), None)
        if first is not None and first["rank"] is not None:
            self.table.select_key(view.row_key(first["rank"]))

    def _index_step(self) -> None:
        """The report index, a step a tick while the UI is idle (a thread would hold the GIL
        for whole slices and keep keys waiting)."""
        if self.replay.index_step() and self._indexer is not None:
            self._indexer.stop()

    def show_strip(self) -> None:
        src = self.replay
        pos, n, event = src.where()
        if len(self._moments) != n:
            self._moments = src.moments()
        width = max(self.size.width - 2, 10)
        start, end, t = src.start_time(), src.end_time(), src.time_at()
        self.strip.show([strip_line(self._moments, start, end, t, width, self.glyphs),
                         where_line(pos, n, event, t, start, width)])

    def on_resize(self, event: events.Resize) -> None:  # Textual calls MpwatchApp.on_resize too
        if self.status is not None:
            self.show_strip()

    # --------------------------------------------------------------- cursor ----
    def shows_cursor(self) -> bool:
        """The screen shows the cursor's moment (the poller has brought its status): tests, the bench."""
        return self.status is not None and self.status is self.replay.status(TAIL_POINTS)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cursor":
            return self.screen is self.screen_stack[0] or isinstance(self.screen, _CURSOR_SCREENS)
        return True

    def action_cursor(self, how: str, arg: int) -> None:
        if not self.replay.move(how, arg):
            self.say(_EDGE_SAID.get((how, arg), "the cursor cannot move there"), notify=False)
            return
        self.moves += 1
        # the strip follows with the moment's status: the screen agrees with itself
        if self.poller is not None:
            self.poller.kick()
        if isinstance(self.screen, _CURSOR_SCREENS):
            self.screen.reload()

    def action_events(self) -> None:
        pos = self.replay.where()[0]

        def chosen(seq: int | None) -> None:
            if seq is not None:
                self.action_cursor("seq", seq)
        started = self.status["run"]["started"] if self.status is not None else None
        self.push_screen(EventsScreen(self.replay.events_list, started, current=pos + 1,
                                      title=f"events of run {self.replay.facts.run_id}"), chosen)

    # -------------------------------------------------------------- refusals ----
    def _can_act(self, verb: str) -> Status | None:
        self.say(f"cannot {verb}: this is a replay of the run's files (read-only); "
                 "'mpwatch attach' acts on a live run", "warning")
        return None

    def action_quit_dialog(self) -> None:
        code = self.status["run"]["exit_code"] if self.status is not None else None
        self.exit(Outcome("finished", code))
