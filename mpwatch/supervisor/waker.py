"""The serve loop's wait (supervisor.core): a tick at most, and less when something happens. A
command submitted from a control thread, any signal the supervisor handles (its handlers only
note the signal: Python writes its number here, set_wakeup_fd), a child's end (SIGCHLD), and
the forkserver's word (its socket: a forked worker ended) each end the wait at once, so that a
rank that ended is restarted now, not at the next tick, and a stop is not a tick late.
"""
from __future__ import annotations

import select
import signal
import socket


class Waker:
    def __init__(self) -> None:
        self._r, self._w = socket.socketpair()
        self._r.setblocking(False)
        self._w.setblocking(False)

    def arm(self) -> None:
        """Main thread, once its handlers are in: every handled signal wakes the loop, a child's
        end too (SIGCHLD is ignored by default: a handler that does nothing makes it one)."""
        signal.signal(signal.SIGCHLD, _nothing)
        signal.siginterrupt(signal.SIGCHLD, False)  # other threads' calls restart (NVML's): it only wakes
        signal.set_wakeup_fd(self._w.fileno(), warn_on_full_buffer=False)

    def wake(self) -> None:
        """Any thread."""
        try:
            self._w.send(b"\0")
        except OSError:  # full (it is awake already) or closed
            pass

    def wait(self, timeout: float, fds: list[int] | None = None) -> None:
        """Until woken, one of `fds` is readable, or `timeout`; then the wake-ups are drained."""
        if timeout > 0:
            try:
                select.select([self._r.fileno(), *(fds or [])], [], [], timeout)
            except (OSError, ValueError):  # a descriptor closed meanwhile: a tick's wait is lost, no more
                pass
        try:
            while self._r.recv(4096):
                pass
        except OSError:
            pass

    def close(self) -> None:
        try:
            signal.set_wakeup_fd(-1)
        except ValueError:  # not the main thread: the process ends with it anyway
            pass
        self._r.close()
        self._w.close()


def _nothing(signum: int, frame: object) -> None:
    """SIGCHLD's handler: the wake-up is what it is for."""
