"""A GPU counter's value for people (contract.gpu_counters): the one formatter of the GPU
panel, the GPU screen and `ctl status`, with the one N/A (text.fmt.NA). Pure.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

from mpwatch.contract import GpuCounter, reading
from mpwatch.text.fmt import NA


def number(v: float | None) -> str:
    """The value alone, whole: "1100"; N/A where unknown."""
    return NA if v is None or not math.isfinite(v) else f"{v:.0f}"


def value(c: GpuCounter, v: float | None) -> str:
    """The value with its unit: "61C", "250W", "80%", "1410 MHz"; N/A where unknown."""
    return NA if v is None else number(v) + c.unit


def text(c: GpuCounter, v: float | None) -> str:
    """The value with its label, as it reads on its own: "util 80%", "61C"."""
    return f"{c.label} {value(c, v)}" if c.label else value(c, v)


def of(view: Mapping[str, object], c: GpuCounter) -> str:
    """A view's counter as text()."""
    return text(c, reading(view, c))
