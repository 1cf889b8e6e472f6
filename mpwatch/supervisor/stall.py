"""Is a worker stalled? A pure decision, kept free of processes so it tests directly.
(Exit causes: supervisor/exits.py; steps/s: the attempt's rate window, supervisor/workers.py.)"""
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
    return max(t for t in (started, last_report, resumed) if t is not None)
