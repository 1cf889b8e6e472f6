"""Process groups and their kills: the role torch elastic's SubprocessHandler plays, for a
whole process tree.

Each worker leads its own process group (supervisor.spawn starts it in a new session); groups that
descendants made for themselves (setsid) are found by the sampler and tracked too. A kill
is the stop signal (--stop-signal, SIGTERM by default) to the worker's own process alone, so
its handler can save while its DataLoader workers still run (and SIGCONT to its group, so a
paused one sees it), then SIGKILL to every group of the rank at a deadline checked each
tick; should the worker end first, what is left of its groups gets SIGTERM then. Nothing here
ever blocks on a process. A group is forgotten once empty; one that outlives its SIGKILL by
UNKILLABLE_S is reported, never waited for.

A process that left its worker's tree and group (a classic daemon) is found by the run's
marks (supervisor.workers.marks) at `kill`, `stop` and a worker's end, and adopted as a foreign
group (`adopt_marked`). The watchdog (supervisor.workers.watchdog, its own session) hears of
every group: should the supervisor die, even by SIGKILL, it kills those still listed and
sweeps the run's marks.

Main thread only, except `tell_watchdog` (the sampler tells it of a foreign group first).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from mpwatch.contract import Event
from mpwatch.probes import procs
from mpwatch.supervisor.eventlog import EventLog
from mpwatch.supervisor.workers.marks import Marks, env_mark
from mpwatch.supervisor.workers.worker import Worker

UNKILLABLE_S = 5.0  # after SIGKILL, this long before a survivor is reported
LEFTOVER_GRACE_S = 2.0  # a worker that ended by itself: its leftover children get at most this


@dataclass(eq=False)
class Group:
    rank: int  # whose process tree it belongs to
    foreign: bool  # made by a descendant (setsid), not the worker's own
    active: bool = False  # being ended: forgotten once empty
    termed: bool = False  # SIGTERM sent
    deadline: float | None = None  # SIGKILL then (monotonic)
    killed: float | None = None
    reported: bool = False  # survivors of the SIGKILL were reported


def _kill(kill: Callable[[int, int], None], target: int, sig: int) -> bool | None:
    """`sig` to a process (os.kill) or a process group (os.killpg): True when sent, False when
    there is no such process or group, None when it is not ours to signal."""
    try:
        kill(target, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return None
    return True


def send(pgid: int | None, sig: int) -> bool:
    """`sig` to a process group."""
    return pgid is not None and _kill(os.killpg, pgid, sig) is True


def signal_process(pid: int | None, sig: int) -> bool:
    """`sig` to one process, not its group."""
    return pid is not None and _kill(os.kill, pid, sig) is True


def group_alive(pgid: int) -> bool:
    there = _kill(os.killpg, pgid, 0)  # None: another user's members, there
    # killpg succeeds on zombies too; only count members that can still run.
    return there is None or (there and bool(procs.group_members(pgid)))


class ProcessGroups:
    def __init__(self, workers: dict[int, Worker], lock: threading.RLock, log: EventLog,
                 stop_signal: str = "SIGTERM", marks: Marks | None = None):
        self.workers = workers
        self.lock = lock
        self.log = log
        self.stop_signal = signal.Signals[stop_signal]  # what a worker's own process gets first
        self.marks = marks  # every process of the run, by its marks (supervisor.workers.marks)
        self._groups: dict[int, Group] = {}
        self._wd_lock = threading.Lock()
        self._watchdog: subprocess.Popen[bytes] | None = None

    # ---------------------------------------------------------------- watchdog ----
    def start_watchdog(self) -> None:
        m = self.marks
        marks = [*(e.decode() for e in env_mark(m.run_id, m.supervisor_pid)),
                 *([str(m.cgroup)] if m.cgroup else [])] if m else []
        self._watchdog = subprocess.Popen(
            [sys.executable, "-I", "-S", str(Path(__file__).with_name("watchdog.py")), *marks],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True,
        )

    def tell_watchdog(self, line: str) -> None:
        with self._wd_lock:
            if self._watchdog is None or self._watchdog.stdin is None:
                return
            try:
                self._watchdog.stdin.write(line.encode() + b"\n")
                self._watchdog.stdin.flush()
            except (OSError, ValueError):
                pass

    def close(self) -> None:
        """End the watchdog: groups still listed are ones we could not kill; it tries too,
        and sweeps the run's marks once more. Then the run's cgroup goes, once empty."""
        wd = self._watchdog
        if wd is not None:
            try:
                if wd.stdin is not None:
                    wd.stdin.close()
            except OSError:
                pass
            try:
                wd.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self.marks is not None:
            self.marks.close()

    # ------------------------------------------------------------------ groups ----
    def watch(self, pgid: int, rank: int, foreign: bool = False) -> None:
        self._groups[pgid] = Group(rank, foreign)
        self.tell_watchdog(f"+{pgid}")

    def pending(self, pgid: int | None) -> bool:
        """The group is still there and not given up on."""
        g = self._groups.get(pgid) if pgid is not None else None
        return g is not None and not g.reported

    def lingers(self, w: Worker) -> bool:
        """Its process runs, or its process group is still being ended."""
        return w.alive or self.pending(w.pgid)

    def ending(self) -> bool:
        """Some group is being ended and not given up on yet."""
        return any(g.active and not g.reported for g in self._groups.values())

    def end(self, pgid: int, deadline: float, term: bool = True) -> None:
        """KILL a group at the deadline (an earlier one stands); TERM (and CONT) it now unless
        `term` is False (its worker has its stop signal and its grace first)."""
        g = self._groups.get(pgid)
        if g is None:
            return
        if not g.active:
            g.active = True
            g.deadline = deadline
            send(pgid, signal.SIGCONT)
        if term and not g.termed:
            g.termed = True
            send(pgid, signal.SIGTERM)
            send(pgid, signal.SIGCONT)

    def adopt_foreign(self) -> None:
        """Track the groups the sampler found under a worker; end them if it is going."""
        for w in list(self.workers.values()):
            if not w.foreign_groups:  # the common case, read without the lock (the sampler only adds)
                continue
            with self.lock:
                new = [g for g in w.foreign_groups if g not in self._groups]
            for pgid in new:
                self.watch(pgid, w.rank, foreign=True)
                if w.attempt.kill_deadline is not None or not w.alive:
                    self.end(pgid, w.attempt.kill_deadline or time.monotonic(), term=not w.alive)

    def adopt_marked(self, rank: int | None, deadline: float) -> int:
        """End, as foreign groups, the run's processes (of one rank when given) that no tracked
        group holds: a daemon that left its worker's tree and group. How many were found."""
        if self.marks is None:
            return 0
        found = 0
        mine = os.getpgrp()
        for pid, owner in self.marks.processes(rank).items():
            try:
                pgid = os.getpgid(pid)
            except OSError:
                continue
            if pgid == mine:  # never our own group: that one process alone
                signal_process(pid, signal.SIGKILL)
                continue
            g = self._groups.get(pgid)
            # A worker's own group is the kill's (SIGKILL at its deadline, its children keep
            # the grace to finish a save); one being ended or given up on is handled.
            if g is not None and (g.active or g.reported or not g.foreign):
                continue
            found += 1
            if g is None:
                self.watch(pgid, owner if owner is not None else -1, foreign=True)
            self.end(pgid, deadline)
        return found

    # ------------------------------------------------------------------- kills ----
    def kill(self, w: Worker, reason: str, grace: float, sweep: bool = True) -> bool:
        """The stop signal to the worker's own process (then CONT to its group, so a paused
        one sees it), KILL to all of the rank's groups after grace; with sweep, the rank's
        processes that left them get TERM now and KILL then too (adopt_marked)."""
        if not w.alive:
            return False
        a = w.attempt
        name = self.stop_signal.name
        with self.lock:
            a.kill_reason = reason
            a.kill_deadline = deadline = time.monotonic() + grace
            a.stop_signal, a.stop_sent = name, time.time()
            foreign = list(w.foreign_groups)
        signal_process(a.pid, self.stop_signal)
        send(a.pgid, signal.SIGCONT)
        for pgid in foreign:
            self.end(pgid, deadline, term=False)
        self.log.event(Event.STOP_SIGNAL, w.rank, pid=a.pid, signal=name, reason=reason, grace=grace)
        if sweep:
            self.adopt_marked(w.rank, deadline)
        return True

    def kill_now(self, w: Worker) -> None:
        """SIGKILL at once (a second Ctrl-C)."""
        if w.alive:
            send(w.pgid, signal.SIGKILL)
            w.attempt.hard_killed = time.monotonic()

    def enforce(self, w: Worker, now: float) -> None:
        """A running worker past its kill deadline gets SIGKILL; one that survives it is reported."""
        a = w.attempt
        if a.kill_deadline is not None and now >= a.kill_deadline and a.hard_killed is None:
            send(a.pgid, signal.SIGKILL)
            a.hard_killed = now
        elif (a.hard_killed is not None and now - a.hard_killed > UNKILLABLE_S
              and a.unkillable is None and a.pid is not None and a.pgid is not None):
            # Name every member still there (a stuck child too), not just the worker.
            self._report_unkillable(w, [p.pid for p in procs.group_members(a.pgid)] or [a.pid])

    def after_exit(self, w: Worker, grace: float) -> None:
        """The worker's process ended: what is left of its groups must not outlive it."""
        a = w.attempt
        now = time.monotonic()
        # Killed by mpwatch: its leftovers got SIGTERM with it and keep what is left of its
        # grace period. Ended by itself: they get a short one.
        deadline = ((a.kill_deadline or now) if a.kill_reason is not None
                    else now + min(grace, LEFTOVER_GRACE_S))
        g = self._groups.get(a.pgid) if a.pgid is not None else None
        if g is not None:
            g.active = True
            if not g.termed:  # the worker got its stop signal alone: now its leftovers get theirs
                g.termed = True
                send(a.pgid, signal.SIGTERM)
                send(a.pgid, signal.SIGCONT)
            if g.deadline is None:
                g.deadline = deadline
        with self.lock:
            foreign = list(w.foreign_groups)
        for pgid in foreign:
            self.end(pgid, deadline)
        self.adopt_marked(w.rank, deadline)

    def reap(self, now: float) -> None:
        """Forget emptied groups, SIGKILL those past their deadline, report survivors."""
        for pgid, g in list(self._groups.items()):
            if not g.active:
                continue
            if not group_alive(pgid):
                del self._groups[pgid]
                with self.lock:
                    for w in self.workers.values():
                        w.foreign_groups.discard(pgid)
                self.tell_watchdog(f"-{pgid}")
            elif g.killed is None and g.deadline is not None and now >= g.deadline:
                send(pgid, signal.SIGKILL)
                g.killed = now
            elif g.killed is not None and now - g.killed > UNKILLABLE_S and not g.reported:
                g.reported = True
                owner = self.workers.get(g.rank)
                if owner is not None and (g.foreign or owner.pgid == pgid):  # not a rank started again since
                    self._report_unkillable(owner, [p.pid for p in procs.group_members(pgid)])

    def _report_unkillable(self, w: Worker, pids: list[int]) -> None:
        who: list[dict[str, Any]] = []
        for pid in pids:
            try:
                p = psutil.Process(pid)
                who.append({"pid": pid, "status": p.status(), "name": p.name()})
            except psutil.Error:
                continue
        w.attempt.unkillable = who
        if who:
            desc = ", ".join(f"pid {x['pid']} ({x['name']}, state {x['status']})" for x in who)
            self.log.alert("unkillable", f"rank {w.rank}: could not kill {desc}; it is left behind",
                           rank=w.rank, processes=who)
