"""Values read back from JSON that an older or a cut-short run may have written otherwise:
each is taken only when it has the expected type (a bool is no number here)."""
from __future__ import annotations


def as_str(v: object) -> str | None:
    return v if isinstance(v, str) else None


def as_int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def as_float(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
