"""Is a worker stalled? A pure decision, kept free of processes so it tests directly.
(Exit causes: supervisor.workers.exits; steps/s: the attempt's rate window, supervisor.workers.worker.)"""
from __future__ import annotations


def is_stalled(now: float, *, timeout: float, started: float, connected: bool,
               last_report: float | None, resumed: float | None = None) -> bool:
    """A worker is stalled when it speaks our protocol but has made no progress
    (no report) for `timeout` seconds. A worker that never connected has no heartbeat to
    miss and is never stalled for silence. Time spent paused does not count."""
    if not connected and last_report is None:
        return False
    return now - silent_since(started, last_report, resumed) > timeout


def silent_since(started: float, last_report: float | None, resumed: float | None) -> float:
    """When the worker last showed progress: its start, its last report, or its resume."""
    since = started  # (no generator: this runs for every worker on every tick)
    if last_report is not None and last_report > since:
        since = last_report
    if resumed is not None and resumed > since:
        since = resumed
    return since
