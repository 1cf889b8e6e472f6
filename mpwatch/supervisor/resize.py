"""The `resize` command of a single-node run. In `independent` mode ranks are started or
stopped one by one and the others run on; in `restart` mode (torchrun's way, every rank sees
the new world) all workers are stopped, then N are started on a fresh rendezvous port.

Bounded: a run may grow to at most `cap()` workers (MPWATCH_MAX_WORKERS; by default the
larger of 64 and four per CPU or GPU of this machine: a worker per GPU is torchrun's norm and
a few per core is as far as CPU-bound workers go, while 64 lets a small box try a wide run),
never past that by `resize`. New ranks are started START_PER_TICK at a time, a tick apart,
so the control socket and signals are answered meanwhile; `stop` (and a signal) cancels
the ranks not started yet at once.

Main thread: `begin` from a control command, `advance` each tick of the serve loop, `cancel`
from Run.stop.
"""
from __future__ import annotations

import glob
import os
import threading
from collections import deque
from typing import TYPE_CHECKING, Protocol

from mpwatch.contract.status import Event, RunState
from mpwatch.supervisor import spawn
from mpwatch.supervisor.errors import CommandError

if TYPE_CHECKING:
    from mpwatch.settings import Settings
    from mpwatch.supervisor.eventlog import EventLog
    from mpwatch.supervisor.nodes.cluster import Nodes
    from mpwatch.supervisor.options import Options
    from mpwatch.supervisor.workers.groups import ProcessGroups
    from mpwatch.supervisor.workers.worker import Worker

START_PER_TICK = 8  # new ranks started in one tick of the serve loop (each is a fork and an exec)
CAP_FLOOR = 64
PER_CPU = 4  # workers a CPU (or a GPU) of this machine may have
GPU_DEVICES = "/dev/nvidia[0-9]*"


def machine_cap() -> int:
    """The default cap: the larger of 64 and four a CPU or a GPU (counted by their device
    files: no NVML needed)."""
    return max(CAP_FLOOR, PER_CPU * (os.cpu_count() or 1), PER_CPU * len(glob.glob(GPU_DEVICES)))


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

    def start(self, rank: int, reason: str | None = None) -> None: ...
    def kill(self, w: Worker, reason: str) -> bool: ...


class Resize:
    def __init__(self, run: ResizeHost):
        self.run = run
        self.to: int | None = None  # the size being reached, until it is
        self.starts: deque[tuple[int, str | None]] = deque()  # ranks still to start, each with its reason
        self.mode: str | None = None  # "independent" | "restart": the resize under way
        self.frm = 0  # restart mode: the size before

    def cap(self) -> int:
        return self.run.settings.max_workers or machine_cap()

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
                self.starts.extend((rank, None) for rank in range(cur, n))
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
        """The run is being stopped: no rank is started any more."""
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
        self.starts.extend((rank, "resized" if rank in run.workers else None) for rank in range(n))
        self.to = None
        self._start_some()

    def _start_some(self) -> None:
        run = self.run
        for _ in range(min(START_PER_TICK, len(self.starts))):
            rank, reason = self.starts.popleft()
            run.start(rank, reason=reason)
        if self.starts or self.mode != "restart":
            if not self.starts and self.to is None:
                self.mode = None
            return
        with run.lock:  # restart mode: the whole new world is started
            run.state = RunState.RUNNING
        self.mode = None
        run.log.event(Event.RESIZED, frm=self.frm, to=run.world, mode="restart", master_port=run.master_port)
