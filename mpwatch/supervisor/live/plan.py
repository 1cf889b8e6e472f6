"""The step a request takes effect at on every rank: the rule, pure (no clock, no lock).

A request reaches a rank at its sender's next flush (up to one flush interval), while the
supervisor's view of each rank's step is up to one flush (and the report's age) old. So the
step is put ahead of where the leading rank may already be by then: its last step, plus its
steps per second over the age of that report, two flush intervals and a margin for a busy
machine, plus one. A rank that still learns of it too late says so (mpwatch.worker.control answers
with `late`); it never takes it silently at another step.

The step is picked from the ranks that agree: a rank far ahead of the others (more than
FAR_STEPS and more than the median step past the median: a rank reporting step 10^12 beside
ranks at 100) is not followed, nor one that reports no step (none yet, or one past
protocol.MAX_STEP, which its sender does not send); each is named to the user. The step never
passes protocol.MAX_STEP.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from mpwatch.contract import MAX_STEP

FAR_STEPS = 1000  # a rank fewer steps than this ahead of the median is never "far"
MARGIN_S = 2.0  # on top of two flush intervals: a loaded machine delays senders and readers
AGE_CAP_S = 10.0  # a rank silent longer is paused or stalled: its last pace says little


class Pace(NamedTuple):
    step: int | None  # the last step it reported
    rate: float | None  # steps per second (None: not known yet)
    age: float | None  # seconds since that report


class Plan(NamedTuple):
    step: int | None  # None: each rank takes it at its next call
    apart: dict[int, int | None]  # ranks not followed: rank -> its step (None: it reports none)


def split(paces: dict[int, Pace]) -> tuple[dict[int, tuple[int, Pace]], dict[int, int | None]]:
    """The ranks that agree (rank -> (step, pace)) and the others (rank -> step or None)."""
    known = {r: p.step for r, p in paces.items() if p.step is not None}
    if not known:
        return {}, {}
    mid = sorted(known.values())[(len(known) - 1) // 2]  # the lower median: of two ranks, the one behind
    far = max(FAR_STEPS, mid)
    agree = {r: (s, paces[r]) for r, s in known.items() if s - mid <= far}
    return agree, {r: p.step for r, p in paces.items() if r not in agree}


def pick_step(paces: dict[int, Pace], flush_s: float) -> Plan:
    """The step for a request to every rank of `paces` (rank -> its pace), picked from the
    ranks that agree; None when no rank has reported a step (no step can be shared) or the
    step would pass MAX_STEP."""
    agree, apart = split(paces)
    if not agree:
        return Plan(None, {})
    ahead = 2 * flush_s + MARGIN_S
    lead = max(s + (p.rate or 0.0) * (min(p.age or 0.0, AGE_CAP_S) + ahead) for s, p in agree.values())
    step = math.ceil(lead) + 1
    return Plan(step if step <= MAX_STEP else None, apart)


def passed(paces: dict[int, Pace], step: int) -> dict[int, int]:
    """Ranks that agree (split) and are already past `step` (a step given by hand), with where they are."""
    agree, _ = split(paces)
    return {r: s for r, (s, _) in agree.items() if s >= step}
