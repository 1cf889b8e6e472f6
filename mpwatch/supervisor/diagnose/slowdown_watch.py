"""The slowdown finding of the run: main thread, every CHECK_S from the serve loop.

The running ranks with a pace (contract.pace) make the run's reading; contract.slowdown keeps its
best and says when it is slower than that by a clear margin, held. While it is (or seems to be),
the watch looks at the node every LOOK_S (probes.node: the processes outside the run, I/O wait,
swapping) and reads its ranks' run delay and their GPUs' clocks: what took the machine
(supervisor.diagnose.machine). The finding is one alert of kind `slowdown`, key `slowdown`, current
in the status at each check (its numbers, the steps it has cost so far) and said again in place (an
event) when what it says changes (the phase, the causes, the outsiders named), when its ratio moves
by DRIFT, or every RESAY_S; it ends when the pace is back. The run's pace against its best is the
status's `run.pace` (`pace` here: replaced at each check, never changed, so any thread may read it).
A new set of ranks (a resize) starts the best again.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from statistics import median

from mpwatch.contract import Outsider, Pace, RunPace, State, slowdown
from mpwatch.probes.node import NodeProbe
from mpwatch.supervisor.diagnose import machine, slowness
from mpwatch.supervisor.eventlog import EventLog
from mpwatch.supervisor.gpu.watch import GpuWatch
from mpwatch.supervisor.workers.worker import Worker
from mpwatch.text import slowdown_text

CHECK_S = 1.0
LOOK_S = 5.0  # the node is looked at this often while the run is slow
RESAY_S = 60.0  # a standing finding is said again (an event) at least this often
DRIFT = 0.1  # or once its ratio moved this much
KEY = "slowdown"


@dataclass(frozen=True)
class Said:
    at: float  # monotonic
    shape: tuple[object, ...]  # the phase, on every rank or not, the causes, the outsiders named
    ratio: float


@dataclass(frozen=True)
class Row:
    """What the watch reads of a running rank, under the run's lock."""

    pace: Pace | None
    step: int | None
    wait: float | None  # its training thread's run delay (the sampler's cpu_wait)
    pids: list[int]  # its process and its descendants (DataLoader workers...)


class SlowdownWatch:
    def __init__(self, workers: dict[int, Worker], lock: threading.RLock, log: EventLog,
                 global_rank: Callable[[int], int] = lambda r: r, gpu: GpuWatch | None = None):
        self.workers = workers
        self.lock = lock
        self.log = log
        self.gpu = gpu
        self.global_rank = global_rank
        self.standing = slowdown.Standing()
        self.probe = NodeProbe()
        self.seen = machine.Seen()
        self.pace: RunPace | None = None  # the status's run.pace
        self._ranks: frozenset[int] = frozenset()
        self._said: Said | None = None
        self._next = 0.0
        self._look_at = 0.0

    def check(self, now: float) -> None:
        """Main loop, each tick: read the run once every CHECK_S, say what changed."""
        if now < self._next:
            return
        self._next = now + CHECK_S
        rows = self._rows()
        if frozenset(self.workers) != self._ranks:  # a resize: another run's pace
            self._ranks = frozenset(self.workers)
            self._restart()
        wall = time.time()
        reading = slowdown.read({r: row.pace for r, row in rows.items() if row.pace is not None},
                                {r: row.step for r, row in rows.items()}, wall)
        found, ended = self.standing.update(reading, wall)
        self.pace = slowdown.run_pace(self.standing)
        if ended:
            self._said = None
            self.log.end_alert(KEY)
        if not self.standing.suspect:
            self.seen, self.probe, self._look_at = machine.Seen(), NodeProbe(), 0.0
        elif now >= self._look_at:
            self._look_at = now + LOOK_S
            self._look(rows)
        if found is not None:
            self._say(found, now)

    def close(self) -> None:
        """The run stops: a standing finding said once more, with what it cost in the end."""
        f = self.standing.found
        if f is not None:
            self._said = None
            self._say(f, time.monotonic())

    def _restart(self) -> None:
        if self.standing.found is not None:
            self.log.end_alert(KEY)
        self.standing, self._said, self.pace = slowdown.Standing(), None, None

    def _rows(self) -> dict[int, Row]:
        wall = time.time()
        out = {}
        with self.lock:
            for r, w in self.workers.items():
                if w.state is not State.RUNNING:
                    continue
                a = w.attempt
                info = a.proc_info
                kids = [c["pid"] for c in info.get("children", [])] if info is not None else []
                out[r] = Row(a.pace.pace(wall), w.reports.step, slowness.cpu_wait(info),
                             ([w.pid] if w.pid is not None else []) + kids)
        return out

    def _look(self, rows: dict[int, Row]) -> None:
        """The node, the ranks' run delay and their GPUs, now (the probe outside the run's lock)."""
        paced = {r: row for r, row in rows.items() if row.pace is not None}
        load = self.probe.look([p for row in rows.values() for p in row.pids])
        kids = [len(row.pids) - 1 for row in paced.values()]
        held, every = self._gpus(set(paced))
        self.seen = machine.Seen(load if load is not None else self.seen.load,
                                 [row.wait for row in paced.values() if row.wait is not None],
                                 int(median(kids)) if kids else 0, held, every)

    def _gpus(self, ranks: set[int]) -> tuple[list[str], bool]:
        gpu = self.gpu
        if gpu is None or not ranks:
            return [], False
        views = gpu.snapshot()["gpus"]  # its own lock, not the run's
        used = {g["index"] for r in ranks if (g := gpu.worker_gpu(r)) is not None and g["index"] is not None}
        return machine.gpus_held(views, used)

    def _say(self, f: slowdown.Finding, now: float) -> None:
        g = f.growth()
        causes, outsiders = machine.causes(self.seen, g)
        ranks = {r: self.global_rank(r) for r in f.now.ranks}
        found = slowdown.info(f, [text for _, text in causes], outsiders, ranks)
        work = (f.now.work, f.best.work) if f.now.work is not None and f.best.work is not None else None
        text = slowdown_text.describe(found, g is not None and g.every, work)
        shape = (found["phase"], g is not None and g.every, tuple(k for k, _ in causes), _named(outsiders))
        last = self._said
        if last is not None and last.shape == shape and now - last.at < RESAY_S \
                and abs(found["ratio"] - last.ratio) < DRIFT:
            self.log.refresh(KEY, text, slowdown=found)
            return
        self._said = Said(now, shape, found["ratio"])
        self.log.alert("slowdown", text, key=KEY, slowdown=found)


def _named(outsiders: list[Outsider]) -> tuple[int, ...]:
    return tuple(sorted(o["pid"] for o in outsiders[:slowdown_text.SHOWN]))

