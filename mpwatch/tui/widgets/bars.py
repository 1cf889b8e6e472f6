"""Sparklines, stacked bars and meters as plain strings (pure: no Textual, no Rich).

Each returns characters only; colour is added by the caller, so the shapes stay readable
with NO_COLOR, and the ASCII glyph set gives the same shapes on a non-UTF-8 terminal.
"""
from __future__ import annotations

import math

PHASES = ("data", "compute", "sync", "other")


def sparkline(values, width: int, levels: str) -> str:
    """The last `width` finite values scaled between their min and max."""
    vals = values[-width:]
    if not all(type(v) is float for v in vals) or not math.isfinite(sum(vals)):  # the usual case is fast
        vals = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)][-width:]
    if not vals:
        return ""
    lo, hi = min(vals), max(vals)
    top = len(levels) - 1
    if hi == lo:
        return levels[top // 2] * len(vals)
    return "".join(levels[round((v - lo) / (hi - lo) * top)] for v in vals)


def split_width(parts: list[float], width: int) -> list[int]:
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


def phase_shares(phases: dict | None, uptime: float | None) -> dict[str, float]:
    """Seconds per phase: data/compute/sync as reported, the rest of the uptime as other.
    Unknown phase names count as other; when the phases add up to more than the uptime
    (threads timing in parallel) the sum is the whole."""
    if not phases:
        return {}
    known = {p: 0.0 for p in PHASES}
    for name, secs in phases.items():
        if not isinstance(secs, (int, float)) or secs < 0:
            continue
        known[name if name in known else "other"] += float(secs)
    used = sum(known.values())
    if uptime and uptime > used:
        known["other"] += uptime - used
    return known


def stacked_bar(shares: dict[str, float], width: int, fills: dict) -> list[tuple[str, str]]:
    """[(phase, characters)] of a bar `width` cells wide; empty when nothing is known."""
    if not shares:
        return []
    cells = split_width([shares.get(p, 0.0) for p in PHASES], width)
    return [(p, fills[p] * n) for p, n in zip(PHASES, cells) if n]


def meter(fraction: float | None, width: int, full: str, empty: str) -> str:
    if fraction is None or width <= 0:
        return ""
    f = min(max(fraction, 0.0), 1.0)
    n = round(f * width)
    return full * n + empty * (width - n)
