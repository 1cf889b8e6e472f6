"""The GPU screen's charts over time (pure: GpuTick and GpuMark records in, Lines out; the
UI thread draws them): per GPU, memory stacked by rank with the processes outside the run
apart and the capacity as the top line, utilization under it, and a row of markers where a
process appeared or exited, an alert started, a rank's allocator retried or hit OOM. A chart
is of one device: a GPU's index, or a MIG slice's key (contract.gpu_view.DevKey).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from mpwatch.contract import DevKey, GpuMark, GpuTick, GpuTickGpu
from mpwatch.text import fmt
from mpwatch.tui.render import segs
from mpwatch.tui.render.glyphs import Glyphs
from mpwatch.tui.render.segs import Line, Part, line

WINDOWS = (120.0, 600.0, 3600.0)  # the window keys: 2 min, 10 min, 1 h
AXIS = 8  # the label column left of each chart
GAP_S = 5.0  # no tick for this long: a gap in the chart (the supervisor was not sampling)
RANK_STYLES = ("cyan", "green", "blue", "bright_magenta", "bright_cyan", "bright_green", "bright_blue",
               "white")
OUTSIDE_STYLE = "magenta"
OTHER_STYLE = "bright_black"
MARK_STYLE = {"proc_started": "green", "proc_exited": "bright_black", "alert": "yellow",
              "alloc_retry": "yellow", "oom": "bold red"}
MARK_ORDER = ("oom", "alert", "alloc_retry", "proc_exited", "proc_started")  # the most telling first


def window_name(window: float) -> str:
    return f"{window / 3600:g} h" if window >= 3600 else f"{window / 60:g} min"


def columns_of(ticks: Sequence[GpuTick], now: float, window: float, cols: int) -> list[GpuTick | None]:
    """The tick shown in each of `cols` columns over [now - window, now]: the last one in the
    column's stretch of time; a column narrower than the ticks' spacing shows the tick before
    it; None before the first tick (before the run) and where ticks stop for GAP_S or more."""
    out: list[GpuTick | None] = [None] * cols
    start = now - window
    for t in ticks:
        c = min(int((t["ts"] - start) / window * cols), cols - 1)
        if c >= 0:
            out[c] = t
    last: GpuTick | None = None
    for c in range(cols):
        here = out[c]
        if here is not None:
            last = here
        elif last is not None and start + (c + 1) * window / cols - last["ts"] < GAP_S:
            out[c] = last
    return out


Device = int | DevKey  # a GPU's index, or a GPU's or a MIG slice's key


def _key(dev: Device) -> DevKey:
    return (dev, None, None) if isinstance(dev, int) else dev


def _is(dev: Device, index: int | None, rec: Mapping[str, object]) -> bool:
    """A tick's GPU entry, a rank's entry or a mark is about this device."""
    return (index, rec.get("gi"), rec.get("ci")) == _key(dev)


def _gpu_of(tick: GpuTick | None, dev: Device) -> GpuTickGpu | None:
    if tick is None:
        return None
    return next((g for g in tick["gpus"] if _is(dev, g["index"], g)), None)


def rank_style(rank: int) -> str:
    return RANK_STYLES[rank % len(RANK_STYLES)]


def _stack(tick: GpuTick | None, index: Device) -> list[tuple[str, int, float]]:
    """(who, rank or -1, bytes) from the bottom up: each rank whose own GPU it is, the memory
    NVML counts that no rank holds (context of other ranks, the driver), then outside."""
    g = _gpu_of(tick, index)
    if g is None or tick is None:
        return []
    parts = [("rank", r["rank"], float(r["nvml"] or 0))
             for r in sorted(tick["ranks"], key=lambda r: r["rank"])
             if _is(index, r["gpu"], r) and r["nvml"]]
    outside = float(g["outside"] or 0)
    rest = float(g["mem_used"] or 0) - sum(p[2] for p in parts) - outside
    if rest > 0:
        parts.append(("other", -1, rest))
    if outside > 0:
        parts.append(("outside", -1, outside))
    return parts


def memory_chart(ticks: Sequence[GpuTick], index: Device, now: float, window: float, width: int, height: int,
                 g: Glyphs) -> list[Line]:
    """`height` rows of memory stacked by rank, under a capacity line."""
    cols = max(width - AXIS, 4)
    shown = columns_of(ticks, now, window, cols)
    total = next((float(x["mem_total"]) for t in reversed(ticks) for x in t["gpus"]
                  if _is(index, x["index"], x) and x["mem_total"]), 0.0)
    if not total:
        total = max((float(x["mem_used"] or 0) for t in ticks for x in t["gpus"]
                     if _is(index, x["index"], x)), default=1.0)
    stacks = [_stack(t, index) for t in shown]
    fills = g.stack
    lines: list[Line] = [line((segs.pad(fmt.size(total, "?"), AXIS - 1, right=True) + " ", "bright_black"),
                              (g.capacity * cols, "bright_black"))]
    for row in range(height - 1, -1, -1):
        mid = (row + 0.5) / height * total
        cells: list[Part] = []
        for stack in stacks:
            acc, cell = 0.0, (" ", "")
            for who, rank, amount in stack:
                acc += amount
                if mid < acc:
                    if who == "rank":
                        cell = (fills[rank % len(fills)], rank_style(rank))
                    elif who == "outside":
                        cell = (g.outside, OUTSIDE_STYLE)
                    else:
                        cell = (g.mem["other"], OTHER_STYLE)
                    break
            cells.append(cell)
        label = "mem" if row == height - 1 else ("0" if row == 0 else "")
        lines.append(line((segs.pad(label, AXIS - 1, right=True) + " ", "bright_black"), *_merge(cells)))
    return lines


def util_chart(ticks: Sequence[GpuTick], index: Device, now: float, window: float, width: int, height: int,
               g: Glyphs) -> list[Line]:
    """`height` rows of utilization (0-100%), the top cell of each column partly filled."""
    cols = max(width - AXIS, 4)
    shown = columns_of(ticks, now, window, cols)
    levels = g.spark
    lines: list[Line] = []
    for row in range(height - 1, -1, -1):
        cells: list[Part] = []
        for t in shown:
            x = _gpu_of(t, index)
            u = None if x is None else x["util_gpu"]
            if u is None:
                cells.append((" ", ""))
                continue
            fill = u / 100.0 * height - row  # how much of this row the bar covers
            if fill >= 1:
                cells.append((levels[-1], "green"))
            elif fill > 0:
                cells.append((levels[min(int(fill * len(levels)), len(levels) - 1)], "green"))
            else:
                cells.append((" ", ""))
        label = "util" if row == height - 1 else ("0%" if row == 0 else "")
        lines.append(line((segs.pad(label, AXIS - 1, right=True) + " ", "bright_black"), *_merge(cells)))
    return lines


def marks_line(marks: Sequence[GpuMark], index: Device, now: float, window: float, width: int,
               g: Glyphs) -> Line:
    """The markers of this GPU (and of the run, gpu None) on the time axis; where several
    share a cell, the most telling shows (an alert is never hidden by a process starting)."""
    cols = max(width - AXIS, 4)
    cells: list[Part] = [(" ", "")] * cols
    rank: dict[int, int] = {}
    start = now - window
    for m in marks:
        if m["gpu"] is not None and not _is(index, m["gpu"], m):
            continue
        c = min(int((m["ts"] - start) / window * cols), cols - 1)
        tells = MARK_ORDER.index(m["kind"]) if m["kind"] in MARK_ORDER else len(MARK_ORDER)
        if c >= 0 and tells <= rank.get(c, len(MARK_ORDER)):
            rank[c] = tells
            cells[c] = (g.mark.get(m["kind"], "?"), MARK_STYLE.get(m["kind"], ""))
    return line((segs.pad("marks", AXIS - 1, right=True) + " ", "bright_black"), *_merge(cells))


def time_axis(window: float, width: int) -> Line:
    cols = max(width - AXIS, 4)
    left = f"-{window_name(window)}"
    return line((" " * AXIS + segs.pad(left, cols - 3) + "now", "bright_black"))


def legend(g: Glyphs) -> list[Line]:
    """What the charts' fills and markers mean (each GPU's ranks are named under its heading)."""
    fills = line((g.mem["other"], OTHER_STYLE), (" memory no rank holds  ", ""),
                 (g.outside, OUTSIDE_STYLE), (" outside the run  ", ""),
                 (g.capacity * 2, "bright_black"), (" capacity", ""))
    marks = line(*((f"{sym} {kind.replace('_', ' ')}  ", MARK_STYLE.get(kind, ""))
                   for kind, sym in g.mark.items()))
    return [fills, marks]


def rank_legend(ranks: Sequence[int], g: Glyphs, what: str = "GPU") -> Line:
    out: list[Part] = [(" " * AXIS, "")]
    for r in ranks:
        out += [(g.stack[r % len(g.stack)], rank_style(r)), (f" rank {r}  ", "")]
    return line(*out) if ranks else line((" " * AXIS + f"no rank has this {what} as its own", "bright_black"))


def recent_marks(marks: Sequence[GpuMark], index: Device, now: float, window: float, n: int) -> list[Line]:
    """The last n marks of this GPU in the window, as text."""
    mine = [m for m in marks
            if (m["gpu"] is None or _is(index, m["gpu"], m)) and m["ts"] >= now - window][-n:]
    return [line((f"  {fmt.age(now - m['ts'])} ago ", "bright_black"),
                 (m["text"], MARK_STYLE.get(m["kind"], ""))) for m in mine]


def _merge(cells: Sequence[Part]) -> list[Part]:
    """Neighbouring cells of one style as one segment: fewer segments to draw."""
    out: list[Part] = []
    for text, style in cells:
        if out and out[-1][1] == style:
            out[-1] = (out[-1][0] + text, style)
        else:
            out.append((text, style))
    return out
