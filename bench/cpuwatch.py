"""CPU seconds of a running mpwatch run, sampled from /proc on a thread of the bench: the
supervisor, the worker process, and the worker's sender thread (mpwatch-sender). Noise
moves wall-clock throughput by percents; it hardly moves CPU seconds, so these figures
show mpwatch's cost where a throughput ratio cannot.

Processes are read from /proc/PID/stat (utime+stime of all their threads, in clock ticks);
the sender thread from its schedstat (nanoseconds). The sender thread is found by its
name: in /proc/PID/task/TID/comm when the worker names it natively, else from py-spy's
dump (which prints each thread's OS id and Python name).
Samples stop when the processes end; the caller picks the window it wants (training).
"""
from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass

from mpwatch.probes import pyspy

SAMPLE_S = 0.1
SENDER = "mpwatch-sender"
_CLK = os.sysconf("SC_CLK_TCK")
_PYSPY_THREAD = re.compile(r'^Thread (\d+) \([^)]*\): "' + SENDER + '"', re.M)


def cpu_seconds(stat_path: str) -> float | None:
    """utime + stime of a /proc/.../stat file, in seconds (its own threads, not its children)."""
    try:
        with open(stat_path, encoding="ascii", errors="replace") as f:
            text = f.read()
        fields = text[text.rindex(")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / _CLK
    except (OSError, ValueError, IndexError):
        return None


def thread_cpu_seconds(pid: int, tid: int) -> float | None:
    """A thread's CPU time: /proc/PID/task/TID/schedstat in nanoseconds where the kernel keeps
    it (a sender thread spends milliseconds a second: stat's 10 ms ticks would round them
    away), else its stat."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return cpu_seconds(f"/proc/{pid}/task/{tid}/stat")


def sender_tid(pid: int) -> int | None:
    """The OS thread id of the worker's sender thread, None until it runs."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().strip() == SENDER:
                    return int(tid)
        except OSError:
            continue
    exe = pyspy.find()
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "dump", "--pid", str(pid), "--nonblocking"], capture_output=True, text=True,
                             timeout=20, stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = _PYSPY_THREAD.search(out)
    return int(m.group(1)) if m else None


@dataclass
class Sample:
    t: float  # wall clock
    supervisor: float | None  # CPU seconds so far
    worker: float | None
    sender: float | None


class CpuWatch:
    """Samples every SAMPLE_S from start() to stop(); `worker_pid` is asked for until known,
    the sender thread is looked for once the worker reports."""

    def __init__(self, supervisor_pid: int, worker_pid, reporting):
        self.supervisor_pid = supervisor_pid
        self.worker_pid = worker_pid  # () -> int | None
        self.reporting = reporting  # () -> bool: the worker has reported (its sender runs)
        self.samples: list[Sample] = []
        self.tid: int | None = None
        self._pid: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-cpuwatch", daemon=True)
        self._next_lookup = 0.0

    def start(self) -> CpuWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            now = time.time()
            if self._pid is None:
                self._pid = self.worker_pid()
            if self._pid is not None and self.tid is None and now >= self._next_lookup and self.reporting():
                self.tid = sender_tid(self._pid)
                self._next_lookup = time.time() + 0.5  # a py-spy dump is not free
            sup = cpu_seconds(f"/proc/{self.supervisor_pid}/stat")
            wrk = cpu_seconds(f"/proc/{self._pid}/stat") if self._pid else None
            snd = thread_cpu_seconds(self._pid, self.tid) if self._pid and self.tid else None
            if sup is None and wrk is None:
                if self.samples:
                    break  # the run is over
                continue
            self.samples.append(Sample(now, sup, wrk, snd))

    def per_second(self, t0: float, t1: float) -> dict[str, float] | None:
        """CPU seconds per wall second of each part between t0 and t1 (the first and last
        samples inside the window where all three were read); None without two such."""
        inside = [s for s in self.samples if t0 <= s.t <= t1 and None not in (s.supervisor, s.worker, s.sender)]
        if len(inside) < 2 or inside[-1].t - inside[0].t < 1.0:
            return None
        a, b = inside[0], inside[-1]
        span = b.t - a.t
        return {"supervisor": (b.supervisor - a.supervisor) / span, "worker": (b.worker - a.worker) / span,
                "sender": (b.sender - a.sender) / span, "span": span}
