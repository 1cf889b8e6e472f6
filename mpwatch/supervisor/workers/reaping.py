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
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from mpwatch.contract.status import RunState, State
from mpwatch.rundir import crash, layout, textfiles
from mpwatch.supervisor.workers import exits

if TYPE_CHECKING:
    from mpwatch.supervisor.control.room import ControlRoom
    from mpwatch.supervisor.gpu.watch import GpuWatch
    from mpwatch.supervisor.ipc.ledger import ReportLedger
    from mpwatch.supervisor.nodes.cluster import Nodes
    from mpwatch.supervisor.options import Options
    from mpwatch.supervisor.workers.groups import ProcessGroups
    from mpwatch.supervisor.workers.worker import Worker

NO_HELLO_S = 2.0  # a worker silent this long after start is shown running, "no heartbeat"
# After a worker's process ends, how long its channel may take to reach end of file: the
# frames it sent on the way out (its last reports) are read before its exit is recorded.
DRAIN_S = 0.5
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
    control: ControlRoom
    gpu: GpuWatch
    nodes: Nodes | None

    def restart(self, w: Worker, why: str) -> None: ...


class Reaper:
    def __init__(self, run: ReapHost):
        self.run = run
        self.ends: dict[int, tuple[float, str]] = {}  # rank -> (monotonic, how) of its last process's end

    def poll(self) -> None:
        """One tick: the ended processes recorded, kills enforced, restarts that are due made."""
        run = self.run
        now = time.monotonic()
        for w in list(run.workers.values()):
            a = w.attempt
            if a.proc is None:
                continue
            if a.proc.returncode is None:
                if a.proc.poll() is not None:
                    a.exit_seen = now
                elif a.kill_deadline is not None or a.hard_killed is not None:  # being killed
                    run.groups.enforce(w, now)
            if a.exit_seen is not None and (not a.chan_open or now - a.exit_seen >= DRAIN_S):
                # (a child that inherited the channel's socket keeps it open: hence the deadline)
                self._on_exit(w, a.proc.returncode if a.proc.returncode is not None else 0)
            elif w.state is State.STARTING and not a.connected and now - a.started > NO_HELLO_S and w.alive:
                with run.lock:
                    w.transition(State.RUNNING, f"no hello after {NO_HELLO_S:g}s")
        run.groups.adopt_foreign()
        run.groups.reap(now)
        self._restart_due()

    def _on_exit(self, w: Worker, returncode: int) -> None:
        run = self.run
        a = w.attempt
        a.exit_seen = None
        now = time.monotonic()
        run.ledger.write_report(w, now)  # the curve's last point comes before the exit
        run.control.on_exit(w)  # the requests it never answered are missed
        # The process's own lines (after mpwatch's last marker), enough to find NCCL's watchdog line
        # and the last traceback's frames.
        tail = crash.own_output(textfiles.tail_lines(layout.log_path(run.run_dir, w.rank, "stderr"),
                                                     CAUSE_LINES, CAUSE_BYTES))
        end = exits.judge(returncode, a.kill_reason, tail, self._first_peer_end(w, now), a.dist,
                          a.stop_signal)
        self.ends[w.rank] = (now, exits.ended_how(end.state, a.kill_reason, end.signal))
        tail = tail[-10:]
        with run.lock:
            a.exit_code, a.signal, a.cause = end.exit_code, end.signal, end.cause
            a.stall = None
            w.transition(end.state, "its process ended", pid=a.pid, exit_code=end.exit_code,
                         signal=end.signal, state=end.state.value, cause=end.cause, reason=a.kill_reason,
                         stderr_tail=tail)
        if end.state is State.FAILED:
            run.gpu.on_worker_exit(w.rank, tail, w.reports.cuda)  # "CUDA out of memory" -> an OOM alert
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
