"""Which characters the terminal can show: Unicode blocks, or an ASCII fallback.

The choice follows the locale (LC_ALL, then LC_CTYPE, then LANG), not Python's own
encoding: Python coerces a C locale to UTF-8 for itself (PEP 538: it sets
LC_CTYPE=C.UTF-8 in its own environment), but the terminal at the other end of an SSH
session may still be plain ASCII; so a C.UTF-8 LC_CTYPE over a C or missing LANG reads as
the C locale it came from. MPWATCH_ASCII=1 (settings.Settings.ascii) forces ASCII. Each
shape differs from its neighbours by its character, not only its colour, so every screen
reads under NO_COLOR too. Pure; read on the UI thread.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from mpwatch.contract import State


def locale_is_utf8(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env

    def utf8(value: str) -> bool:
        return "utf8" in value.lower().replace("-", "")

    lc_all = env.get("LC_ALL")
    if lc_all:
        return utf8(lc_all)
    ctype, lang = env.get("LC_CTYPE"), env.get("LANG")
    if ctype:
        coerced = ctype.lower().replace("-", "") in ("c.utf8", "utf8") and (lang or "C") in ("C", "POSIX")
        return utf8(ctype) and not coerced
    return lang is not None and utf8(lang)


@dataclass(frozen=True)
class Glyphs:
    unicode: bool
    spark: str  # levels, lowest first
    phase: dict[str, str]  # phase name -> fill character
    bar_full: str
    bar_empty: str
    state: dict[str, str]  # worker state -> symbol
    child: str
    folded: str
    unfolded: str
    dot_selected: str
    dot_other: str
    mem: dict[str, str]  # a GPU memory bar's parts (MemoryBreakdown's keys, free) -> fill
    collision: str  # after the ranks of a GPU two or more ranks call their own
    alert: dict[str, str]  # alert severity -> mark
    mark: dict[str, str]  # GpuMark kind -> marker on the GPU screen's time axis
    capacity: str  # the capacity line of the memory chart
    stack: str  # fills of the memory chart's ranks, in turn (neighbours differ)
    outside: str  # the memory chart's fill for processes outside the run
    sep: str  # between the parts of a line: " · "
    ellipsis: str  # where a text was cut
    rule: str  # a horizontal line


def _glyphs(ascii_only: bool) -> Glyphs:
    """The Unicode set, or its ASCII fallback: each glyph is written beside its fallback."""
    def g(uni: str, asc: str) -> str:
        return asc if ascii_only else uni

    def each(pairs: dict[str, tuple[str, str]]) -> dict[str, str]:
        return {name: g(*pair) for name, pair in pairs.items()}

    return Glyphs(
        unicode=not ascii_only,
        spark=g("▁▂▃▄▅▆▇█", "_.-~=+*#"),
        phase=each({"data": ("▓", "d"), "compute": ("█", "c"), "sync": ("▒", "s"), "other": ("░", ".")}),
        bar_full=g("█", "#"), bar_empty=g("░", "."),
        state=each({State.STARTING: ("◌", "~"), State.RUNNING: ("●", ">"), State.STALLED: ("◆", "!"),
                    State.PAUSED: ("‖", "="), State.RESTARTING: ("↻", "@"), State.EXITED: ("✓", "+"),
                    State.FAILED: ("✗", "x"), State.KILLED: ("■", "#")}),
        child=g("└", "`"), folded=g("▸", "+"), unfolded=g("▾", "-"),
        dot_selected=g("●", "*"), dot_other=g("·", "."),
        mem=each({"allocated": ("█", "#"), "cached": ("▓", "="), "other": ("▒", "-"), "outside": ("▚", "x"),
                  "free": ("░", ".")}),
        collision=g("⚠", "!"),
        alert=each({"error": ("✗", "X"), "warning": ("▲", "!"), "info": ("ℹ", "i")}),
        mark=each({"proc_started": ("↑", "^"), "proc_exited": ("↓", "v"), "alert": ("▲", "!"),
                   "alloc_retry": ("r", "r"), "oom": ("✗", "X")}),
        capacity=g("─", "-"),
        stack=g("█▓", "#%"),
        outside=g("▚", "x"),
        sep=g(" · ", " | "),
        ellipsis=g("…", "~"),
        rule=g("─", "-"),
    )


UNICODE = _glyphs(ascii_only=False)
ASCII = _glyphs(ascii_only=True)


def pick(env: Mapping[str, str] | None = None, *, ascii_only: bool = False) -> Glyphs:
    """ASCII when asked (ascii_only: the MPWATCH_ASCII setting) or when the locale is not UTF-8."""
    return UNICODE if not ascii_only and locale_is_utf8(env) else ASCII
