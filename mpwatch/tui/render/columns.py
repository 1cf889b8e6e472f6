"""The worker table's columns: which fit a width, in which order, how wide; a replay's own
(no column it cannot know, the cause first). Pure; used on the UI thread (tui.render.view
re-exports them)."""
from __future__ import annotations

from dataclasses import dataclass

WIDE_COLS = 120


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int

    @property
    def right(self) -> bool:
        return self.key in RIGHT


RIGHT = {"step", "speed", "loss", "hb", "cpu", "rss"}
# key -> (label, width at 80 columns, width on a wide terminal)
_COLS: dict[str, tuple[str, int, int]] = {
    "rank": ("RANK", 5, 5), "pid": ("PID", 7, 7), "state": ("STATE", 11, 11), "step": ("STEP", 7, 8),
    "speed": ("STEP/S", 6, 6), "loss": ("LOSS", 8, 9), "trend": ("TREND", 8, 10), "hb": ("HB", 5, 5),
    "gpu": ("GPU", 9, 9), "cpu": ("CPU%", 4, 5), "rss": ("RSS", 5, 6), "phases": ("TIME d/c/s/o", 12, 12),
    "pace": ("PACE", 9, 9), "note": ("NOTE", 40, 28), "node": ("NODE", 4, 4),
}
ORDER = ("rank", "pid", "state", "step", "speed", "loss", "trend", "hb", "gpu", "cpu", "rss", "phases",
         "pace", "note")
# What stays on screen when columns must go, most wanted first; the rest scroll into view.
PRIORITY = ("rank", "state", "step", "loss", "gpu", "hb", "trend", "speed", "cpu", "rss", "pid", "phases",
            "pace", "note")
SCROLLBAR = 2  # the table's vertical scrollbar, when the rows overflow
PAD = 2  # a cell's padding, both sides


MIG_GPU = 10  # the GPU column where a rank runs on a MIG slice: "0:1 17.5G" and the collision mark


def _width(key: str, wide: bool, mig: bool = False) -> int:
    _, narrow, broad = _COLS[key]
    return max(broad if wide else narrow, MIG_GPU if mig and key == "gpu" else 0)


# A replay's files do not keep these (the processes' CPU and memory, phases, a heartbeat, a
# rate of their own, a pace): its columns give their width to the cause instead.
REPLAY_UNKNOWN = frozenset({"speed", "hb", "cpu", "rss", "phases", "pace"})
REPLAY_PRIORITY = ("rank", "state", "step", "loss", "note", "trend", "gpu", "pid")
REPLAY_NOTE_MIN = 30  # the cause's room before any other column is added


def columns(width: int, nodes: bool = False, replay: bool = False, gpus: bool = True,
            pace: bool = True, mig: bool = False) -> list[Column]:
    """The columns that fit `width` in ORDER, chosen by PRIORITY; on a wide terminal the
    NOTE column takes the room left; the columns that did not fit follow (scrolled to).
    NODE only with `nodes` (a merged view of several nodes), PACE only with `pace` (a rank has
    had one: a run that times no phase keeps the room for its notes). A replay has no columns it
    cannot know (nor GPU without `gpus`: no GPU data), and its NOTE (the cause of a failure)
    comes before the trend, GPU and pid; what does not fit is left out. `mig`: a GPU has MIG
    slices (the GPU column names the slice)."""
    if replay:
        return _replay_columns(width, nodes, gpus, mig)
    wide = width >= WIDE_COLS
    room = width - SCROLLBAR
    shown: list[str] = []
    order: tuple[str, ...] = (ORDER[0], "node", *ORDER[1:]) if nodes else ORDER
    priority: tuple[str, ...] = (PRIORITY[0], "node", *PRIORITY[1:]) if nodes else PRIORITY
    if not pace:
        order, priority = tuple(k for k in order if k != "pace"), tuple(k for k in priority if k != "pace")
    for key in priority:
        if key == "note" and wide:
            continue
        need = _width(key, wide, mig) + PAD
        if need > room:
            break
        shown.append(key)
        room -= need
    cols = [Column(k, _COLS[k][0], _width(k, wide, mig)) for k in order if k in shown]
    if wide:
        cols.append(Column("note", "NOTE", max(_width("note", True), room - PAD)))
    rest = [k for k in priority if k not in shown and not (wide and k == "note")]
    return cols + [Column(k, _COLS[k][0], _width(k, False, mig)) for k in rest]


def _replay_columns(width: int, nodes: bool, gpus: bool, mig: bool) -> list[Column]:
    room = width - SCROLLBAR
    priority = [k for k in (("rank", "node", *REPLAY_PRIORITY[1:]) if nodes else REPLAY_PRIORITY)
                if gpus or k != "gpu"]
    shown: list[str] = []
    for key in priority:
        need = (REPLAY_NOTE_MIN if key == "note" else _width(key, width >= WIDE_COLS, mig)) + PAD
        if need > room:
            break
        shown.append(key)
        room -= need
    order = [k for k in (("rank", "node", *ORDER[1:]) if nodes else ORDER) if k in shown]
    wide = width >= WIDE_COLS
    return [Column(k, _COLS[k][0], REPLAY_NOTE_MIN + room if k == "note" else _width(k, wide, mig))
            for k in order]
