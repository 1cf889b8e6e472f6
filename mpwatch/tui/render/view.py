"""The main screen's formatting layer: a Status in (typed by contract.status), the worker
table's rows of cells (its columns: tui.render.columns), the header and the one-line texts out. Pure: nothing
here reads a clock or a process, so every screen is a function of the status it is fed.
Runs on the UI thread. The GPU panel's rows are in tui.render.gpu_rows.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Collection
from typing import Literal

from mpwatch.contract import culprit
from mpwatch.contract.status import (
    ENDED_STATES,
    UNREACHABLE,
    ChildStatus,
    RunState,
    StallInfo,
    State,
    Status,
    WorkerGpu,
    WorkerStatus,
)
from mpwatch.text import eventtext, fmt
from mpwatch.text.children import child_note
from mpwatch.text.gpu_names import label
from mpwatch.tui.render import bars, node_rows, pace

# The columns live in tui.render.columns; re-exported for the table and the tests.
from mpwatch.tui.render.columns import ORDER as ORDER
from mpwatch.tui.render.columns import PAD as PAD
from mpwatch.tui.render.columns import PRIORITY as PRIORITY
from mpwatch.tui.render.columns import RIGHT as RIGHT
from mpwatch.tui.render.columns import SCROLLBAR as SCROLLBAR
from mpwatch.tui.render.columns import WIDE_COLS as WIDE_COLS
from mpwatch.tui.render.columns import Column as Column
from mpwatch.tui.render.columns import columns as columns
from mpwatch.tui.render.glyphs import Glyphs
from mpwatch.tui.render.segs import Cell, Line

STATE_STYLE: dict[str, str] = {
    State.STARTING: "cyan", State.RUNNING: "green", State.STALLED: "bold yellow", State.PAUSED: "bold blue",
    State.RESTARTING: "magenta", State.EXITED: "green", State.FAILED: "bold red", State.KILLED: "red",
}
PHASE_STYLE = {"data": "cyan", "compute": "green", "sync": "yellow", "other": "bright_black"}
ALIVE = (State.STARTING, State.RUNNING, State.STALLED, State.PAUSED)
HEADER_STATES = (State.RUNNING, State.STALLED, State.PAUSED, State.FAILED)


# ------------------------------------------------------------------- cells ----
def state_cell(state: str, g: Glyphs) -> Line:
    return ((f"{g.state.get(state, '?')} {state}", STATE_STYLE.get(state, "")),)


def gpu_text(gpu: WorkerGpu | None) -> str:
    """`0 19.6G`: NVML's index of the rank's own GPU (`0:1` on GPU 0's MIG slice GI 1) and the
    memory its processes hold there (torch's reserved memory where NVML cannot tell: its pids
    not visible from a container)."""
    index = gpu.get("index") if gpu is not None else None
    if gpu is None or index is None:
        return ""
    mem = fmt.size(gpu.get("mem_bytes") if gpu.get("mem_bytes") is not None else gpu.get("reserved"))
    where = label(index, gpu.get("mig"))
    return f"{where} {mem}" if mem else where


def gpu_cell(w: WorkerStatus, g: Glyphs) -> Cell:
    gpu = w["gpu"]
    text = gpu_text(gpu)
    if gpu is not None and text and gpu.get("shared_with"):  # another rank calls this GPU its own
        return ((text, ""), (g.collision, "bold yellow"))
    return text


def _doing(info: StallInfo, at: str = "stuck in") -> list[str]:
    """What a stuck process does (from /proc; the kernel wait is the short way to say it), and
    where its last dump found it: the innermost frame of the user's own code (a slow start is
    "in" it, not stuck)."""
    parts = []
    kind, wchan = info.get("kind"), info.get("wchan")
    if kind:
        parts.append(f"{kind} in {wchan}" if wchan else eventtext.doing(kind, info.get("detail")))
    where = info.get("where")
    if where:
        coll = info.get("collective")
        parts.append(f"{at} {where}" + (f", waiting in {coll}" if coll else ""))
    return parts


def _stall_note(w: WorkerStatus) -> list[str]:
    stall = w["stall"]
    age = w["heartbeat_age"]
    return ([f"stalled at step {fmt.num(w['step'] if stall is None else stall['step'], na='-')}"
             + (f", silent {fmt.age(age)}" if age is not None else "")]
            + ([] if stall is None else _doing(stall)))


def note_text(w: WorkerStatus) -> str:
    parts: list[str] = []
    if "node_error" in w:  # what follows is its last known state
        parts.append(f"node {w.get('node')} unreachable: {w['node_error']}")
    st = w["state"]
    stop = w.get("stop")
    if stop and st not in ENDED_STATES:  # mpwatch asked it to stop: its handler may be saving
        kill_in = stop["kill_in"]
        parts.append(f"{stop['signal']} sent" + (f", SIGKILL in {fmt.age(kill_in)}" if kill_in else ""))
    memory = w.get("memory")
    if memory is not None and memory["oom"]:  # the OOM finding's words: who held the memory, first
        parts.append(memory["oom"])
    if st in ENDED_STATES and w["cause"]:
        parts.append(w["cause"])
    if st == State.STALLED:
        parts += _stall_note(w)
    paused = w.get("paused_at")
    if st == State.PAUSED and paused is not None:
        parts.append(f"paused at {culprit.clock(paused)} (p resumes)")
    slow = w.get("slow_start")
    if slow is not None and st in ALIVE:
        parts += [eventtext.slow_start_text(slow.get("limit"))] + _doing(slow, at="in")
    if w["restarts"]:
        parts.append(f"restarted {w['restarts']}x")
    if w["unkillable"]:
        parts.append("could not kill: " + ", ".join(str(p.get("pid")) for p in w["unkillable"]))
    if w["dropped"]:
        parts.append(f"{w['dropped']} reports dropped")
    rejected = w.get("rejected")
    if rejected:
        parts.append(f"{rejected['count']} reports rejected: {rejected['why']}")
    refused = w.get("refused_tunables")
    if refused:
        parts.append("tunables refused: " + ", ".join(refused))
    return "; ".join(parts)


def auto_mark(g: Glyphs) -> str:
    """After the step of a worker whose steps mpwatch counts itself (contract.status's steps_from)."""
    return "ᵃ" if g.unicode else "a"


def step_cell(w: WorkerStatus, g: Glyphs) -> Cell:
    step = fmt.num(w["step"])
    if step and w.get("steps_from") == "auto":
        return ((step, ""), (auto_mark(g), "bright_black"))
    return step


def phases_cell(w: WorkerStatus, width: int, g: Glyphs) -> Line:
    shares = bars.phase_shares(w["phases"], w["uptime"])
    return tuple((chars, PHASE_STYLE[p]) for p, chars in bars.stacked_bar(shares, width, g.phase))


def hb_cell(w: WorkerStatus) -> Cell:
    if w["state"] not in ALIVE or "node_error" in w:
        return ""
    age = w["heartbeat_age"]
    if age is None:
        return "-"
    style = "bold yellow" if age >= 10 else ("yellow" if age >= 3 else "")
    return ((fmt.age(age), style),)


def _pct(v: float | None) -> str:
    return "" if v is None else f"{v:.0f}"


def worker_cells(w: WorkerStatus, cols: list[Column], g: Glyphs, folded: bool) -> tuple[Cell, ...]:
    fold = (g.folded if folded else g.unfolded) if w["children"] else " "
    out: list[Cell] = []
    for c in cols:
        k = c.key
        if k == "trend":
            out.append(((bars.sparkline(w["loss_tail"], c.width, g.spark), "cyan"),))
        elif k == "phases":
            out.append(phases_cell(w, c.width, g))
        elif k == "pace":
            out.append(pace.pace_cell(w))
        elif k == "rank":
            out.append(f"{fold}{w['rank']}")
        elif k == "pid":
            out.append("" if w["pid"] is None else str(w["pid"]))
        elif k == "state":  # a row of a node that cannot be reached is never shown as a hang
            out.append((("unreachable", "bright_black"),) if "node_error" in w else state_cell(w["state"], g))
        elif k == "node":
            out.append(str(w.get("node", "")))
        elif k == "step":
            out.append(step_cell(w, g))
        elif k == "speed":
            out.append(fmt.speed(w["steps_per_s"]))
        elif k == "loss":
            out.append(fmt.num_in(w["loss"], c.width))
        elif k == "hb":
            out.append(hb_cell(w))
        elif k == "cpu":
            out.append(_pct(w["cpu_percent"]))
        elif k == "rss":
            out.append(fmt.size(w["rss_bytes"]))
        elif k == "gpu":
            out.append(gpu_cell(w, g))
        else:
            out.append(note_text(w))
    return tuple(out)


def child_cells(c: ChildStatus, rank: int, cols: list[Column], g: Glyphs) -> tuple[Cell, ...]:
    values: dict[str, Cell] = {
        "rank": f"  {g.child}",
        "pid": str(c["pid"]),
        "state": ((c["status"], "bright_black"),),
        "step": fmt.num(c["step"]),
        "loss": fmt.num(c["loss"]),
        "hb": fmt.age(c["heartbeat_age"]),
        "cpu": _pct(c["cpu_percent"]),
        "rss": fmt.size(c["rss_bytes"]),
        "note": child_note(c, rank),
    }
    if "pid" not in [col.key for col in cols[:3]]:  # no PID column in sight: the state cell says it
        values["state"] = ((f"{c['pid']} {c['status'][:5]}", "bright_black"),)
    return tuple(values.get(col.key, "") for col in cols)


# --------------------------------------------------------------------- rows ----
SORTS = ("rank", "state", "step", "loss", "speed", "heartbeat", "cpu", "rss")
_STATE_ORDER: dict[str, int] = {
    s: i for i, s in enumerate((State.FAILED, State.STALLED, State.KILLED, State.RESTARTING,
                                State.PAUSED, State.STARTING, State.RUNNING, State.EXITED))}
SortKey = tuple[float, int]


def _num(v: float | None, default: float = -math.inf) -> float:
    return v if v is not None and math.isfinite(v) else default


def sort_key(name: str) -> Callable[[WorkerStatus], SortKey]:
    keys: dict[str, Callable[[WorkerStatus], SortKey]] = {
        "rank": lambda w: (0.0, w["rank"]),
        "state": lambda w: (float(_STATE_ORDER.get(w["state"], 99)), w["rank"]),
        "step": lambda w: (-_num(w["step"]), w["rank"]),
        "loss": lambda w: (_num(w["loss"], math.inf), w["rank"]),
        "speed": lambda w: (-_num(w["steps_per_s"]), w["rank"]),
        "heartbeat": lambda w: (-_num(w["heartbeat_age"]), w["rank"]),
        "cpu": lambda w: (-_num(w["cpu_percent"]), w["rank"]),
        "rss": lambda w: (-_num(w["rss_bytes"]), w["rank"]),
    }
    return keys[name]


def matches(w: WorkerStatus, text: str) -> bool:
    """The filter: a number is a rank or a pid; words match state, cause and note."""
    text = text.strip().lower()
    if not text:
        return True
    if text.isdigit():
        return w["rank"] == int(text) or w["pid"] == int(text)
    hay = f"rank {w['rank']} node {w.get('node', '')} {w['state']} {note_text(w)}".lower()
    return all(word in hay for word in text.split())


def row_key(rank: int, child_pid: int | None = None) -> str:
    return f"w{rank}" if child_pid is None else f"w{rank}.{child_pid}"


def rank_of_key(key: str | None) -> int | None:
    if not key or not key.startswith("w"):
        return None
    try:
        return int(key[1:].split(".")[0])
    except ValueError:
        return None


# A row's source: plain data that compares cheaply, formatted into cells only when drawn.
WorkerRow = tuple[Literal["w"], WorkerStatus, bool]  # the worker, folded
ChildRow = tuple[Literal["c"], ChildStatus, int]  # the child, its worker's rank
RowSource = WorkerRow | ChildRow


def table_rows(status: Status, *, folded: Collection[int] = frozenset(), filter_text: str = "",
               sort: str = "rank") -> list[tuple[str, RowSource]]:
    """[(row key, row source)] in display order: each worker, then its children unless folded."""
    workers = sorted((w for w in status["workers"] if matches(w, filter_text)), key=sort_key(sort))
    rows: list[tuple[str, RowSource]] = []
    for w in workers:
        is_folded = w["rank"] in folded
        rows.append((row_key(w["rank"]), ("w", w, is_folded)))
        if not is_folded:
            rows += [(row_key(w["rank"], c["pid"]), ("c", c, w["rank"])) for c in w["children"]]
    return rows


def row_cells(source: RowSource, cols: list[Column], g: Glyphs) -> tuple[Cell, ...]:
    if source[0] == "w":
        return worker_cells(source[1], cols, g, source[2])
    return child_cells(source[1], source[2], cols, g)


# ------------------------------------------------------------------ header ----
def header_lines(status: Status, g: Glyphs, *, sort: str = "rank", filter_text: str = "",
                 finished: bool = False) -> list[Line]:
    r = status["run"]
    counts = r["counts"]
    state = RunState.FINISHED if finished else r["state"]
    script = " ".join([r["script"], *map(str, r["args"])])
    line1: Line = (("mpwatch ", "bold"), (r["id"], "bold cyan"),
                   (f"  [{state}]",
                    "bold red" if state in (RunState.STOPPING, RunState.FINISHED) else "bold"),
                   (f"  up {fmt.duration(r['uptime'])}", ""), (f"  {script}", ""))
    n = len(status["workers"])
    parts: list[tuple[str, str]] = [(f"{n} worker{'' if n == 1 else 's'}: ", "")]
    for s in HEADER_STATES:
        n = counts.get(s, 0)
        style = STATE_STYLE[s] if n and s in (State.STALLED, State.FAILED, State.PAUSED) else ""
        parts.append((f"{g.state[s]} {n} {s}  ", style))
    others = {name: n for name, n in counts.items() if name not in HEADER_STATES and n}
    for name, n in sorted(others.items()):
        if name == UNREACHABLE:  # a merged run's ranks on nodes out of reach
            parts.append((f"{g.alert['error']} {n} {name}  ", "bold red"))
        else:
            parts.append((f"{g.state.get(name, '?')} {n} {name}  ", ""))
    parts.append((f"restarts {r['restarts']}", "bold magenta" if r["restarts"] else ""))
    extra = [f"sort: {sort}"] + ([f"filter: {filter_text}"] if filter_text else [])
    return [line1, tuple(parts), *node_rows.header_lines(status, g), ((g.sep.join(extra), "bright_black"),)]


def selected_line(w: WorkerStatus | None, g: Glyphs) -> Line:
    """One line about the selected worker: what the narrow table may not show."""
    if w is None:
        return (("no worker selected", "bright_black"),)
    st = w["state"]
    segs: list[tuple[str, str]] = [(f"rank {w['rank']} ", "bold")]
    if "node" in w:
        segs.append((f"(node {w['node']}, local {w.get('local_rank')}) ", "cyan"))
    segs += [(f"{g.state.get(st, '?')} {st}", STATE_STYLE.get(st, "")), (f"{g.sep}pid {w['pid']}", "")]
    if w["steps_per_s"] is not None:
        segs.append((f"{g.sep}{fmt.speed(w['steps_per_s'])} steps/s", ""))
    if w.get("steps_from") == "auto":  # never reported: mpwatch.worker.auto counted its optimizer steps
        segs.append((f"{g.sep}{auto_mark(g)} steps counted automatically", ""))
    wg = w["gpu"]
    gpu = gpu_text(wg)
    if wg is not None and gpu:
        shared = wg.get("shared_with") or []
        segs.append((f"{g.sep}GPU {gpu}", ""))
        if shared:
            segs.append((f" shared with rank {', '.join(map(str, shared))}", "bold yellow"))
    if w.get("dist"):  # the worker side said so: restarting it alone fails its peers' collectives
        segs.append((f"{g.sep}in a process group", ""))
    kids = len(w["children"])
    if kids:
        segs.append((f"{g.sep}{kids} child process(es)", ""))
    note = note_text(w)
    if note:
        segs.append((f"{g.sep}{note}", "bold red" if st == State.FAILED else "yellow"))
    return tuple(segs)


def ending_lines(status: Status) -> list[str]:
    """How each worker ended, for the banner shown once the run has finished."""
    code = status["run"]["exit_code"]
    out = [f"run finished, exit code {code if code is not None else '?'}; press q to leave"]
    for w in status["workers"]:
        cause = w["cause"] or "no cause recorded"  # "killed on request (SIGTERM)" says its state once
        said = cause if cause.startswith(f"{w['state']} ") else f"{w['state']} ({cause})"
        out.append(f"rank {w['rank']}: {said}")
    return out
