"""Ranks started over the ticks: the run's first launch (a node's ranks in each round of a
multi-node run too: supervisor.nodes.cluster queues them here), and the `resize` command of a
single-node run. In `independent` mode ranks are started or stopped one by one and the others
run on; in `restart` mode (torchrun's way, every rank sees the new world) all workers are
stopped, then N are started on a fresh rendezvous port.

Bounded: a run may grow to at most `cap()` workers (supervisor.options.worker_cap, the bound -n
shares), never past that by `resize`. Ranks to start are queued and started at most
START_PER_TICK (and START_BUDGET_S) at a time, once a tick, so the control socket and signals
are answered meanwhile: `stop` (and SIGTERM, Ctrl-C) cancels a launch or a resize in progress
within a tick, and the ranks not started yet never are.

Main thread: `launch` from Run.setup, `queue` from a multi-node round, `begin` from a control
command, `advance` each tick of the serve loop, `cancel` from Run.stop and a node's new round.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple, Protocol

from mpwatch.contract import Event, RunState
from mpwatch.supervisor import spawn
from mpwatch.supervisor.errors import CommandError
from mpwatch.supervisor.options import worker_cap

if TYPE_CHECKING:
    from mpwatch.settings import Settings
    from mpwatch.supervisor.eventlog import EventLog
    from mpwatch.supervisor.nodes.cluster import Nodes
    from mpwatch.supervisor.options import Options
    from mpwatch.supervisor.preload.launcher import Launcher
    from mpwatch.supervisor.workers.groups import ProcessGroups
    from mpwatch.supervisor.workers.worker import Worker

START_PER_TICK = 8  # new ranks started in one tick of the serve loop (each is a fork and an exec)
START_BUDGET_S = 0.1  # and no more once this long has gone by (a loaded machine forks slowly)


class Start(NamedTuple):
    """A rank to start: its first start (reason None), again for a resize (reason "resized"), or
    a restart counted as one (`restart`: why; a multi-node run's next round)."""

    rank: int
    reason: str | None = None
    restart: str | None = None


class ResizeHost(Protocol):
    """What a resize reads and calls of the run (supervisor.core's Run)."""

    lock: threading.RLock
    workers: dict[int, Worker]
    opts: Options
    settings: Settings
    state: RunState
    world: int
    master_port: int
    log: EventLog
    groups: ProcessGroups
    nodes: Nodes | None

    @property
    def launcher(self) -> Launcher: ...

    def start(self, rank: int, reason: str | None = None) -> None: ...
    def restart(self, w: Worker, why: str) -> None: ...
    def kill(self, w: Worker, reason: str) -> bool: ...


class Resize:
    def __init__(self, run: ResizeHost):
        self.run = run
        self.to: int | None = None  # the size being reached, until it is
        self.starts: deque[Start] = deque()  # ranks still to start
        self.mode: str | None = None  # "independent" | "restart": the resize under way
        self.frm = 0  # restart mode: the size before

    def cap(self) -> int:
        return worker_cap(self.run.settings.max_workers)

    def launch(self, n: int) -> None:
        """The run's first n ranks, queued (started by `advance`, the first batch at once)."""
        self.queue(Start(rank) for rank in range(n))

    def queue(self, starts: Iterable[Start]) -> None:
        """Ranks to start over the ticks (the first batch at once): the first launch, or a
        multi-node round's ranks (supervisor.nodes.cluster)."""
        self.starts.extend(starts)
        self._start_some()

    def wait_s(self, tick: float) -> float:
        """How long the serve loop may wait: not at all while ranks wait to be started, unless
        they wait for the forkserver (supervisor.preload: its word wakes the loop), else a tick."""
        return 0.0 if self.starts and not self.run.launcher.loading() else tick

    def busy(self) -> bool:
        """A resize is under way (the run must not be judged finished meanwhile)."""
        return self.to is not None or bool(self.starts)

    def begin(self, n: int) -> str:
        """What the command replies; raises CommandError when the run cannot be resized."""
        run = self.run
        if run.state is not RunState.RUNNING or self.busy():
            raise CommandError(f"cannot resize while the run is {run.state}"
                               + (" (a resize is under way)" if self.busy() else ""))
        if run.nodes is not None:
            raise CommandError("a run on several nodes keeps its size "
                               "(torch's rendezvous fixed every node's ranks)")
        cur = len(run.workers)
        if n == cur:
            raise CommandError(f"the run already has {n} workers")
        cap = self.cap()
        if n > max(cap, cur):
            raise CommandError(f"cannot resize to {n} workers: at most {cap} on this machine "
                               "(MPWATCH_MAX_WORKERS)")
        if run.opts.resize_mode == "independent":
            self.mode = "independent"
            run.world = n
            if n > cur:
                self.starts.extend(Start(rank) for rank in range(cur, n))
            else:
                self.to = n
                for rank in range(n, cur):
                    run.kill(run.workers[rank], "resize")
            run.log.event(Event.RESIZED, frm=cur, to=n, mode="independent")
            self.advance()
            return f"resizing from {cur} to {n} workers (independent)"
        self.mode, self.to = "restart", n
        with run.lock:
            run.state = RunState.RESIZING
        for w in run.workers.values():
            run.kill(w, "resize")
        return f"resizing from {cur} to {n} workers: stopping all, then starting {n}"

    def cancel(self) -> None:
        """The run is being stopped (or a node's round ends): no queued rank is started any more."""
        self.starts.clear()
        self.to = None
        self.mode = None

    def advance(self) -> None:
        """Each tick while resizing: start the next ranks; forget the ranks that are gone; in
        restart mode, once every worker has ended, queue the new world."""
        run = self.run
        if run.state is RunState.STOPPING or run.state is RunState.FINISHED:
            self.cancel()
            return
        if self.starts:
            self._start_some()
            return
        n = self.to
        if n is None:
            return
        if self.mode == "independent":
            with run.lock:
                for r in [r for r, w in run.workers.items() if r >= n and not run.groups.lingers(w)]:
                    del run.workers[r]
            if all(r < n for r in run.workers):
                self.to = self.mode = None
            return
        if any(run.groups.lingers(w) for w in run.workers.values()):
            return
        self._start_world(n)

    def _start_world(self, n: int) -> None:
        """Restart mode, every worker gone: the new world's ranks are queued on a fresh port."""
        run = self.run
        self.frm = len(run.workers)
        with run.lock:
            for r in [r for r in run.workers if r >= n]:
                del run.workers[r]
        run.world = n
        run.master_port = spawn.free_port()  # the old rendezvous may linger in TIME_WAIT
        self.starts.extend(Start(rank, "resized" if rank in run.workers else None) for rank in range(n))
        self.to = None
        self._start_some()

    def _start_some(self) -> None:
        run = self.run
        if run.launcher.loading():
            return  # the forkserver still imports: every rank starts forked once it is ready
        until = time.monotonic() + START_BUDGET_S
        for _ in range(min(START_PER_TICK, len(self.starts))):
            s = self.starts.popleft()
            w = run.workers.get(s.rank)
            if s.restart is not None and w is not None:
                run.restart(w, s.restart)
            else:
                run.start(s.rank, reason=s.reason)
            if time.monotonic() > until:
                break
        if self.starts or self.mode != "restart":
            if not self.starts and self.to is None:
                self.mode = None
            return
        with run.lock:  # restart mode: the whole new world is started
            run.state = RunState.RUNNING
        self.mode = None
        run.log.event(Event.RESIZED, frm=self.frm, to=run.world, mode="restart", master_port=run.master_port)
