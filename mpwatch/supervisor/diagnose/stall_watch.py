"""Stalled workers and slow starts: who is stalled, what it is doing, and which rank the others wait for.

Main thread, each tick (`check`). A worker that reported before and then stays silent for
--stall-timeout (supervisor.diagnose.stall decides) becomes stalled, once: the event says what it does
(/proc, probes.hang) and every thread of it and its children is dumped (supervisor.diagnose.dumps).
A worker that said hello and has not reported --startup-timeout after its start is a slow start:
a `slow_start` event and one dump, never a state change (it is not stalled: it never reported).
While it stays stalled its diagnosis is refreshed every STALL_PROBE_S; a report ends the
stall (supervisor.workers.ledger). While any rank is stalled, contract.culprit names the likely culprit of a
collective hang, as one `hang` alert per finding.
"""
from __future__ import annotations

import threading
import time

from mpwatch.contract import ALIVE_STATES, Event, StallInfo, State, culprit
from mpwatch.probes import hang
from mpwatch.supervisor.diagnose import flight_join, stall
from mpwatch.supervisor.diagnose.dumps import Dumper
from mpwatch.supervisor.diagnose.flight_join import FlightJoin
from mpwatch.supervisor.eventlog import EventLog
from mpwatch.supervisor.workers.worker import Worker

STALL_PROBE_S = 2.0  # how often a stalled worker's diagnosis (busy/blocked/...) is refreshed
# A deadline passed without a finding (a worker that never said hello has no slow start): looked
# at again after this long, not every tick.
RECHECK_S = 1.0


