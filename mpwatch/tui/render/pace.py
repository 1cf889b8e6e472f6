"""A rank's pace on screen (contract.status's Pace): the PACE cell of the wide worker table (its
slowest phase against the median rank) and the detail view's lines (seconds a step, each phase
and its speed against the others, what slows its process). Pure; the UI thread."""
from __future__ import annotations

from mpwatch.contract import Pace, WorkerStatus
from mpwatch.text import fmt, safe
from mpwatch.tui.render.glyphs import Glyphs
from mpwatch.tui.render.segs import BLANK, Cell, cell, line

SHORT = {"forward": "fwd", "backward": "bwd", "optimizer": "opt", "compute": "comp", "other": "oth"}
WIDTH = 9  # the PACE column's (tui.render.columns)
SLOW = 0.8  # a phase slower than this against the median rank is named in the cell
VERY_SLOW = 0.5


def ratio(speed: float) -> str:
    """A speed against the median rank, as it is: '0.05' (twenty times slower), '1.00', '3.20';
    under 0.01, '1/670' (670 times slower: two decimals would read 0.00)."""
    return f"1/{round(1 / speed)}" if 0 < speed < 0.01 else f"{speed:.2f}"


def slowest(p: Pace) -> tuple[str, float] | None:
    """The phase in which the rank is slowest against the median rank, and that speed."""
    if not p["relative"]:
        return None
    name = min(p["relative"], key=lambda k: p["relative"][k])
    return name, p["relative"][name]


def pace_cell(w: WorkerStatus) -> Cell:
    """'1.00', or '0.05 fwd' when a phase is slower than SLOW times the median rank's ('1/670 fwd'
    670 times slower)."""
    p = w["pace"]
    got = None if p is None else slowest(p)
    if got is None:
        return BLANK
    name, speed = got
    if speed >= SLOW:
        return cell(f"{min(speed, 9.99):.2f}")
    style = "bold yellow" if speed < VERY_SLOW else "yellow"
    said = ratio(speed)
    return line((f"{said} {SHORT.get(name, name[:4])[:WIDTH - 1 - len(said)]}", style))


def pace_text(w: WorkerStatus, g: Glyphs) -> str:
    """'pace: 188 ms a step: data 158 ms ×0.01 · compute 30 ms ×5.98 (×: speed against the
    median rank; 107 steps in 20s)', and what slows its process on a line of its own (the
    detail view; an ASCII terminal's 'x' and separator)."""
    times = "×" if g.unicode else "x"
    p = w["pace"]
    if p is None:
        return ("pace: not stepping for long enough yet" if w["state"] == "running"
                else f"pace: none while {w['state']}")
    rel = p["relative"]
    parts = []
    for name, secs in sorted(p["phases"].items(), key=lambda kv: -kv[1]):
        if name == "other" and secs < 0.01 * p["step_s"]:
            continue  # every moment of its steps is in a phase
        speed = rel.get(name)
        shown = f"{safe.printable(name, 40)} {fmt.span(secs)}"
        parts.append(shown + (f" {times}{ratio(speed)}" if speed is not None else ""))
    legend = f"{times}: speed against the median rank; " if rel else ""
    text = (f"pace: {fmt.span(p['step_s'])} a step: " + g.sep.join(parts)
            + f" ({legend}{p['steps']} steps in {fmt.age(p['window_s'])})")
    return text + (f"\n{p['why']}" if p["why"] else "")
