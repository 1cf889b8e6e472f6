"""The process sampler: its own thread runs the process probe (psutil) over every live
worker once a second (every 2 s past SAMPLE_WIDE workers, as nvitop does, and every 4 s past
SAMPLE_WIDER: a sample costs ~50 us a worker and a scan of the whole process table, which at
256 workers was a sixth of the supervisor's CPU), stores each worker's CPU%, RSS and children,
and finds descendants that left the worker's process group (setsid) so that kills reach them too.
Past SAMPLE_WIDER workers the process table is scanned for new descendants every other sample
(`tree_s`): the scan was half of a sample's cost there (17 of 30 ms at 256 workers).
"""
from __future__ import annotations

import threading

from mpwatch.probes import procs
from mpwatch.supervisor import boundary
from mpwatch.supervisor.workers.groups import ProcessGroups
from mpwatch.supervisor.workers.worker import Worker

SAMPLE_S = 1.0
SAMPLE_WIDE = 32
SAMPLE_WIDER = 128


def interval(workers: int) -> float:
    """Seconds between two samples of a run of this many workers."""
    return SAMPLE_S * (4 if workers > SAMPLE_WIDER else 2 if workers > SAMPLE_WIDE else 1)


def tree_s(workers: int) -> float:
    """How old the process table's scan may be at a sample: every sample's up to SAMPLE_WIDER
    workers (procs.TREE_S is shorter than their interval), every other sample's past it (one and a
    half intervals: a sample a little early still finds the scan old enough)."""
    return procs.TREE_S if workers <= SAMPLE_WIDER else 1.5 * interval(workers)


class Sampler:
    def __init__(self, workers: dict[int, Worker], lock: threading.RLock, groups: ProcessGroups):
        self.workers = workers
        self.lock = lock
        self.groups = groups
        self._probe = procs.ProcProbe()
        self._stop = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._loop, name="mpwatch-sampler", daemon=True).start()

    def close(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(interval(len(self.workers))):
            with boundary.room("process sampler"):  # a probe must never stop the run
                self.sample()

    def sample(self) -> None:
        with self.lock:
            pids = [w.pid for w in self.workers.values() if w.alive and w.pid is not None]
        infos = self._probe.sample(pids, tree_s(len(self.workers)))
        found: list[tuple[Worker, int]] = []
        with self.lock:
            for w in self.workers.values():
                info = infos.get(w.pid) if w.pid is not None else None
                if info is not None and w.alive:
                    w.attempt.proc_info = info
                    found += [(w, c["pgid"]) for c in info["children"]
                              if c.get("pgid") not in (None, w.pid) and c["pgid"] not in w.foreign_groups]
        for w, pgid in found:
            # The watchdog hears of it first, before anyone sees it tracked: a supervisor
            # SIGKILLed right then must still take this group along. (The main loop does
            # the rest of the bookkeeping on its next tick: ProcessGroups.adopt_foreign.)
            self.groups.tell_watchdog(f"+{pgid}")
            with self.lock:
                w.foreign_groups.add(pgid)
