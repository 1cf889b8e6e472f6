"""Steps per second that say what a rank does now, from its (time, step) samples: the
supervisor's rule (supervisor.workers.worker) and a replay's (sources.replay.rebuild) alike.
Pure; any thread.

Over the samples' window, oldest to `now`. A rank silent past its usual gap between reports
decays toward 0 (the window's end moves on with `now`); one that has not stepped for QUIET_GAPS
of its usual gaps between steps, and at least QUIET_S, reads 0: a rank blocked behind a paused
peer read 53 steps/s 12 s after its last step, decaying until the stall timeout (issue 40).
"""
from __future__ import annotations

from collections.abc import Sequence

QUIET_S = 2.0  # no step for this long (at least) is no rate, whatever the window held
QUIET_GAPS = 3  # ... nor for this many of the rank's usual gaps between steps (a slow step is no stop)


def last_step(samples: Sequence[tuple[float, int]]) -> tuple[float, float] | None:
    """When the step last moved, and the usual time between two moves; None when it never did."""
    moves, last, prev = 0, None, samples[0][1]
    for t, s in samples[1:]:
        if s != prev:
            moves, last, prev = moves + 1, t, s
    if last is None:
        return None
    return last, (last - samples[0][0]) / moves


def steps_per_second(samples: Sequence[tuple[float, int]], now: float | None = None) -> float | None:
    """None until two samples differ in time; 0 for a rank that has stopped stepping."""
    if len(samples) < 2:
        return None
    (t0, s0), (t1, s1) = samples[0], samples[-1]
    if t1 - t0 <= 0:
        return None
    moved = last_step(samples)
    if now is not None and moved is not None and now - moved[0] > max(QUIET_S, QUIET_GAPS * moved[1]):
        return 0.0
    gap = (t1 - t0) / (len(samples) - 1)  # the usual time between two reports
    end = t1 if now is None else max(t1, now - gap)
    return max(0.0, (s1 - s0) / (end - t0))
