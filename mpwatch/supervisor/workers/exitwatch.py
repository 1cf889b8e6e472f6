"""Which workers' processes ended, in one poll(2) a tick of their pidfds (Linux 5.3+): the
exit path then waits (Popen.poll: a waitpid) on those alone, not on every worker every tick,
which at 256 workers was most of the serve loop's own work. A process without a pidfd (an
older kernel, a worker the forkserver forked: it says when one ends) is polled every tick.

Main thread only (supervisor.workers.reaping).
"""
from __future__ import annotations

import os
import select
import subprocess
from collections.abc import KeysView

from mpwatch.supervisor.workers.worker import Proc


class ExitWatch:
    def __init__(self) -> None:
        self._poll = select.poll()
        self._fds: dict[int, int] = {}  # pid -> its pidfd
        self._pids: dict[int, int] = {}  # pidfd -> pid

    def watch(self, proc: Proc) -> None:
        """A worker's process just started (a Popen: the others are polled)."""
        if not isinstance(proc, subprocess.Popen) or proc.pid in self._fds:
            return
        try:
            fd = os.pidfd_open(proc.pid)
        except (OSError, AttributeError):  # no pidfd here: polled every tick
            return
        self._fds[proc.pid] = fd
        self._pids[fd] = proc.pid
        self._poll.register(fd, select.POLLIN)

    def ended(self) -> set[int]:
        """The watched pids whose process has ended (readable until forgotten)."""
        if not self._fds:
            return set()
        return {self._pids[fd] for fd, _ in self._poll.poll(0) if fd in self._pids}

    @property
    def pids(self) -> KeysView[int]:
        """The watched pids (a live view): the others are polled every tick."""
        return self._fds.keys()

    def forget(self, pid: int | None) -> None:
        """Its exit is recorded (reaped): the pidfd goes."""
        fd = self._fds.pop(pid, None) if pid is not None else None
        if fd is not None:
            del self._pids[fd]
            self._poll.unregister(fd)
            os.close(fd)

    def close(self) -> None:
        for pid in list(self._fds):
            self.forget(pid)
