"""The process sampler: its own thread runs the process probe (psutil) over every live
worker once a second (every 2 s past SAMPLE_WIDE workers, as nvitop does: psutil costs
~0.2 ms a process), stores each worker's CPU%, RSS and children, and finds descendants
that left the worker's process group (setsid) so that kills reach them too.
"""
from __future__ import annotations

import threading

from mpwatch.probes import procs
from mpwatch.supervisor import errors
from mpwatch.supervisor.workers.groups import ProcessGroups
from mpwatch.supervisor.workers.worker import Worker

SAMPLE_S = 1.0
SAMPLE_WIDE = 32


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
        while not self._stop.wait(SAMPLE_S * (2 if len(self.workers) > SAMPLE_WIDE else 1)):
            self.sample()

    def sample(self) -> None:
        with self.lock:
            pids = [w.pid for w in self.workers.values() if w.alive and w.pid is not None]
        try:
            infos = self._probe.sample(pids)
        except Exception as exc:  # noqa: BLE001 - a probe must never stop the run
            errors.bug("process sampler", exc)
            return
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
