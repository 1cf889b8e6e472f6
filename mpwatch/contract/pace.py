"""A rank's pace: its time a step and in each phase of the step over its latest steps, from
the phase totals its reports carry. Pure; the supervisor feeds it on the channel hub's threads
(under the run's lock) and reads it on any thread under that lock; the replay feeds it from the
run's report events on its own.

The worker side sends, with its reports, the seconds its process has spent in each phase since
it started (`mpwatch.phase()`'s names, or the automatic steps' data/forward/backward/optimizer).
Each report event the supervisor writes (at most one a second a rank: its last step, the time
of the report() call and those totals) is a sample here. Consecutive samples make stretches of at
least STRETCH_STEPS steps and STRETCH_S seconds; a stretch gives seconds a step in each phase,
and "other", the rest of the step. A pace is the median of each over the last WINDOW
stretches: a pause of any length (a checkpoint save, an evaluation pass, a GC) falls in one
stretch and moves no median, and start-up never counts (the totals before the first sample are
no stretch). A rank that stops stepping (stalled, paused) has no pace once its last stretch is
stale: old times are no evidence.

A script whose steps grow by design (a curriculum, a growing sequence length) says how much work
a step holds with a `work` metric (`mpwatch.report(work=tokens)`): each sample carries the latest,
each stretch the mean of its two ends, and a pace the median (`Pace.work`), so that the slowdown
finding (contract.slowdown) judges the time a unit of work, not a step.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from statistics import median

from mpwatch.contract.status import Pace

STRETCH_STEPS = 5  # a stretch holds at least this many steps (a flush's partial phase is a fifth at most)
STRETCH_S = 1.0  # and lasts at least this long
WINDOW = 12  # the stretches a pace is the median of
MIN_STRETCHES = 6  # fewer: no pace yet
STALE_S = 10.0  # no stretch ended for this long, nor 3 usual stretches: no pace (it does not step)
OTHER = "other"  # the step's time in no phase
WORK_METRIC = "work"  # the metric a script says a step's work with (tokens, samples, a sequence length)


class Stretch:
    """Consecutive steps of one rank: their number, seconds, and seconds a step in each phase."""

    __slots__ = ("end", "per_phase", "seconds", "steps", "work")

    def __init__(self, end: float, steps: int, seconds: float, per_phase: dict[str, float],
                 work: float | None = None):
        self.end = end
        self.steps = steps
        self.seconds = seconds
        self.per_phase = per_phase
        self.work = work  # the work a step held (the `work` metric), None where the script says none

    @property
    def step_s(self) -> float:
        return self.seconds / self.steps


class PaceWindow:
    """One rank's samples folded into stretches, and its pace (the latest WINDOW of them)."""

    def __init__(self) -> None:
        self.start: tuple[float, int, dict[str, float]] | None = None  # where the open stretch began
        self.work: float | None = None  # the latest `work` metric, and the one where the open stretch began
        self.start_work: float | None = None
        self.stretches: deque[Stretch] = deque(maxlen=WINDOW)
        self._pace: Pace | None = None  # cached until the next stretch

    def reset(self) -> None:
        """A new process of the rank: its totals start again."""
        self.start = None
        self.work = self.start_work = None
        self.stretches.clear()
        self._pace = None

    def add(self, ts: float, step: int | None, phases: Mapping[str, float] | None,
            work: float | None = None) -> None:
        """A sample: the report's time (wall clock), its step, the process's phase totals, and
        the `work` metric where the script reports one (else the last it reported stands)."""
        work = work if work is not None and math.isfinite(work) and work > 0 else None
        if work is not None:
            self.work = work
        if step is None or not phases:
            return
        now = (ts, step, dict(phases))
        if self.start is None:
            self.start, self.start_work = now, self.work
            return
        t0, s0, p0 = self.start
        if step < s0 or ts < t0 or any(v < p0.get(k, 0.0) for k, v in now[2].items()):
            self.reset()  # a restart (its step or totals went back): what came before is another process's
            self.start, self.work = now, work
            self.start_work = work
            return
        steps, seconds = step - s0, ts - t0
        if steps < STRETCH_STEPS or seconds < STRETCH_S:
            return
        per = {k: (v - p0.get(k, 0.0)) / steps for k, v in now[2].items()}
        # the rest of the step (added to a phase the script itself names "other")
        per[OTHER] = per.get(OTHER, 0.0) + max(0.0, seconds / steps - sum(per.values()))
        held = [w for w in (self.start_work, self.work) if w is not None]
        self.stretches.append(Stretch(ts, steps, seconds, per, sum(held) / len(held) if held else None))
        self.start, self.start_work = now, self.work
        self._pace = None

    def pace(self, now: float) -> Pace | None:
        """The pace at wall-clock time `now`; None with too few stretches or when they are stale."""
        got = self.stretches
        if len(got) < MIN_STRETCHES:
            return None
        usual = median(s.seconds for s in got)
        if now - got[-1].end > max(STALE_S, 3 * usual):
            return None
        if self._pace is None:
            self._pace = _pace(list(got))
        p = self._pace
        out = Pace(window_s=p["window_s"], steps=p["steps"], step_s=p["step_s"], phases=dict(p["phases"]),
                   relative={}, why=None)  # a copy: readers fill relative and why
        if "work" in p:
            out["work"] = p["work"]
        return out


def _pace(got: list[Stretch]) -> Pace:
    names = sorted({k for s in got for k in s.per_phase})
    phases = {k: round(median(s.per_phase.get(k, 0.0) for s in got), 6) for k in names}
    first = got[0]
    out = Pace(window_s=round(got[-1].end - first.end + first.seconds, 3), steps=sum(s.steps for s in got),
               step_s=round(median(s.step_s for s in got), 6), phases=phases, relative={}, why=None)
    works = [s.work for s in got if s.work is not None]
    if len(works) == len(got):  # every stretch says its work (a script that began saying it: not yet)
        out["work"] = round(median(works), 6)
    return out
