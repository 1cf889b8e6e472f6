"""The one set of value coercers: values read back from JSON (a frame, events.jsonl, run.json,
final.json) that a peer, an older mpwatch or a run cut short may have written otherwise. Each
is taken only when it has the expected type (a bool is no number here), else None. Pure and
stdlib only: the worker side's contract.protocol imports it.
"""
from __future__ import annotations

NON_FINITE = ("nan", "inf", "-inf")  # how JSON spells the floats it has no number for (protocol.encode_lossy)
TIME_MAX = 1e11  # a wall time past this (the year 5138) is none: time.localtime() refuses 1e300


def as_str(v: object) -> str | None:
    return v if isinstance(v, str) else None


def as_int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def as_float(v: object) -> float | None:
    """A number as a float; an int too large for one is none."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        return float(v)
    except OverflowError:  # an int with hundreds of digits
        return None


def as_time(v: object) -> float | None:
    """A wall time (seconds since the epoch) a clock can show: from 0 to TIME_MAX, else None."""
    t = as_float(v)
    return t if t is not None and 0.0 <= t < TIME_MAX else None


def as_number(v: object) -> float | None:
    """A loss, a metric or a timing as a float: a number, or the string a non-finite one was
    written as ("nan", "inf", "-inf")."""
    if isinstance(v, str):
        return float(v) if v in NON_FINITE else None
    return as_float(v)
