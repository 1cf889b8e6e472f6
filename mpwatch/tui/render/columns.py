"""The worker table's columns: one record each (COLUMNS), from which the table takes its
labels, widths, alignment and cells, the sort key (`s`) its sorts and a replay its own columns
(none it cannot know, the cause first); and which of them fit a width. Pure; used on the UI
thread (tui.render.view re-exports them). Adding a column: its record here, its cell in
tui.render.cells (docs/architecture.md, "Adding things").
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Literal

from mpwatch.contract import ChildStatus, State, WorkerStatus
from mpwatch.text import fmt
from mpwatch.text.children import child_note
from mpwatch.tui.render import cells, pace
from mpwatch.tui.render.glyphs import Glyphs
from mpwatch.tui.render.segs import Cell, cell

WIDE_COLS = 120  # from this width a terminal is wide: the wide widths
SCROLLBAR = 2  # the table's vertical scrollbar, when the rows overflow
PAD = 2  # a cell's padding, both sides
REPLAY_FILL = 30  # in a replay, the filling column's (the cause's) room before any column after it

# A worker's cell of a column: (the worker, the column's width, the glyphs, its children folded).
WorkerCell = Callable[[WorkerStatus, int, Glyphs, bool], Cell]
# A child process's: (the child, its worker's rank, the glyphs, a PID column in sight).
ChildCell = Callable[[ChildStatus, int, Glyphs, bool], Cell]
SortKey = tuple[float, int]


@dataclass(frozen=True)
class Sort:
    name: str  # what the header's "sort:" says
    at: int  # its place in the turn the sort key (s) goes through
    key: Callable[[WorkerStatus], SortKey]


@dataclass(frozen=True)
class ColumnSpec:
    """A column of the worker table, all it is in one place."""

    key: str
    label: str
    width: int  # at 80 columns
    wide: int  # on a wide terminal (WIDE_COLS and more)
    _: KW_ONLY
    priority: int  # which stay where not all fit, lowest first (the others scroll into view)
    cell: WorkerCell  # its cell in a worker's row
    child: ChildCell | None = None  # its cell in a child process's row (None: blank)
    right: bool = False  # aligned right (numbers)
    replay: int | None = None  # its priority in a replay; None: a replay's files do not keep it
    sort: Sort | None = None  # a sort by this column
    needs: Literal["", "nodes", "pace", "gpus"] = ""  # the flag of columns() it is shown under
    mig: int = 0  # its width at least where a GPU has MIG slices
    fills: bool = False  # always shown, its width at least: it takes the room the others leave (one does)

    def width_at(self, wide: bool, mig: bool) -> int:
        return max(self.wide if wide else self.width, self.mig if mig else 0)


def _num(v: float | None, default: float = -math.inf) -> float:
    return v if v is not None and math.isfinite(v) else default


_STATE_ORDER: dict[str, int] = {
    s: i for i, s in enumerate((State.FAILED, State.STALLED, State.KILLED, State.RESTARTING,
                                State.PAUSED, State.STARTING, State.RUNNING, State.EXITED))}

# In the table's order. Each: key, label, widths (80 columns, wide), priorities (live, replay),
# what it needs, alignment; its cells (a worker's, a child's); its sort. Priorities and the
# sorts' places go by tens, so a new column slots in between without renumbering the others.
# The sorts that go down put the most (steps, memory...) first.
COLUMNS: tuple[ColumnSpec, ...] = (
    ColumnSpec("rank", "RANK", 5, 5, priority=0, replay=0,
               cell=cells.rank_cell, child=cells.child_rank_cell,
               sort=Sort("rank", 0, lambda w: (0.0, w["rank"]))),
    ColumnSpec("node", "NODE", 4, 4, priority=10, replay=10, needs="nodes",  # a merged view of several nodes
               cell=lambda w, *_: cell(str(w.get("node", "")))),
    ColumnSpec("pid", "PID", 7, 7, priority=110, replay=80,
               cell=lambda w, *_: cell("" if w["pid"] is None else str(w["pid"])),
               child=lambda c, *_: cell(str(c["pid"]))),
    ColumnSpec("state", "STATE", 11, 11, priority=20, replay=20,
               cell=cells.worker_state_cell, child=cells.child_state_cell,
               sort=Sort("state", 10, lambda w: (float(_STATE_ORDER.get(w["state"], 99)), w["rank"]))),
    ColumnSpec("step", "STEP", 7, 8, priority=30, replay=30, right=True,
               cell=lambda w, _n, g, _f: cells.step_cell(w, g), child=lambda c, *_: cell(fmt.num(c["step"])),
               sort=Sort("step", 20, lambda w: (-_num(w["step"]), w["rank"]))),
    ColumnSpec("speed", "STEP/S", 6, 6, priority=80, right=True,
               cell=lambda w, *_: cell(fmt.speed(w["steps_per_s"])),
               sort=Sort("speed", 40, lambda w: (-_num(w["steps_per_s"]), w["rank"]))),
    ColumnSpec("loss", "LOSS", 8, 9, priority=40, replay=40, right=True,
               cell=lambda w, n, *_: cell(fmt.num_in(w["loss"], n)),
               child=lambda c, *_: cell(fmt.num(c["loss"])),
               sort=Sort("loss", 30, lambda w: (_num(w["loss"], math.inf), w["rank"]))),
    ColumnSpec("trend", "TREND", 8, 10, priority=70, replay=60,
               cell=cells.trend_cell),
    ColumnSpec("hb", "HB", 5, 5, priority=60, right=True,
               cell=lambda w, *_: cells.hb_cell(w), child=lambda c, *_: cell(fmt.age(c["heartbeat_age"])),
               sort=Sort("heartbeat", 50, lambda w: (-_num(w["heartbeat_age"]), w["rank"]))),
    ColumnSpec("gpu", "GPU", 9, 9, priority=50, replay=70, needs="gpus",
               mig=10,  # a MIG slice's "0:1 17.5G" and the collision mark
               cell=lambda w, _n, g, _f: cells.gpu_cell(w, g)),
    ColumnSpec("cpu", "CPU%", 4, 5, priority=90, right=True,
               cell=cells.cpu_cell, child=cells.child_cpu_cell,
               sort=Sort("cpu", 60, lambda w: (-_num(w["cpu_percent"]), w["rank"]))),
    ColumnSpec("rss", "RSS", 5, 6, priority=100, right=True,
               cell=lambda w, *_: cell(fmt.size(w["rss_bytes"])),
               child=lambda c, *_: cell(fmt.size(c["rss_bytes"])),
               sort=Sort("rss", 70, lambda w: (-_num(w["rss_bytes"]), w["rank"]))),
    ColumnSpec("phases", "TIME d/c/s/o", 12, 12, priority=120,
               cell=lambda w, n, g, _f: cells.phases_cell(w, n, g)),
    # Only once a rank has had a pace: a run that times no phase keeps the room for its notes.
    ColumnSpec("pace", "PACE", 9, 9, priority=130, needs="pace",  # "0.05 fwd", "1/670 dat"
               cell=lambda w, *_: pace.pace_cell(w)),
    # Every row's note (a pause, a stall, a cause) in sight at 80 columns too (issue 40): its least
    # width is kept before the others are fitted, and it takes what they leave.
    ColumnSpec("note", "NOTE", 14, 28, priority=140, replay=50, fills=True,
               cell=lambda w, *_: cell(cells.note_text(w)),
               child=lambda c, rank, *_: cell(child_note(c, rank))),
)
BY_KEY = {c.key: c for c in COLUMNS}
ORDER = tuple(c.key for c in COLUMNS if c.needs != "nodes")  # a one-node run's table, every column
_SORTS = sorted((c.sort for c in COLUMNS if c.sort is not None), key=lambda s: s.at)
SORTS = tuple(s.name for s in _SORTS)  # the turn of the sort key (s)
_SORT_KEYS = {s.name: s.key for s in _SORTS}


def sort_key(name: str) -> Callable[[WorkerStatus], SortKey]:
    return _SORT_KEYS[name]


@dataclass(frozen=True)
class Column:
    """A column as laid out: its record's key and label, the width it has at this size."""

    key: str
    label: str
    width: int

    @property
    def right(self) -> bool:
        spec = BY_KEY.get(self.key)
        return spec is not None and spec.right


