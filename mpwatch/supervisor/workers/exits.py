"""How a worker's process ended, in words: pure decisions, tested without processes."""
from __future__ import annotations

import signal
from typing import NamedTuple

from mpwatch.contract.status import State


class Exit(NamedTuple):
    state: State  # exited | failed | killed
    exit_code: int | None
    signal: str | None
    cause: str


def exit_cause(returncode: int) -> tuple[int | None, str | None]:
    """(exit code, signal name) of a Popen returncode."""
    if returncode < 0:
        try:
            return None, signal.Signals(-returncode).name
        except ValueError:
            return None, f"signal {-returncode}"
    return returncode, None


def last_error_line(stderr_tail: list[str]) -> str | None:
    """The line a user wants first from a crash: the exception, not the traceback frames."""
    for line in reversed(stderr_tail):
        s = line.strip()
        if s and not s.startswith(("File ", "^", "~")) and s != "Traceback (most recent call last):":
            return s
    return None


def judge(returncode: int, kill_reason: str | None, stderr_tail: list[str]) -> Exit:
    """killed when mpwatch ended it (kill, restart, resize, stop), exited on exit 0, else
    failed, with the signal or code and the last error line of its stderr."""
    code, sig = exit_cause(returncode)
    if kill_reason is not None:
        return Exit(State.KILLED, code, sig, f"{kill_reason} by mpwatch" + (f" ({sig})" if sig else f" (exit {code})"))
    if code == 0:
        return Exit(State.EXITED, code, sig, "exit 0")
    err = last_error_line(stderr_tail)
    how = f"exit {code}" if sig is None else sig if sig.startswith("signal ") else f"signal {sig}"
    return Exit(State.FAILED, code, sig, how + (f": {err}" if err else ""))
