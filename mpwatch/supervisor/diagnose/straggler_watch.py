"""The straggler finding of the run's ranks: main thread, every CHECK_S from the serve loop.

The ranks that step in a process group (the worker side says torch.distributed is initialised)
and have a pace (contract.pace) are scored against each other (contract.straggler); a rank
named by `Standing` becomes one alert of kind `straggler`, key `straggler:RANK`, current in the
status at each check (its numbers, what it has cost the run so far) and said again in place (an
event) when what it says changes (the phase, where the others wait, the kind of reason), when its
cost a step moves by DRIFT, or every RESAY_S; it ends when the rank catches up or stops stepping.
A multi-node run names global ranks; the merged view of its nodes (sources.multinode) runs the
same rule over every node's ranks.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from mpwatch.contract import Pace, State, straggler
from mpwatch.supervisor import snapshot
from mpwatch.supervisor.diagnose import slowness
from mpwatch.supervisor.eventlog import EventLog
from mpwatch.supervisor.gpu.watch import GpuWatch
from mpwatch.supervisor.workers.worker import Worker
from mpwatch.text import straggler_text

CHECK_S = 1.0
RESAY_S = 60.0  # a standing finding is said again (an event) at least this often
DRIFT = 0.25  # or once its cost a step moved by this share of what was said


@dataclass(frozen=True)
class Said:
    at: float  # monotonic
    shape: tuple[str, str | None, str | None]  # phase, where the others wait, the kind of reason
    cost_s: float


@dataclass(frozen=True)
class Row:
    """What the watch reads of a rank, under the run's lock."""

    pace: Pace
    step: int | None
    children: int
    why: str | None


class StragglerWatch:
    def __init__(self, workers: dict[int, Worker], lock: threading.RLock, log: EventLog,
                 global_rank: Callable[[int], int] = lambda r: r, gpu: GpuWatch | None = None):
        self.workers = workers
        self.lock = lock
        self.log = log
        self.gpu = gpu  # the GPU watcher: each rank's GPU and its clocks
        self.global_rank = global_rank
        self.standing = straggler.Standing()
        self._said: dict[int, Said] = {}
        self._next = 0.0

    def check(self, now: float) -> None:
        """Main loop, each tick: score the stepping ranks once every CHECK_S, say what changed."""
        if now < self._next:
            return
        self._next = now + CHECK_S
        rows = self._rows()
        got = straggler.scores({r: row.pace for r, row in rows.items()})
        found, ended = self.standing.update(got, {r: row.step for r, row in rows.items()}, time.time())
        for r in ended:
            self._said.pop(r, None)
            self.log.end_alert(f"straggler:{r}")
        for f in found:
            row = rows.get(f.score.rank)
            if row is not None:
                self._say(f, row, now)

    def close(self) -> None:
        """The run stops: each standing finding said once more, with what it cost in the end."""
        for f in self.standing.found.values():
            self._said.pop(f.score.rank, None)
        self._next = 0.0
        self.check(time.monotonic())

    def _rows(self) -> dict[int, Row]:
        wall = time.time()
        out = {}
        gpu = self.gpu
        views = gpu.snapshot()["gpus"] if gpu is not None else []  # its own lock, not the run's
        with self.lock:
            throttled = snapshot.gpu_reasons(gpu, views, self.workers) if gpu is not None else {}
            node = slowness.Node.now({r: w.attempt.proc_info for r, w in self.workers.items()}, throttled)
            for r, w in self.workers.items():
                a = w.attempt
                if w.state is not State.RUNNING or not a.dist:
                    continue
                p = a.pace.pace(wall)
                if p is not None:
                    kids = len(a.proc_info.get("children", [])) if a.proc_info is not None else 0
                    out[r] = Row(p, w.reports.step, kids, node.why(r, a.proc_info))
        return out

    def _say(self, f: straggler.Finding, row: Row, now: float) -> None:
        s = f.score
        why = straggler_text.reason(s, row.why, row.children)
        shape = (s.slow, s.wait, None if why is None else why.split(":")[0])
        g = self.global_rank(s.rank)
        text = straggler_text.describe(s, lambda _: f"rank {g}", why)
        found, key = straggler.info(s, f.lost_s, why, g), f"straggler:{s.rank}"
        last = self._said.get(s.rank)
        if last is not None and last.shape == shape and now - last.at < RESAY_S \
                and abs(s.cost_s - last.cost_s) < DRIFT * last.cost_s:
            self.log.refresh(key, text, found)
            return
        self._said[s.rank] = Said(now, shape, s.cost_s)
        self.log.alert("straggler", text, rank=s.rank, key=key, straggler=found)