def columns(width: int, nodes: bool = False, replay: bool = False, gpus: bool = True,
            pace: bool = True, mig: bool = False) -> list[Column]:
    """The columns that fit `width` in the table's order, chosen by priority, the NOTE always
    among them (its least width kept first, then the room the others leave); the columns that
    did not fit follow (scrolled to). NODE only with `nodes` (a merged view of several nodes),
    PACE only with `pace` (a rank has had one), GPU only with `gpus` (the status has GPU data:
    a machine without one gives its room to the others). A replay has no columns it cannot know,
    and its NOTE (the cause of a failure) comes before the trend, GPU and pid; what does not fit
    is left out. `mig`: a GPU has MIG slices (the GPU column names the slice)."""
    has = {"": True, "nodes": nodes, "pace": pace, "gpus": gpus}
    wanted = [c for c in COLUMNS if has[c.needs]]
    if replay:
        return _replay_columns(wanted, width, mig)
    wide = width >= WIDE_COLS
    fill = [c for c in wanted if c.fills]
    ranked = sorted((c for c in wanted if not c.fills), key=lambda c: c.priority)
    kept = sum(c.width_at(wide, mig) + PAD for c in fill)
    shown, room = _fit(ranked, width - SCROLLBAR - kept, lambda c: c.width_at(wide, mig))
    cols = [Column(c.key, c.label, c.width_at(wide, mig)) for c in wanted if c.key in shown]
    cols += [Column(c.key, c.label, c.width_at(wide, mig) + room) for c in fill]
    return cols + [Column(c.key, c.label, c.width_at(False, mig)) for c in ranked if c.key not in shown]


def _replay_columns(wanted: list[ColumnSpec], width: int, mig: bool) -> list[Column]:
    wide = width >= WIDE_COLS
    ranked = sorted((c for c in wanted if c.replay is not None), key=lambda c: c.replay or 0)
    shown, room = _fit(ranked, width - SCROLLBAR, lambda c: REPLAY_FILL if c.fills else c.width_at(wide, mig))
    return [Column(c.key, c.label, REPLAY_FILL + room if c.fills else c.width_at(wide, mig))
            for c in wanted if c.key in shown]


def _fit(ranked: list[ColumnSpec], room: int, width: Callable[[ColumnSpec], int]) -> tuple[set[str], int]:
    """The keys of the first of `ranked` (most wanted first) that fit `room` with their padding,
    up to the first that does not; the room left."""
    shown: set[str] = set()
    for c in ranked:
        need = width(c) + PAD
        if need > room:
            break
        shown.add(c.key)
        room -= need
    return shown, room
