"""Which ranks a control request reaches, the step it takes effect at, and its frames sent:
what the tunables' changes (supervisor.control.room) and the actions' requests
(supervisor.control.actions) share. Called under the run's lock, but `send`.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

from mpwatch.supervisor.control import plan
from mpwatch.supervisor.control.records import Request
from mpwatch.supervisor.errors import CommandError
from mpwatch.supervisor.workers.worker import Worker

CONNECTS = "it connects at its first report(), tunable() or should_checkpoint()"


def reachable(ws: list[Worker]) -> tuple[list[Worker], list[int]]:
    """The ranks of `ws` whose own process has its channel open, and the others."""
    reach = [w for w in ws if w.alive and w.attempt.peer is not None]
    got = {w.rank for w in reach}
    return reach, [w.rank for w in ws if w.rank not in got]


def away(workers: dict[int, Worker], ranks: list[int]) -> str:
    """Why these ranks cannot be asked, in words."""
    if all(not workers[r].alive for r in ranks):
        return "not running"
    return f"not connected ({CONNECTS}; a worker of an older mpwatch never is)"


def step_for(reach: list[Worker], collective: bool, at: int | None, flush_s: float) -> int | None:
    """The step a request takes effect at: `at` (refused when a rank is past it), else one
    picked from the pace (supervisor.control.plan) when it goes to every rank, else None."""
    now = time.monotonic()
    paces = {w.rank: plan.Pace(w.reports.step, w.attempt.steps_per_second(),
                               None if w.attempt.last_report is None else now - w.attempt.last_report)
             for w in reach}
    if at is not None:
        passed = plan.passed(paces, at)
        if passed:
            r, s = min(passed.items())
            raise CommandError(f"step {at} is past: rank {r} is at step {s}")
        return at
    return plan.pick_step(list(paces.values()), flush_s) if collective else None


def send(reach: list[Worker], frame: Callable[[Worker], bytes], req: Request,
         lock: threading.RLock) -> list[int]:
    """Each rank's frame to its channel (outside the lock); the ranks it could not be sent to
    (not asked then)."""
    lost = []
    for w in reach:
        peer = w.attempt.peer
        if peer is None or not peer.send(frame(w)):
            lost.append(w.rank)
    if lost:
        with lock:
            req.asked.difference_update(lost)
    return lost
