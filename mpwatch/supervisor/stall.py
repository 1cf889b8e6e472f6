"""Pure decisions about worker liveness, kept free of processes so they test directly."""
from __future__ import annotations


def is_stalled(now: float, *, timeout: float, started: float, connected: bool,
               last_report: float | None, resumed: float | None = None) -> bool:
    """A worker is stalled when it speaks our protocol but has made no progress
    (no report) for `timeout` seconds. A worker that never connected has no heartbeat to
    miss and is never stalled for silence. Time spent paused does not count."""
    if not connected and last_report is None:
        return False
    since = max(t for t in (started, last_report, resumed) if t is not None)
    return now - since > timeout


def steps_per_second(samples) -> float | None:
    """Rate from (monotonic time, step) samples, oldest first; None until two differ."""
    if len(samples) < 2:
        return None
    (t0, s0), (t1, s1) = samples[0], samples[-1]
    if t1 - t0 <= 0 or s0 is None or s1 is None:
        return None
    return max(0.0, (s1 - s0) / (t1 - t0))


def exit_cause(returncode: int) -> tuple[int | None, str | None]:
    """(exit code, signal name) of a Popen returncode."""
    import signal

    if returncode is not None and returncode < 0:
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
