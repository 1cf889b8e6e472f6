"""The `resize` command of a single-node run. In `independent` mode ranks are started or
stopped one by one and the others run on; in `restart` mode (torchrun's way, every rank sees
the new world) all workers are stopped, then N are started on a fresh rendezvous port.
Main thread: `begin` from a control command, `advance` each tick of the serve loop.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from mpwatch.contract.status import Event, RunState
from mpwatch.supervisor import spawn
from mpwatch.supervisor.errors import CommandError

if TYPE_CHECKING:
    from mpwatch.supervisor.core import Run


class Resize:
    def __init__(self, run: Run):
        self.run = run
        self.to: int | None = None  # the size being reached, until it is

    def begin(self, n: int) -> str:
        """What the command replies; raises CommandError when the run cannot be resized."""
        run = self.run
        if run.state is not RunState.RUNNING:
            raise CommandError(f"cannot resize while the run is {run.state}")
        if run.nodes is not None:
            raise CommandError("a run on several nodes keeps its size "
                               "(torch's rendezvous fixed every node's ranks)")
        cur = len(run.workers)
        if n == cur:
            raise CommandError(f"the run already has {n} workers")
        if run.opts.resize_mode == "independent":
            if n > cur:
                run.world = n
                for rank in range(cur, n):
                    run.start(rank)
            else:
                self.to = n
                for rank in range(n, cur):
                    run.kill(run.workers[rank], "resize")
                run.world = n
            run.log.event(Event.RESIZED, frm=cur, to=n, mode="independent")
            return f"resizing from {cur} to {n} workers (independent)"
        self.to = n
        with run.lock:
            run.state = RunState.RESIZING
        for w in run.workers.values():
            run.kill(w, "resize")
        return f"resizing from {cur} to {n} workers: stopping all, then starting {n}"

    def advance(self) -> None:
        """Each tick while resizing: forget the ranks that are gone; in restart mode, once
        every worker has ended, start the new world (unless the run is being stopped)."""
        run, n = self.run, self.to
        if n is None:
            return
        if run.opts.resize_mode == "independent":
            with run.lock:
                for r in [r for r, w in run.workers.items() if r >= n and not run.groups.lingers(w)]:
                    del run.workers[r]
            if all(r < n for r in run.workers):
                self.to = None
            return
        if any(run.groups.lingers(w) for w in run.workers.values()):
            return
        if run.state is RunState.STOPPING:
            self.to = None
            return
        cur = len(run.workers)
        with run.lock:
            for r in [r for r in run.workers if r >= n]:
                del run.workers[r]
        run.world = n
        run.master_port = spawn.free_port()  # the old rendezvous may linger in TIME_WAIT
        for rank in range(n):
            run.start(rank, reason="resized" if rank in run.workers else None)
        with run.lock:
            run.state = RunState.RUNNING
            self.to = None
        run.log.event(Event.RESIZED, frm=cur, to=n, mode="restart", master_port=run.master_port)