class StallWatch:
    def __init__(self, workers: dict[int, Worker], lock: threading.RLock, log: EventLog, dumper: Dumper,
                 timeout: float, startup_timeout: float = 600.0):
        self.workers = workers
        self.lock = lock
        self.log = log
        self.dumper = dumper
        self.timeout = timeout
        self.startup_timeout = startup_timeout
        # the standing finding (key, text): said again only when it changes
        self._named: tuple[str, str] | None = None
        self._paused: set[int] = set()  # the paused ranks the standing finding names
        self._quiet_until = 0.0  # a paused culprit was resumed: its peers get a stall timeout to report again
        # MPWATCH_NCCL_FLIGHT=1: the flight recorder's dumps, read once per hang
        # (supervisor.diagnose.flight_join)
        self.flight = FlightJoin(dumper.store.dir) if dumper.settings.nccl_flight else None
        self._due = 0.0  # nothing can be found before this (monotonic)...
        self._moves = -1  # ...while the workers' moves are still this many (Worker.moves)

    def check(self, now: float) -> None:
        """Main loop, each tick: new stalls, fresh diagnoses, and the culprit while any. Until the
        earliest moment a worker could be found stalled or a slow start, and while no worker
        moved (Worker.moves: a start, a resume, a first report), there is nothing to look at."""
        if now < self._due and Worker.moves == self._moves:
            return
        self._moves, due = Worker.moves, now + RECHECK_S * 60
        any_stalled = False
        for w in list(self.workers.values()):
            a, state = w.attempt, w.state
            if a.exit_seen is not None or not w.alive:  # ended: its exit is being recorded, not hung
                continue
            if state is State.STALLED:
                any_stalled = True
                if now - a.stall_probed >= STALL_PROBE_S:
                    self._diagnose(w, now)  # busy can turn blocked and back: keep it current
                continue
            if state is not State.RUNNING and state is not State.STARTING:
                continue
            if a.stall is not None:  # resumed after a pause while stalled: that stall is over
                with self.lock:
                    a.stall = None
            if stall.is_stalled(now, timeout=self.timeout, first_report=a.first_report,
                                last_report=a.last_report, resumed=a.resumed):
                self._stalled(w, now)
                any_stalled = True
            elif a.slow_start is None and not a.children and stall.is_slow_start(  # children report: started
                    now, limit=self.startup_timeout, started=a.started, connected=a.connected,
                    first_report=a.first_report, resumed=a.resumed):
                self._slow_start(w, now)
            else:
                due = min(due, max(self._deadline(w), now + RECHECK_S))
        self._due = 0.0 if any_stalled else due  # a stall is looked at every tick
        if any_stalled:
            self._check_culprit(now)
            return
        if self._named is not None:  # every rank reports again (or ended): the finding is over
            self.log.end_alert(self._named[0])
            self._named = None
        self._paused = set()
        if self.flight is not None:
            self.flight.reset()

    def _deadline(self, w: Worker) -> float:
        """The earliest it could be found stalled (or a slow start): its reports only move it later."""
        a = w.attempt
        if a.first_report is not None:
            return stall.silent_since(a.first_report, a.last_report, a.resumed) + self.timeout
        if a.slow_start is None:
            return stall.silent_since(a.started, None, a.resumed) + self.startup_timeout
        return float("inf")  # a slow start said: nothing more until its first report (a move)

    def _stalled(self, w: Worker, now: float) -> None:
        """Once per stall: say so with what it is doing, and dump every thread of it and its children."""
        a = w.attempt
        silent = now - stall.silent_since(a.started, a.last_report, a.resumed)
        d = self._diagnose(w, now)
        with self.lock:
            a.stall = StallInfo(since=time.time() - silent, step=w.reports.step, kind=d["kind"],
                                detail=d["detail"], wchan=d.get("wchan"), gpu=bool(d.get("gpu")))
            w.transition(State.STALLED, "no report for the stall timeout", silent_for=round(silent, 1),
                         step=w.reports.step, pid=w.pid, kind=d["kind"], detail=d["detail"],
                         wchan=d.get("wchan"))
        self.dumper.dump_async([w], reason="stall")

    def _slow_start(self, w: Worker, now: float) -> None:
        """Once per attempt: no first report within the start-up limit. Said, and dumped once."""
        a = w.attempt
        waited = now - stall.silent_since(a.started, None, a.resumed)
        d = self._diagnose(w, now)
        with self.lock:
            a.slow_start = StallInfo(since=a.started_wall, step=None, limit=self.startup_timeout,
                                     kind=d["kind"], detail=d["detail"],
                                     wchan=d.get("wchan"), gpu=bool(d.get("gpu")))
        self.log.event(Event.SLOW_START, w.rank, silent_for=round(waited, 1), limit=self.startup_timeout,
                       pid=w.pid, kind=d["kind"], detail=d["detail"], wchan=d.get("wchan"))
        self.dumper.dump_async([w], reason="slow start")

    def _diagnose(self, w: Worker, now: float) -> hang.Diagnosis:
        """Classify a stalled worker from /proc (one read: this runs on the main loop)."""
        a = w.attempt
        gpu = bool(w.reports.cuda) or bool(a.stall is not None and a.stall.get("gpu"))
        d = hang.probe(a.pid or 0, cpu_percent=None if a.proc_info is None else a.proc_info["cpu_percent"],
                       cuda=gpu, reads=1)
        a.stall_probed = now
        with self.lock:
            if w.state is State.STALLED and a.stall is not None:
                a.stall["kind"], a.stall["detail"] = d["kind"], d["detail"]
                a.stall["wchan"], a.stall["gpu"] = d.get("wchan"), bool(d.get("gpu"))
        return d

    def _check_culprit(self, now: float) -> None:
        """While ranks are stalled, name the rank(s) the others wait for: one finding per
        culprit set, updated in place as it learns more (the peers' collective, the
        culprit's frame, more ranks waiting). A paused culprit that is resumed ends its
        finding: its peers report again within a flush, and until they do (a stall timeout
        at most) no rank is blamed for being behind them."""
        with self.lock:
            resumed = {r for r in self._paused
                       if r in self.workers and self.workers[r].state is not State.PAUSED}
            views = [{"rank": w.rank, "step": w.reports.step, "state": w.state,
                      "paused_at": w.attempt.paused_at, "dist": w.attempt.dist,
                      "stall": dict(w.attempt.stall or {})} for w in self.workers.values()]
        s = culprit.analyze(views)
        if self.flight is not None:
            self.flight.start([w.rank for w in list(self.workers.values()) if w.state in ALIVE_STATES])
            found = self.flight.result()
            if s is not None and found is not None:
                s = flight_join.join(s, found, views)
        if resumed and self._named is not None:
            self.log.end_alert(self._named[0])
            self._named, self._paused, self._quiet_until = None, set(), now + self.timeout
        if not s or not s["culprits"] or s["text"] is None or now < self._quiet_until:
            return
        key = "hang:" + ",".join(map(str, s["culprits"]))
        self._paused = {r for r in s["culprits"]
                        if any(v["rank"] == r and v["state"] is State.PAUSED for v in views)}
        if self._named == (key, s["text"]):
            return
        if self._named is not None and self._named[0] != key:
            self.log.end_alert(self._named[0])  # another culprit now: the old finding no longer holds
        self._named = (key, s["text"])
        self.log.alert("hang", s["text"], culprits=s["culprits"], waiting=s["waiting"], key=key)
