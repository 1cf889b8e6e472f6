"""The replay's timeline strip: the run from start to end across the screen, a mark where a
failure, stall, restart or alert came (the most telling one where several share a cell),
the cursor's cell in reverse video; under it, the cursor's moment and event in words, and
the keys. `strip_line` is pure (tested without an app); the widget shows what it makes.
UI thread.
"""
from __future__ import annotations

from collections.abc import Sequence

from mpwatch.contract import EventFields, State
from mpwatch.sources.replay.cursor import ALERT, FAILURE, MARKED, RESTART, STALL
from mpwatch.tui import keys
from mpwatch.tui.render import event_lines, segs
from mpwatch.tui.render.glyphs import Glyphs
from mpwatch.tui.render.segs import Cell, Line, cut, line
from mpwatch.tui.widgets.cells import lines_to_text
from mpwatch.tui.widgets.lines import Lines

KEYS = "  " + "  ".join(keys.summary(keys.CURSOR))  # "  , . step  [ ] jump  Home End"
_STYLE = {FAILURE: "bold red", STALL: "bold yellow", RESTART: "magenta", ALERT: "yellow"}


def mark_glyphs(g: Glyphs) -> dict[str, str]:
    # In ASCII a stalled worker and a warning are both "!": the alert's mark takes "^" there.
    return {FAILURE: g.state[State.FAILED], STALL: g.state[State.STALLED], RESTART: g.state[State.RESTARTING],
            ALERT: g.alert["warning"] if g.unicode else "^"}


def strip_line(moments: Sequence[tuple[float, str | None]], start: float, end: float, t: float, width: int,
               g: Glyphs) -> Line:
    """One cell per slice of the run's time: its most telling mark, a dot where only plain
    events came, a rule where none; the cell holding t in reverse video."""
    width = max(width, 2)
    span = max(end - start, 1e-9)

    def cell(ts: float) -> int:
        return min(width - 1, max(0, int((ts - start) / span * width)))

    order = {k: i for i, k in enumerate(MARKED)}

    def telling(kind: str | None) -> int:  # lower tells more; a plain event least
        return order.get(kind, len(MARKED)) if kind is not None else len(MARKED)

    best: dict[int, str | None] = {}
    for ts, kind in moments:
        c = cell(ts)
        if c not in best or telling(kind) < telling(best[c]):
            best[c] = kind
    glyph = mark_glyphs(g)
    rule, dot = ("─", "·") if g.unicode else ("-", ".")
    here = cell(t)
    out: list[segs.Part] = []
    for c in range(width):
        if c in best:
            kind = best[c]
            text, style = (glyph[kind], _STYLE[kind]) if kind is not None else (dot, "")
        else:
            text, style = rule, "bright_black"
        if c == here:
            style = f"{style} reverse".strip()
        out.append((text, style))
    return line(*out)


def where_line(pos: int, n: int, event: EventFields | None, t: float, start: float, width: int) -> Line:
    """The cursor's moment in words: when, which event of how many, what it says."""
    if event is None:
        head = line((f"{event_lines.at(t, start)} ", "bold"), (f"the end ({n} events)", "bold cyan"))
    else:
        text = event_lines.event_line(event, start)[1]
        head = line((f"{event_lines.at(t, start)} ", "bold"), (f"event {pos + 1}/{n}: ", "bold cyan"), text)
    room = width - len(KEYS)
    if room <= 20:
        return cut(head, width)
    head = cut(head, room)
    return head + line((" " * (room - segs.width(head)), ""), (KEYS, "bright_black"))


class TimelineStrip(Lines):
    DEFAULT_CSS = "TimelineStrip { height: 3; padding: 0 1; border-top: solid $primary-darken-2; }"

    def paint(self, lines: list[Cell], old: list[Cell] | None) -> None:
        self.update(lines_to_text(lines), layout=False)  # a fixed height: no layout pass
