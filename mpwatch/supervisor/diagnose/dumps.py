"""Stack dumps of a worker and its children (on a stall, or asked for), on a dump thread.

faulthandler on SIGUSR1 (armed in every worker at start-up) writes every thread's Python
stack; the dump names the user's innermost frame and the collective it waits in; with
MPWATCH_NCCL_FLIGHT=1 the NCCL flight recorder is asked for a dump too (supervisor.diagnose.flight),
and py-spy adds native stacks (MPWATCH_PYSPY; both switches: settings.Settings). A dump thread
never signals a process group and takes the run's lock only to note where the worker is stuck.
"""
from __future__ import annotations

import threading
from pathlib import Path

from mpwatch.contract import Event, State
from mpwatch.probes import procs, stacks
from mpwatch.rundir import textfiles, writer
from mpwatch.settings import Settings
from mpwatch.supervisor import boundary
from mpwatch.supervisor.diagnose import flight
from mpwatch.supervisor.eventlog import EventLog
from mpwatch.supervisor.workers.worker import Worker
from mpwatch.text.stackfmt import DumpSummary, native_collective, summarize

READ_MAX = 8 << 20  # bytes of a dump read back to summarise it (the worker writes into it: bounded)


def read_dump(path: Path) -> str:
    """A dump's first READ_MAX bytes as text: a regular file only (a worker may have put a FIFO
    or a link in its place). Raises OSError."""
    with textfiles.open_regular(path) as f:
        return f.read(READ_MAX).decode("utf-8", errors="replace")


class Dumper:
    def __init__(self, store: writer.RunStore, lock: threading.RLock, log: EventLog, settings: Settings):
        self.store = store
        self.settings = settings  # py-spy's policy, the flight recorder
        self.lock = lock
        self.log = log
        # One dump of a rank at a time: py-spy (native stacks) holds a process in a tracing stop
        # for seconds, and a dump started meanwhile would find it stopped and get no Python stack.
        self._rank_locks: dict[int, threading.Lock] = {}
        self._guard = threading.Lock()

    def dump_async(self, ws: list[Worker], reason: str) -> None:
        def run() -> None:
            for w in ws:
                try:
                    self.dump(w, reason)
                except Exception as exc:  # noqa: BLE001 - a bug costs this dump, never the others
                    boundary.failed("stack dumps", exc, f"stack dump of rank {w.rank}")
        threading.Thread(target=run, name="mpwatch-dump", daemon=True).start()

    def dump(self, w: Worker, reason: str) -> Path | None:
        """Dump every thread of the worker and of its children; the file, or None when it
        has no process. Waits for an earlier dump of the same rank to finish."""
        with self._guard:
            lock = self._rank_locks.setdefault(w.rank, threading.Lock())
        with lock:
            return self._dump(w, reason)

    def _dump(self, w: Worker, reason: str) -> Path | None:
        pid = w.pid
        if pid is None:
            return None
        pids = [pid] + procs.descendants(pid)
        paths = self.store.rank_paths(w.rank)
        # py-spy --native stops the process for a moment: by default only for a stall dump.
        pyspy_policy = self.settings.pyspy
        native = pyspy_policy == "always" or (pyspy_policy == "stall" and reason == "stall")
        fr: list[str] = []
        if self.settings.nccl_flight:  # unchecked without NCCL: see supervisor.diagnose.flight
            why = flight.trigger(paths.dir, w.rank)
            fr = [f"NCCL flight recorder: {why or f'asked for rank-{w.rank}/{flight.TRACE_PREFIX}{w.rank}'}"]
        path, notes = stacks.capture(pids, paths.stack_file, self.store.new_dump(w.rank), label=f"({reason})")
        notes = notes + fr
        where = DumpSummary()
        with boundary.rank_input(w.rank, "its stack dump"):  # the rank's own words (its faulthandler's)
            try:
                where = summarize(read_dump(path), pid)
            except OSError:
                pass
        rel = str(path.relative_to(self.store.dir))
        with self.lock:
            w.last_dump = str(path)
            a = w.attempt
            # Where a stalled worker (or a slow start) is stuck, for the status and the culprit.
            info = a.stall if w.state is State.STALLED else a.slow_start if reason == "slow start" else None
            if w.pid == pid and info is not None:
                info["where"], info["innermost"] = where.get("where"), where.get("innermost")
                info["collective"], info["dump"] = where.get("collective"), rel
        self.log.event(Event.DUMP, w.rank, path=rel, pid=pid, pids=pids, reason=reason, notes=notes,
                       where=where.get("where"), innermost=where.get("innermost"),
                       collective=where.get("collective"), native=native)
        if native:  # announced first: py-spy takes seconds on a process with torch loaded
            stacks.add_native(path, pids)
            self._native_collective(w, pid, path)
        return path

    def _native_collective(self, w: Worker, pid: int, path: Path) -> None:
        """The native stack may name the collective the Python stack could not (DDP's
        all-reduce inside backward()): the stall learns it, and the culprit finding with it."""
        if w.attempt.stall is None or w.attempt.stall.get("collective"):
            return
        try:
            coll = native_collective(read_dump(path), pid)
        except OSError:
            return
        with self.lock:
            stall = w.attempt.stall
            if coll is not None and w.pid == pid and w.state is State.STALLED and stall is not None:
                stall["collective"] = coll
