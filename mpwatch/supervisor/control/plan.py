"""The step a request takes effect at on every rank: the rule, pure (no clock, no lock).

A request reaches a rank at its sender's next flush (up to one flush interval), while the
supervisor's view of each rank's step is up to one flush (and the report's age) old. So the
step is put ahead of where the leading rank may already be by then: its last step, plus its
steps per second over the age of that report, two flush intervals and a margin for a busy
machine, plus one. A rank that still learns of it too late says so (mpwatch.worker.control answers
with `late`); it never takes it silently at another step.
"""
from __future__ import annotations

import math
from typing import NamedTuple

MARGIN_S = 2.0  # on top of two flush intervals: a loaded machine delays senders and readers
AGE_CAP_S = 10.0  # a rank silent longer is paused or stalled: its last pace says little


class Pace(NamedTuple):
    step: int | None  # the last step it reported
    rate: float | None  # steps per second (None: not known yet)
    age: float | None  # seconds since that report


def pick_step(paces: list[Pace], flush_s: float) -> int | None:
    """The step for a request to every rank of `paces`; None when one of them has reported
    no step (then each rank takes it at its next call: no step can be shared)."""
    if not paces or any(p.step is None for p in paces):
        return None
    ahead = 2 * flush_s + MARGIN_S
    lead = max(p.step + (p.rate or 0.0) * (min(p.age or 0.0, AGE_CAP_S) + ahead)  # type: ignore[operator]
               for p in paces)
    return math.ceil(lead) + 1


def passed(paces: dict[int, Pace], step: int) -> dict[int, int]:
    """Ranks already past `step` (a step given by hand), with where they are."""
    return {r: p.step for r, p in paces.items() if p.step is not None and p.step >= step}
