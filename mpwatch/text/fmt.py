"""Numbers for people: bytes, durations, losses and rates, in one place for every screen
and message (the CLI, the headless lines, alert texts and the TUI). Pure; no clock.

Two sizes of bytes: `size` for table cells ("19.6G", binary units, at most 5 characters)
and `size_long` for sentences ("19.6 GiB"). Unknown values are N/A, never zero.
"""
from __future__ import annotations

import math

NA = "N/A"


def size(n: float | None, na: str = "") -> str:
    """Bytes in at most 5 characters: 812M, 19.6G, 1.0T (binary units; one decimal below 100,
    so a GPU's 19.6G is not rounded to 20G)."""
    if not isinstance(n, (int, float)) or isinstance(n, bool) or not math.isfinite(n):
        return na
    v = float(n)
    for unit in ("B", "K", "M", "G", "T"):
        if abs(v) < 1000 or unit == "T":
            return f"{v:.0f}{unit}" if unit == "B" or abs(v) >= 99.95 else f"{v:.1f}{unit}"
        v /= 1024
    return na  # pragma: no cover - the loop always returns


def size_long(n: float | None, na: str = NA) -> str:
    """Bytes for a sentence: 512 B, 1.5 KiB, 19.6 GiB."""
    if not isinstance(n, (int, float)) or isinstance(n, bool) or not math.isfinite(n):
        return na
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(v) < 1024:
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{v:.1f} TiB"


# A length of time is said in the first unit whose bound it is under: (bound, seconds a unit, format).
_Units = tuple[tuple[float, float, str], ...]
_AGE: _Units = ((10, 1, "{:.1f}s"), (120, 1, "{:.0f}s"), (7200, 60, "{:.0f}m"), (math.inf, 3600, "{:.0f}h"))
_SPAN: _Units = ((0.00995, 0.001, "{:.1f} ms"), (0.9995, 0.001, "{:.0f} ms"), (9.95, 1, "{:.1f} s"),
                 (math.inf, 1, "{:.0f} s"))


def _in_units(s: float | None, units: _Units, na: str) -> str:
    if not isinstance(s, (int, float)) or not math.isfinite(s):
        return na
    _, unit, form = next(u for u in units if s < u[0])
    return form.format(s / unit)


def age(s: float | None, na: str = "") -> str:
    """A short duration: 0.3s, 42s, 12m, 3h."""
    return _in_units(s, _AGE, na)


def span(s: float | None, na: str = NA) -> str:
    """A time a step or a phase of it takes: 0.4 ms, 11 ms, 212 ms, 1.2 s, 35 s."""
    return _in_units(s, _SPAN, na)


def duration(s: float | None, na: str = "-") -> str:
    """A run's length: 4m05s, 1h02m03s."""
    if not isinstance(s, (int, float)) or not math.isfinite(s):
        return na
    total = int(s)
    h, rem = divmod(total, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s"


def num(v: object, digits: int = 4, na: str = "") -> str:
    """A step, loss or metric: ints as they are, floats to `digits` significant digits."""
    if v is None:
        return na
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return f"{v:.{digits}g}"
    return str(v)


def num_in(v: object, width: int, digits: int = 4, na: str = "") -> str:
    """num() in at most `width` characters where fewer significant digits make it fit
    (0.0003259 in 8: 0.000326); the shortest form where none does."""
    text = num(v, digits, na)
    while len(text) > width and digits > 1 and isinstance(v, float):
        digits -= 1
        text = num(v, digits, na)
    return text


def speed(v: float | None, na: str = "") -> str:
    """Steps per second: 12.5, 340."""
    if not isinstance(v, (int, float)) or not math.isfinite(v):
        return na
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def pct(v: float | None, na: str = NA) -> str:
    """A percentage already in 0..100: 93%."""
    if not isinstance(v, (int, float)) or not math.isfinite(v):
        return na
    return f"{v:.0f}%"


def ranks(rs: list[int] | set[int]) -> str:
    """`ranks 0-3`, `rank 2`, `ranks 0,2,5`: a set of ranks in words."""
    got = sorted(set(rs))
    if not got:
        return "no rank"
    if len(got) == 1:
        return f"rank {got[0]}"
    if got[-1] - got[0] == len(got) - 1:  # distinct ints: a run without a gap (never a range built)
        return f"ranks {got[0]}-{got[-1]}"
    return "ranks " + ",".join(map(str, got))
