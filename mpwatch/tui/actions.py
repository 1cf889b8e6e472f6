"""The keys that act on the run (pause, kill, restart, resize, dump, stop, checkpoint, profile,
a CUDA memory snapshot, a tunable's value) and, from tui.view_actions, the ones that only change
the view (filter, sort, fold), as the base class of the App. Every control
request runs on a worker thread and reports back with ActionDone, so the UI thread never
waits on the socket, and every action says what happened (the supervisor's reply, or why
it failed). Methods run on the UI thread unless said otherwise.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from textual.app import App
from textual.binding import Binding
from textual.message import Message
from textual.scrollbar import ScrollBar

from mpwatch.contract import ALIVE_STATES, PROFILE_STEPS, State, Status, WorkerStatus
from mpwatch.sources.local import ClientError, who
from mpwatch.sources.source import Source
from mpwatch.tui.outcome import Outcome
from mpwatch.tui.poller import Poller
from mpwatch.tui.render import segs, stop_text, view
from mpwatch.tui.render.glyphs import Glyphs
from mpwatch.tui.render.segs import cell
from mpwatch.tui.screens.checkpoint import CheckpointDialog
from mpwatch.tui.screens.confirm import Choice, ChoiceDialog, ConfirmDialog
from mpwatch.tui.screens.profile import ProfileDialog
from mpwatch.tui.screens.quit import QuitDialog
from mpwatch.tui.view_actions import ViewActions
from mpwatch.tui.widgets.scrollbars import AsciiScrollBarRender, WholeCellScrollBarRender
from mpwatch.tui.widgets.worker_table import WorkerTable


@dataclass
class ActionDone(Message):
    text: str
    severity: str
    then: Callable[[], None] | None = None  # called on the UI thread after the message is shown


class RunActions(ViewActions, App[Outcome]):
    """The App's actions (those that only change the view: tui.view_actions); the App (tui.app)
    builds the screen these act on."""

    READ_ONLY = False  # a replay of a run's files (tui.replay_app): nothing here acts

    def __init__(self, source: Source | None, run_dir: Path | str | None, glyphs: Glyphs):
        super().__init__()
        self.source = source
        self.run_dir = Path(run_dir) if run_dir else None
        # the CLI passes the glyphs its settings choose (MPWATCH_ASCII: render.glyphs.pick)
        self.glyphs = glyphs
        # An ASCII terminal (LANG=C, MPWATCH_ASCII=1): ASCII cuts, scrollbars, borders (app.tcss)
        # and keys too.
        segs.use_ellipsis(self.glyphs.ellipsis)
        ScrollBar.renderer = WholeCellScrollBarRender if self.glyphs.unicode else AsciiScrollBarRender
        self.set_class(not self.glyphs.unicode, "ascii")
        self.status: Status | None = None
        self.live = True
        self.leaving: str | None = None
        self.final_exit_code: int | None = None
        self.sort = "rank"
        self.filter_text = ""
        self.folded: set[int] = set()
        self.poller: Poller | None = None
        self.table = WorkerTable(
            formatter=lambda source: view.row_cells(source, self.table.cols, self.glyphs), id="workers")
        self._act_source: Source | None = None
        self._act_lock = threading.Lock()

    def get_key_display(self, binding: Binding) -> str:
        """Enter as a word where the terminal shows ASCII only (Textual shows ⏎)."""
        if not self.glyphs.unicode and binding.key == "enter" and not binding.key_display:
            return "Enter"
        return super().get_key_display(binding)

    @property
    def can_act(self) -> bool:
        """The keys that act on processes are offered: a live run, not a replay."""
        return not self.READ_ONLY and self.source is not None and self.live

    def say(self, text: str, severity: str = "information", notify: bool = True) -> None:
        raise NotImplementedError  # the App's

    def refresh_view(self) -> None:
        raise NotImplementedError  # the App's

    def _actions(self) -> Source:
        """A connection of its own for actions (worker threads): a key press never waits
        behind a status poll, which for a big run on a busy machine takes a while."""
        with self._act_lock:
            if self._act_source is None:
                assert self.source is not None  # actions are offered only with a source
                try:
                    self._act_source = self.source.another()
                except ClientError:
                    self._act_source = self.source
            assert self._act_source is not None  # actions are offered only with a source
            return self._act_source

    def worker(self, rank: int | None) -> WorkerStatus | None:
        return next((w for w in (self.status or {"workers": []})["workers"] if w["rank"] == rank), None)

    def on_action_done(self, msg: ActionDone) -> None:
        self.say(msg.text, msg.severity)
        if self.poller is not None:
            # The next snapshot shows the action's effect: soon, but after this reply is drawn.
            self.set_timer(0.1, self.poller.kick)
        if msg.then is not None:
            msg.then()

    def _request(self, what: str, call: Callable[[], str], then: Callable[[], None] | None = None,
                 failed: Callable[[], None] | None = None) -> None:
        """Run one control request off the UI thread; report its message or its failure."""
        def run() -> None:
            try:
                text = call()
            except ClientError as exc:
                self.post_message(ActionDone(f"{what} failed: {exc}", "error", failed))
                return
            self.post_message(ActionDone(text, "information", then))
        self.run_worker(run, thread=True, group="requests", exit_on_error=False)

    def _can_act(self, verb: str) -> Status | None:
        if self.source is None or not self.live:
            self.say(f"cannot {verb}: the run has ended", "warning")
            return None
        if self.status is None:
            self.say(f"cannot {verb} yet: still connecting to the run", "warning")
        return self.status

    def _selected(self, verb: str) -> WorkerStatus | None:
        if self._can_act(verb) is None:
            return None
        w = self.worker(self.table.selected_rank())
        if w is None:
            self.say(f"cannot {verb}: no worker selected", "warning")
        return w

    # -------------------------------------------------------------- the run ----
    def action_pause(self) -> None:
        w = self._selected("pause")
        if w is None:
            return
        cmd = "resume" if w["state"] == State.PAUSED else "pause"
        rank = w["rank"]
        self._request(f"{cmd} rank {rank}", lambda: self._actions().act(cmd, rank),
                      then=lambda: self._assume_state(rank,
                                                      State.PAUSED if cmd == "pause" else State.RUNNING))

    def _assume_state(self, rank: int, state: State) -> None:
        """Show what the supervisor just confirmed until the next snapshot says more, so a
        second `p` right away resumes what the first one paused."""
        st = self.status
        if st is None or not self.live:
            return
        workers = []
        for w in st["workers"]:
            if w["rank"] == rank:
                w = w.copy()
                w["state"] = state
            workers.append(w)
        new = st.copy()
        new["workers"] = workers
        self.status = new
        self.refresh_view()

    def action_pause_all(self) -> None:
        st = self._can_act("pause all")
        if st is None:
            return
        alive = [w for w in st["workers"] if w["state"] in ALIVE_STATES]
        cmd = "resume" if alive and all(w["state"] == State.PAUSED for w in alive) else "pause"
        self._request(f"{cmd} all", lambda: self._actions().act(cmd, "all"))

    def _confirmed(self, verb: str, w: WorkerStatus, detail: str, warning: str = "") -> None:
        rank = w["rank"]

        def answer(yes: bool | None) -> None:
            if yes:
                self._request(f"{verb} rank {rank}", lambda: self._actions().act(verb, rank))
            else:
                self.say(f"{verb} of rank {rank} cancelled", notify=False)
        question = cell(f"{verb.capitalize()} rank {rank} (pid {w['pid']})?")
        self.push_screen(ConfirmDialog(question, cell(detail), cell(warning) if warning else None), answer)

    def action_kill(self) -> None:
        """`k`: what groups.ProcessGroups.kill sends, and what it does to a process group."""
        w = self._selected("kill")
        if w is None or self.status is None:
            return
        opts, peers = self.status["run"]["options"], stop_text.group_peers(self.status, w)
        self._confirmed("kill", w, stop_text.stop_one(opts),
                        stop_text.kill_warning(opts, w["rank"], peers) if peers else "")

    def action_restart(self) -> None:
        w = self._selected("restart")
        if w is None or self.status is None:
            return
        peers = stop_text.group_peers(self.status, w)
        if not peers:
            self._confirmed("restart", w, "Stopped, then started again: "
                            + stop_text.stop_one(self.status["run"]["options"]))
            return
        rank, n = w["rank"], len(peers) + 1

        def chosen(choice: str | None) -> None:
            if choice == "all":
                self._request("restart all", lambda: self._actions().act("restart", "all"))
            elif choice == "one":
                self._request(f"restart rank {rank}", lambda: self._actions().act("restart", rank))
            else:
                self.say(f"restart of rank {rank} cancelled", notify=False)
        self.push_screen(ChoiceDialog(
            cell(f"Restart rank {rank} (pid {w['pid']})?"), cell(stop_text.restart_warning(rank, peers)),
            [Choice("a", f"Restart all {n}", "all", "error"),
             Choice("o", f"Only rank {rank}", "one", "warning"),
             Choice("n", "Cancel", "cancel", "primary")]), chosen)

    def action_restart_all(self) -> None:
        st = self._can_act("restart all")
        if st is None:
            return
        n = len(st["workers"])

        def answer(yes: bool | None) -> None:
            if yes:
                self._request("restart all", lambda: self._actions().act("restart", "all"))
            else:
                self.say("restart of all workers cancelled", notify=False)
        how = stop_text.stop_every(st["run"]["options"])
        self.push_screen(ConfirmDialog(cell(f"Restart all {n} workers?"), cell(
            f"Every worker is stopped ({how}) and started again: a process group they share forms anew.")),
            answer)

    def _resize(self, delta: int) -> None:
        st = self._can_act("resize")
        if st is None:
            return
        n = len(st["workers"]) + delta
        if n < 1:
            self.say("cannot resize below 1 worker", "warning")
            return
        if st["run"]["options"]["resize_mode"] != "restart":  # one rank more or less: the others go on
            self._request(f"resize to {n}", lambda: self._actions().resize(n))
            return

        def answer(yes: bool | None) -> None:
            if yes:
                self._request(f"resize to {n}", lambda: self._actions().resize(n))
            else:
                self.say(f"resize to {n} cancelled", notify=False)
        self.push_screen(ConfirmDialog(
            cell(f"Resize to {n} workers, restarting every worker?"),
            cell(f"Resize mode restart: all {len(st['workers'])} workers are stopped "
                 f"({stop_text.stop_every(st['run']['options'])}) and {n} are started (a process group they "
                 "share forms anew at the new size).")), answer)

    def action_grow(self) -> None:
        self._resize(+1)

    def action_shrink(self) -> None:
        self._resize(-1)

    def action_dump(self) -> None:
        w = self._selected("dump stacks")
        if w is not None:
            rank = w["rank"]
            self._request(f"dump rank {rank}", lambda: self._actions().act("dump", rank))

    def action_checkpoint(self) -> None:
        """`c`: the selected rank or every rank, asked first (supervisor.live.room picks the step)."""
        w = self._selected("checkpoint")
        if w is None or self.status is None:
            return
        rank, ranks = w["rank"], len(self.status["workers"])

        def chosen(choice: str | None) -> None:
            if choice is None:
                self.say("checkpoint cancelled", notify=False)
                return
            target: int | str = rank if choice == "rank" else "all"
            self._request(f"checkpoint {target}",
                          lambda: self._actions().ask("checkpoint", target, by=who("tui"))["message"])
        self.push_screen(CheckpointDialog(rank, ranks, w.get("polls_checkpoint", False)), chosen)

    def action_memory(self) -> None:
        """`M`: the selected rank writes torch's CUDA allocator snapshot at its next step (ctl
        memory RANK; `ctl memory all` for every rank). Read-only for the run: nothing to confirm."""
        w = self._selected("take a CUDA memory snapshot")
        if w is not None:
            rank = w["rank"]
            self._request(f"memory snapshot rank {rank}",
                          lambda: self._actions().ask("memory", rank, by=who("tui"))["message"])

    def action_profile(self) -> None:
        """`o`: the selected rank or every rank, asked first (supervisor.live.actions)."""
        w = self._selected("profile")
        if w is None or self.status is None:
            return
        rank = w["rank"]

        def chosen(choice: str | None) -> None:
            if choice is None:
                self.say("profile cancelled", notify=False)
                return
            target: int | str = rank if choice == "rank" else "all"
            self._request(f"profile {target}", lambda: self._actions().ask(
                "profile", target, by=who("tui"), steps=PROFILE_STEPS)["message"])
        self.push_screen(ProfileDialog(rank, len(self.status["workers"])), chosen)

    def may_act(self, verb: str) -> bool:
        """Whether the keys that act work here (a live run, connected); says why not."""
        return self._can_act(verb) is not None

    def set_tunable(self, name: str, text: str) -> None:
        """A tunable's new value on every rank (the tunables screen's Enter)."""
        if self._can_act(f"set {name}") is None:
            return
        self._request(f"set {name}",
                      lambda: self._actions().set_tunable(name, text, by=who("tui"))["message"])

    def action_quit_dialog(self) -> None:
        if not self.live:
            self.exit(Outcome("finished", self.final_exit_code))
            return
        if self.leaving == "stop":
            self.exit(Outcome("stopped", None))  # do not wait here: the launcher waits
            return
        run_id = self.status["run"]["id"] if self.status else "?"

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
