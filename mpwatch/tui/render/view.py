"""The main screen's formatting layer: a Status in (typed by contract.status), the worker
table's rows of cells (its columns: tui.render.columns, one record each; their cells:
tui.render.cells), the header and the one-line texts out. Pure: nothing here reads a clock or
a process, so every screen is a function of the status it is fed.
Runs on the UI thread. The GPU panel's rows are in tui.render.gpu_rows.
"""
from __future__ import annotations

from collections.abc import Collection
from typing import Literal

from mpwatch.contract import UNREACHABLE, ChildStatus, RunState, State, Status, WorkerStatus, numtext
from mpwatch.text import fmt
from mpwatch.text.run_end import run_ended
from mpwatch.tui.render import node_rows
from mpwatch.tui.render.cells import STATE_STYLE, auto_mark, gpu_text, note_text

# The columns live in tui.render.columns; re-exported for the table and the tests.
from mpwatch.tui.render.columns import BY_KEY, sort_key
from mpwatch.tui.render.columns import ORDER as ORDER
from mpwatch.tui.render.columns import PAD as PAD
from mpwatch.tui.render.columns import SCROLLBAR as SCROLLBAR
from mpwatch.tui.render.columns import SORTS as SORTS
from mpwatch.tui.render.columns import Column as Column
from mpwatch.tui.render.columns import columns as columns
from mpwatch.tui.render.glyphs import Glyphs
from mpwatch.tui.render.segs import BLANK, Cell, Line, line

HEADER_STATES = (State.RUNNING, State.STALLED, State.PAUSED, State.FAILED)


# ------------------------------------------------------------------- cells ----
def worker_cells(w: WorkerStatus, cols: list[Column], g: Glyphs, folded: bool) -> tuple[Cell, ...]:
    return tuple(BY_KEY[c.key].cell(w, c.width, g, folded) for c in cols)


def child_cells(c: ChildStatus, rank: int, cols: list[Column], g: Glyphs) -> tuple[Cell, ...]:
    pid_shown = "pid" in [col.key for col in cols[:3]]  # else the state cell says the pid
    specs = [BY_KEY[col.key] for col in cols]
    return tuple(BLANK if s.child is None else s.child(c, rank, g, pid_shown) for s in specs)


# --------------------------------------------------------------------- rows ----
def matches(w: WorkerStatus, text: str) -> bool:
    """The filter: a number is a rank or a pid; words match state, cause and note."""
    text = text.strip().lower()
    if not text:
        return True
    number = numtext.int_of(text)  # ASCII digits: "²" is a word to look for, never int()'s error
    if number is not None:
        return w["rank"] == number or w["pid"] == number
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
    line1 = line(("mpwatch ", "bold"), (r["id"], "bold cyan"),
                 (f"  [{state}]", "bold red" if state in (RunState.STOPPING, RunState.FINISHED) else "bold"),
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
    return [line1, line(*parts), *node_rows.header_lines(status, g),
            line((g.sep.join(extra), "bright_black"))]


def selected_line(w: WorkerStatus | None, g: Glyphs) -> Line:
    """One line about the selected worker: what the narrow table may not show."""
    if w is None:
        return line(("no worker selected", "bright_black"))
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
    return line(*segs)


def ending_lines(status: Status, failure: tuple[int, str] | None = None) -> list[str]:
    """How the run ended (text.run_end: the words of summary and the headless line), then each
    worker, for the banner shown once the run has finished. `failure`: the rank that failed
    first and its cause (the events know which)."""
    r = status["run"]
    failed = [w for w in status["workers"] if w["state"] == State.FAILED]
    if failure is None and len(failed) == 1:  # the run's end came before its exit's event: one failed
        failure = (failed[0]["rank"], failed[0]["cause"] or "failed")
    out = [run_ended(r["exit_code"], stopped=r.get("stopped"), failure=failure) + "; press q to leave"]
    for w in status["workers"]:
        cause = w["cause"] or "no cause recorded"  # "killed on request (SIGTERM)" says its state once
        said = cause if cause.startswith(f"{w['state']} ") else f"{w['state']} ({cause})"
        out.append(f"rank {w['rank']}: {said}")
    return out
