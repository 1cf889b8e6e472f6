"""The main screen's findings: every standing alert (a stuck rank, a straggler, a full disk, an
OOM; the GPUs' after the run's own, the worst first) under the GPU panel, each read WHOLE where
the user looks: wrapped under its mark, never cut, said once with the status's own numbers (a
notice of a new finding says its headline only: tui.app, text.eventtext's notice). Where the
room (`budget` lines) cannot hold them all, the last line says what it leaves out and that `a`
opens every one whole (tui.screens.alerts). Any finding the status carries in `alerts` (or a
GPU's) shows here this way: a new finding needs nothing of this module. Pure; UI thread.
"""
from __future__ import annotations

from mpwatch.contract import Status
from mpwatch.tui.render import segs
from mpwatch.tui.render.glyphs import Glyphs
from mpwatch.tui.render.gpu_rows import SEVERITY_STYLE, alert_items
from mpwatch.tui.render.segs import Line, line

MORE_KEY = "a"  # the key that opens every alert whole (tui.keys)


def budget(height: int, small: bool) -> int:
    """The lines the findings may take: one on a short terminal; a straggler's whole sentence
    (three lines at 80 columns) and a GPU's alert at 24 rows; more on a tall one."""
    return 1 if small else 4 if height < 30 else 8


def alert_block(sev: str, text: str, g: Glyphs, width: int) -> list[Line]:
    """One alert, whole: its mark, then its text wrapped under itself."""
    mark = f"{g.alert.get(sev, '!')} "
    return segs.wrap(line((mark, SEVERITY_STYLE.get(sev, "yellow")), (text, "")), width, indent=len(mark))


def finding_lines(status: Status, g: Glyphs, width: int, room: int) -> list[Line]:
    """Every standing alert, whole, in `room` lines; past it, what is left out and `a`."""
    items = alert_items(status)
    blocks = [alert_block(sev, text, g, width) for sev, text in items]
    if sum(len(b) for b in blocks) <= room:
        return [ln for b in blocks for ln in b]
    out: list[Line] = []
    shown = 0
    for b in blocks:  # whole alerts, leaving the last line to say the rest
        if len(out) + len(b) > room - 1:
            break
        out += b
        shown += 1
    left = len(items) - shown
    if shown:
        return [*out, line((f"+{left} more alert{'s' if left > 1 else ''}: {MORE_KEY} shows every one whole",
                            "bright_black"))]
    # the first alone is taller than the room: its first lines, the last of them saying so
    hint = line((f" ({MORE_KEY}: whole" + (f"; +{left - 1} more" if left > 1 else "") + ")", "bright_black"))
    head = blocks[0][:room]
    return [*head[:-1], segs.cut(head[-1] + line(("…", "")), width - segs.width(hint)) + hint]
