"""Which characters the terminal can show: Unicode blocks, or an ASCII fallback.

The choice follows the locale (LC_ALL, then LC_CTYPE, then LANG), not Python's own
encoding: Python coerces a C locale to UTF-8 for itself (PEP 538: it sets
LC_CTYPE=C.UTF-8 in its own environment), but the terminal at the other end of an SSH
session may still be plain ASCII; so a C.UTF-8 LC_CTYPE over a C or missing LANG reads as
the C locale it came from. MPWATCH_ASCII=1 forces ASCII.
"""
from __future__ import annotations

import os
from dataclasses import dataclass


def locale_is_utf8(env=None) -> bool:
    env = os.environ if env is None else env
    if env.get("MPWATCH_ASCII") not in (None, "", "0"):
        return False
    def utf8(value: str) -> bool:
        return "utf8" in value.lower().replace("-", "")

    if env.get("LC_ALL"):
        return utf8(env["LC_ALL"])
    ctype, lang = env.get("LC_CTYPE"), env.get("LANG")
    if ctype:
        coerced = ctype.lower().replace("-", "") in ("c.utf8", "utf8") and (lang or "C") in ("C", "POSIX")
        return utf8(ctype) and not coerced
    return bool(lang) and utf8(lang)


@dataclass(frozen=True)
class Glyphs:
    unicode: bool
    spark: str  # levels, lowest first
    phase: dict  # phase name -> fill character
    bar_full: str
    bar_empty: str
    state: dict  # worker state -> symbol
    child: str
    folded: str
    unfolded: str
    dot_selected: str
    dot_other: str


UNICODE = Glyphs(
    unicode=True,
    spark="▁▂▃▄▅▆▇█",
    phase={"data": "▓", "compute": "█", "sync": "▒", "other": "░"},
    bar_full="█", bar_empty="░",
    state={"starting": "◌", "running": "●", "stalled": "◆", "paused": "‖", "restarting": "↻",
           "exited": "✓", "failed": "✗", "killed": "■"},
    child="└", folded="▸", unfolded="▾",
    dot_selected="●", dot_other="·",
)

ASCII = Glyphs(
    unicode=False,
    spark="_.-~=+*#",
    phase={"data": "d", "compute": "c", "sync": "s", "other": "."},
    bar_full="#", bar_empty=".",
    state={"starting": "~", "running": ">", "stalled": "!", "paused": "=", "restarting": "@",
           "exited": "+", "failed": "x", "killed": "#"},
    child="`", folded="+", unfolded="-",
    dot_selected="*", dot_other=".",
)


def pick(env=None) -> Glyphs:
    return UNICODE if locale_is_utf8(env) else ASCII
