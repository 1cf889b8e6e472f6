"""The exit path of a run's workers: each tick of the serve loop, which processes ended (once
their channel has drained), how each ended (supervisor.workers.exits judges it), whether that
asks for a restart, and the restarts that are due (their process group is gone).

Main thread only (supervisor.core's serve loop): it alone reaps processes. The workers'
fields change under the run's lock, which the channel hub's and the control server's threads
also take.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from mpwatch.contract import ALIVE_STATES, RunState, State
from mpwatch.rundir import crash, layout, textfiles
from mpwatch.supervisor import boundary
from mpwatch.supervisor.workers import exits
from mpwatch.supervisor.workers.exitwatch import ExitWatch
from mpwatch.supervisor.workers.worker import Proc

if TYPE_CHECKING:
    from mpwatch.supervisor.gpu.watch import GpuWatch
    from mpwatch.supervisor.live.room import LiveRoom
    from mpwatch.supervisor.nodes.cluster import Nodes
    from mpwatch.supervisor.options import Options
    from mpwatch.supervisor.workers.groups import ProcessGroups
    from mpwatch.supervisor.workers.ledger import ReportLedger
    from mpwatch.supervisor.workers.worker import Worker

NO_HELLO_S = 2.0  # a worker silent this long after start is shown running, "no heartbeat"
# After a worker's process ends, how long its channel may take to reach end of file: the
# frames it sent on the way out (its last reports) are read before its exit is recorded.
DRAIN_S = 0.5
DRAIN_POLL_S = 0.01  # meanwhile the loop looks again this often (the hub closes the channel within ms)
# A failed rank's stderr searched for its cause: enough for the last traceback's frames above a
# message of many lines (rundir.crash); bounded, as every read of a log is.
CAUSE_LINES = 2000
CAUSE_BYTES = 256 * 1024


class ReapHost(Protocol):
    """What the exit path reads and calls of the run (supervisor.core's Run)."""

    lock: threading.RLock
    workers: dict[int, Worker]
    opts: Options
    run_dir: Path
    state: RunState
    groups: ProcessGroups
    ledger: ReportLedger
    live: LiveRoom
    gpu: GpuWatch
    nodes: Nodes | None

    def restart(self, w: Worker, why: str) -> None: ...


class Reaper:
    def __init__(self, run: ReapHost):
        self.run = run
        self.ends: dict[int, tuple[float, str]] = {}  # rank -> (monotonic, how) of its last process's end
        self.exits = ExitWatch()  # which processes ended: only those are waited on
        self.draining = False  # an ended process's channel has not closed yet (the last tick saw)

    def watch(self, proc: Proc) -> None:
        """A worker's process just started."""
        self.exits.watch(proc)

    def wait_s(self, tick: float) -> float:
        """How long the serve loop may wait: briefly while an ended process's channel drains
        (its exit, and a restart, follow at once), else a tick."""
        return DRAIN_POLL_S if self.draining else tick

    def poll(self) -> None:
        """One tick: the ended processes recorded, kills enforced, restarts that are due made. Each
        rank's turn runs behind the fault boundary (supervisor.boundary): one that fails costs
        nobody else's, and its exit is recorded all the same (`_end_plainly`)."""
        run = self.run
        now = time.monotonic()
        watch = self.exits
        ended, watched = watch.ended(), watch.pids  # (a plain loop: it runs for every worker each tick)
        draining = False
        starting = State.STARTING
        for w in list(run.workers.values()):
            a = w.attempt
            if a.proc is None:
                continue
            if (a.exit_seen is None and a.kill_deadline is None and a.hard_killed is None and a.pid in watched
                    and a.pid not in ended and a.proc.returncode is None and w.state is not starting):
                continue  # nothing to do for it this tick (_poll_one's every branch agrees): the usual case
            with boundary.room("reaper"):
                draining = self._poll_one(w, now, ended, watched) or draining
        self.draining = draining
        run.groups.adopt_foreign()
        run.groups.reap(now)
        self._restart_due()

    def _poll_one(self, w: Worker, now: float, ended: AbstractSet[int], watched: AbstractSet[int]) -> bool:
        """One rank's turn; True while its ended process's channel drains."""
        run, a = self.run, w.attempt
        assert a.proc is not None  # poll's
        if a.proc.returncode is None:
            if (a.pid in ended or a.pid not in watched) and a.proc.poll() is not None:
                self.exits.forget(a.pid)
                a.exit_seen = now
            elif a.kill_deadline is not None or a.hard_killed is not None:  # being killed
                run.groups.enforce(w, now)
        if a.exit_seen is not None and (not a.chan_open or now - a.exit_seen >= DRAIN_S):
            # (a child that inherited the channel's socket keeps it open: hence the deadline)
            rc = a.proc.returncode if a.proc.returncode is not None else 0
            try:
                self._on_exit(w, rc)
            except Exception:
                if w.state in ALIVE_STATES:  # its end is recorded whatever failed on the way (poll's room
                    self._end_plainly(w, rc)  # says what)
                raise
        elif a.exit_seen is not None:
            return True
        elif w.state is State.STARTING and not a.connected and now - a.started > NO_HELLO_S and w.alive:
            with run.lock:
                w.transition(State.RUNNING, f"no hello after {NO_HELLO_S:g}s")
        return False

    def _on_exit(self, w: Worker, returncode: int) -> None:
        run = self.run
        a = w.attempt
        a.exit_seen = None
        now = time.monotonic()
        with boundary.room("report ledger"):
            run.ledger.write_report(w, now)  # the curve's last point comes before the exit
        with boundary.room("live room"):
            run.live.on_exit(w)  # the requests it never answered are missed
        end, tail = self._judge(w, returncode, now)
        self.ends[w.rank] = (now, exits.ended_how(end.state, a.kill_reason, end.signal))
        with run.lock:
            a.exit_code, a.signal, a.cause = end.exit_code, end.signal, end.cause
            a.stall = None
            w.transition(end.state, "its process ended", pid=a.pid, exit_code=end.exit_code,
                         signal=end.signal, state=end.state.value, cause=end.cause, reason=a.kill_reason,
                         stderr_tail=tail)
        if end.state is State.FAILED:
            # "CUDA out of memory" (its stderr, or its OOM record's message) -> its OOM finding
            with boundary.rank_input(w.rank, "its stderr's CUDA OOM"):
                run.gpu.on_worker_exit(w.rank, tail, w.reports.cuda, a.pid, a.last_oom())
        self._after_exit(w, end)

    def _judge(self, w: Worker, returncode: int, now: float) -> tuple[exits.Exit, list[str]]:
        """How its process ended, and its last lines. Its stderr is the rank's word: what cannot be
        read or judged is its bad input, and the end is judged on its exit status alone."""
        a = w.attempt
        with boundary.rank_input(w.rank, "its stderr's cause"):
            # The process's own lines (after mpwatch's last marker), enough to find NCCL's watchdog
            # line and the last traceback's frames.
            tail = crash.own_output(textfiles.tail_lines(layout.log_path(self.run.run_dir, w.rank, "stderr"),
                                                         CAUSE_LINES, CAUSE_BYTES))
            end = exits.judge(returncode, a.kill_reason, tail, self._first_peer_end(w, now), a.dist,
                              a.stop_signal)
            return end, tail[-10:]
        return _plain_end(returncode, a.kill_reason), []

    def _end_plainly(self, w: Worker, returncode: int) -> None:
        """Its end from its exit status alone, when recording it whole failed: the run must not
        wait for a rank whose process is gone."""
        a = w.attempt
        a.exit_seen = None
        end = _plain_end(returncode, a.kill_reason)
        with self.run.lock:
            a.exit_code, a.signal, a.cause, a.stall = end.exit_code, end.signal, end.cause, None
            w.transition(end.state, "its process ended", pid=a.pid, exit_code=end.exit_code,
                         signal=end.signal, state=end.state.value, cause=end.cause, reason=a.kill_reason,
                         stderr_tail=[])

    def _after_exit(self, w: Worker, end: exits.Exit) -> None:
        """Its group's end, and a restart when one is due."""
        run, a = self.run, w.attempt
        run.groups.after_exit(w, run.opts.grace)
        if a.kill_reason == "restart":
            w.pending_restart = "restart"
        elif a.kill_reason is None and end.state is State.FAILED and run.state is RunState.RUNNING:
            if run.nodes is not None and run.nodes.on_failure(w):
                return  # c10d: a new round of every node, not a restart of this worker alone
            if w.auto_restarts < run.opts.max_restarts:
                w.pending_restart = "auto"
                with run.lock:
                    w.transition(State.RESTARTING, "failed with restarts left")

    def _first_peer_end(self, w: Worker, now: float) -> exits.PeerEnd | None:
        """The first end of another rank while this one's process ran: what a rank of a
        process group that fails right after may have died of."""
        seen = [(t, r, how) for r, (t, how) in self.ends.items() if r != w.rank and t >= w.attempt.started]
        if not seen:
            return None
        t, r, how = min(seen)
        return exits.PeerEnd(r, how, now - t)

    def _restart_due(self) -> None:
        """Start again the workers whose restart is due (their process group is gone)."""
        run = self.run
        for w in list(run.workers.values()):
            kind = w.pending_restart
            if kind is None or run.groups.lingers(w):
                continue
            if kind == "auto":
                w.auto_restarts += 1
            run.restart(w, "on request" if kind == "restart" else f"exited with failure: {w.attempt.cause}")


def _plain_end(returncode: int, kill_reason: str | None) -> exits.Exit:
    """An end told by the exit status alone (no word of the process read): its state and a cause
    that is true, if short ("exit 1", "signal SIGSEGV")."""
    code, sig = exits.exit_cause(returncode)
    state = State.KILLED if kill_reason is not None else State.EXITED if code == 0 else State.FAILED
    return exits.Exit(state, code, sig, f"exit {code}" if sig is None else f"signal {sig}")
