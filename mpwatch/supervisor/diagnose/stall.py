"""Is a worker stalled, or a slow start? Pure decisions, kept free of processes so they test
directly. (Exit causes: supervisor.workers.exits; steps/s: the attempt's rate window,
supervisor.workers.worker.)

Two clocks, never both: before a worker's first report only the start-up limit applies
(loading data, importing torch on a busy machine, a rendezvous: set-up takes its own time, as
NVIDIA's resiliency extension keeps set-up and step timeouts apart); from its first report on,
the stall timeout does. Time spent paused counts toward neither.
"""
from __future__ import annotations


def is_stalled(now: float, *, timeout: float, first_report: float | None, last_report: float | None,
               resumed: float | None = None) -> bool:
    """A worker is stalled when it reported and then made no progress (no report) for
    `timeout` seconds. A worker that has not reported yet is never stalled."""
    if first_report is None:
        return False
    return now - silent_since(first_report, last_report, resumed) > timeout


def is_slow_start(now: float, *, limit: float, started: float, connected: bool, first_report: float | None,
                  resumed: float | None = None) -> bool:
    """A slow start: a worker that said hello (it speaks the protocol: it will report) and has
    not reported `limit` seconds after its start. One that never said hello (a script that
    never imports mpwatch) has no first report to wait for."""
    if not connected or first_report is not None:
        return False
    return now - silent_since(started, None, resumed) > limit


def silent_since(started: float, last_report: float | None, resumed: float | None) -> float:
    """When the worker last showed progress: its start (or first report), its last report, or its resume."""
    since = started  # (no generator: this runs for every worker on every tick)
    if last_report is not None and last_report > since:
        since = last_report
    if resumed is not None and resumed > since:
        since = resumed
    return since
