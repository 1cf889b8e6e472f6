"""Sparklines and stacked bars as plain strings (pure: no Textual, no Rich).

Each returns characters only; colour is added by the caller, so the shapes stay readable
with NO_COLOR, and the ASCII glyph set gives the same shapes on a non-UTF-8 terminal.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

PHASES = ("data", "compute", "sync", "other")


LOG_SPAN = 10.0  # positive values spanning this factor or more are drawn on a log scale
# Values closer together than this share of their size are one value: the rounding of a
# float sum (0.09999999999999999 and 0.10000000000000002 for a loss of 0.1) or of float32
# arithmetic (~1e-7), never a trend to draw at full height.
FLAT_SHARE = 1e-6


def flat(lo: float, hi: float) -> bool:
    """lo..hi is one value but for rounding: a range under FLAT_SHARE of the values."""
    return hi - lo <= FLAT_SHARE * max(abs(lo), abs(hi))


def spans_log(lo: float, hi: float) -> bool:
    """Positive values spanning LOG_SPAN or more: read on a log scale."""
    return lo > 0 and hi / lo >= LOG_SPAN


def sparkline(values: Sequence[float | None], width: int, levels: str) -> str:
    """The finite values in at most `width` cells (neighbours averaged, so the whole series
    shows), scaled between their min and max; on a log scale when all are positive and span
    LOG_SPAN or more (a loss from 2.3 to 8e-5 reads falling, not flat then a drop); a flat
    line at mid height when they differ only by rounding (`flat`)."""
    nums = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not nums or width <= 0:
        return ""
    nums = _fit(nums, width)
    lo, hi = min(nums), max(nums)
    top = len(levels) - 1
    if flat(lo, hi):
        return levels[top // 2] * len(nums)
    if spans_log(lo, hi):
        nums, lo, hi = [math.log(v) for v in nums], math.log(lo), math.log(hi)
    return "".join(levels[round((v - lo) / (hi - lo) * top)] for v in nums)


def _fit(nums: list[float], width: int) -> list[float]:
    """`width` values at most: each cell the mean of its share of the series, in order."""
    n = len(nums)
    if n <= width:
        return nums
    return [sum(part) / len(part) for i in range(width)
            if (part := nums[i * n // width:(i + 1) * n // width])]


def sparkline_scaled(values: Iterable[float | None], width: int, levels: str, lo: float, hi: float) -> str:
    """The last `width` values on a fixed scale lo..hi (memory of a capacity, a percentage);
    an unknown value is a blank, not a zero."""
    vals = list(values)[-width:]
    top = len(levels) - 1
    span = (hi - lo) or 1.0
    out = []
    for v in vals:
        if v is None or not math.isfinite(v):
            out.append(" ")
        else:
            out.append(levels[min(max(round((v - lo) / span * top), 0), top)])
    return "".join(out)


def split_width(parts: Sequence[float], width: int) -> list[int]:
    """Share `width` cells among non-negative parts (largest remainder); sums to width when
    any part is positive, else all zero."""
    total = sum(p for p in parts if p > 0)
    if total <= 0 or width <= 0:
        return [0] * len(parts)
    exact = [max(p, 0) / total * width for p in parts]
    cells = [math.floor(x) for x in exact]
    rest = width - sum(cells)
    order = sorted(range(len(parts)), key=lambda i: exact[i] - cells[i], reverse=True)
    for i in order[:rest]:
        cells[i] += 1
    return cells


# The automatic steps' finer phases (mpwatch.auto): the work of a step, in the TIME bar's terms.
COMPUTE_PARTS = frozenset({"forward", "backward", "optimizer"})


def phase_shares(phases: Mapping[str, float] | None, uptime: float | None) -> dict[str, float]:
    """Seconds per phase: data/compute/sync as reported (forward, backward and optimizer as
    compute), the rest of the uptime as other. Unknown phase names count as other; when the
    phases add up to more than the uptime (threads timing in parallel) the sum is the whole."""
    if not phases:
        return {}
    known = {p: 0.0 for p in PHASES}
    for name, secs in phases.items():
        if not isinstance(secs, (int, float)) or secs < 0:
            continue
        key = "compute" if name in COMPUTE_PARTS else name
        known[key if key in known else "other"] += float(secs)
    used = sum(known.values())
    if uptime and uptime > used:
        known["other"] += uptime - used
    return known


def stacked_bar(shares: Mapping[str, float], width: int, fills: Mapping[str, str]) -> list[tuple[str, str]]:
    """[(phase, characters)] of a bar `width` cells wide; empty when nothing is known."""
    if not shares:
        return []
    cells = split_width([shares.get(p, 0.0) for p in PHASES], width)
    return [(p, fills[p] * n) for p, n in zip(PHASES, cells, strict=True) if n]
