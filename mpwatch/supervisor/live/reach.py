"""Which ranks a live request reaches, the step it takes effect at, and its frames sent:
what the tunables' changes (supervisor.live.room) and the actions' requests
(supervisor.live.actions) share. Called under the run's lock, but `send`.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

from mpwatch.contract import protocol
from mpwatch.supervisor.errors import CommandError
from mpwatch.supervisor.live import plan
from mpwatch.supervisor.live.records import Request
from mpwatch.supervisor.workers.worker import Worker
from mpwatch.text import fmt

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


def step_for(reach: list[Worker], collective: bool, at: int | None, flush_s: float) -> plan.Plan:
    """The step a request takes effect at: `at` (refused when a rank is past it, or past what the
    wire carries), else one picked from the pace of the ranks that agree (supervisor.live.plan)
    when it goes to every rank, else None; with the ranks it was not picked from."""
    now = time.monotonic()
    paces = {w.rank: plan.Pace(w.reports.step, w.attempt.steps_per_second(),
                               None if w.attempt.last_report is None else now - w.attempt.last_report)
             for w in reach}
    if at is not None:
        if at > protocol.MAX_STEP:
            raise CommandError(f"step {at} is past 2^53, the largest step a request carries")
        passed = plan.passed(paces, at)
        if passed:
            r, s = min(passed.items())
            raise CommandError(f"step {at} is past: rank {r} is at step {s}")
        return plan.Plan(at, plan.split(paces)[1])
    return plan.pick_step(paces, flush_s) if collective else plan.Plan(None, {})


def apart_notes(picked: plan.Plan) -> list[str]:
    """What a reply says of the ranks the step was not picked from: one far ahead of the others
    (not followed), one with no step."""
    if picked.step is None:
        return []
    step = picked.step
    past = {r: s for r, s in picked.apart.items() if s is not None and s >= step}
    none = sorted(r for r, s in picked.apart.items() if s is None)
    notes = [f"rank {r} at step {s} is far ahead of the others: not followed; past step {step}, it takes "
             "it at once" for r, s in sorted(past.items())]
    if none:
        notes.append(f"{fmt.ranks(none)} reported no step (none yet, or one past 2^53, which is not sent): "
                     f"it takes it once its own count reaches {step}")
    return notes


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
