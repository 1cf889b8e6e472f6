"""The worker table's cells, one function a column (tui.render.columns' records name them): a
worker's row and a child process's. Pure: a status in, text and styles out; UI thread.
"""
from __future__ import annotations

from mpwatch.contract import (
    ALIVE_STATES,
    ENDED_STATES,
    ChildStatus,
    StallInfo,
    State,
    WorkerGpu,
    WorkerStatus,
    culprit,
)
from mpwatch.text import eventtext, fmt
from mpwatch.text.gpu_names import label
from mpwatch.text.input_notes import input_notes
from mpwatch.tui.render import bars
from mpwatch.tui.render.glyphs import Glyphs
from mpwatch.tui.render.segs import BLANK, Cell, Line, cell, line

STATE_STYLE: dict[str, str] = {
    State.STARTING: "cyan", State.RUNNING: "green", State.STALLED: "bold yellow", State.PAUSED: "bold blue",
    State.RESTARTING: "magenta", State.EXITED: "green", State.FAILED: "bold red", State.KILLED: "red",
}
PHASE_STYLE = {"data": "cyan", "compute": "green", "sync": "yellow", "other": "bright_black"}


def state_cell(state: str, g: Glyphs) -> Line:
    return line((f"{g.state.get(state, '?')} {state}", STATE_STYLE.get(state, "")))


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
        return line((text, ""), (g.collision, "bold yellow"))
    return cell(text)


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
    if slow is not None and st in ALIVE_STATES:
        parts += [eventtext.slow_start_text(slow.get("limit"))] + _doing(slow, at="in")
    if w["restarts"]:
        parts.append(f"restarted {w['restarts']}x")
    if w["unkillable"]:
        parts.append("could not kill: " + ", ".join(str(p.get("pid")) for p in w["unkillable"]))
    if w["dropped"]:
        parts.append(f"{w['dropped']} reports dropped")
    parts += input_notes(w)
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
        return line((step, ""), (auto_mark(g), "bright_black"))
    return cell(step)


def phases_cell(w: WorkerStatus, width: int, g: Glyphs) -> Line:
    shares = bars.phase_shares(w["phases"], w["uptime"])
    return line(*((chars, PHASE_STYLE[p]) for p, chars in bars.stacked_bar(shares, width, g.phase)))


def hb_cell(w: WorkerStatus) -> Cell:
    if w["state"] not in ALIVE_STATES or "node_error" in w:
        return BLANK
    age = w["heartbeat_age"]
    if age is None:
        return cell("-")
    style = "bold yellow" if age >= 10 else ("yellow" if age >= 3 else "")
    return line((fmt.age(age), style))


def _pct(v: float | None) -> Cell:
    return cell("" if v is None else f"{v:.0f}")


# ----------------------------------------------- a column's cell, as its record calls it ----
# A worker's: (the worker, the column's width, the glyphs, its children folded).
def rank_cell(w: WorkerStatus, width: int, g: Glyphs, folded: bool) -> Cell:
    fold = (g.folded if folded else g.unfolded) if w["children"] else " "
    return cell(f"{fold}{w['rank']}")


def worker_state_cell(w: WorkerStatus, width: int, g: Glyphs, folded: bool) -> Cell:
    """A row of a node that cannot be reached is never shown as a hang."""
    return line(("unreachable", "bright_black")) if "node_error" in w else state_cell(w["state"], g)


def trend_cell(w: WorkerStatus, width: int, g: Glyphs, folded: bool) -> Cell:
    return line((bars.sparkline(w["loss_tail"], width, g.spark), "cyan"))


def cpu_cell(w: WorkerStatus, *_: object) -> Cell:
    return _pct(w["cpu_percent"])


# A child process's: (the child, its worker's rank, the glyphs, a PID column in sight).
def child_rank_cell(c: ChildStatus, rank: int, g: Glyphs, pid_shown: bool) -> Cell:
    return cell(f"  {g.child}")


def child_state_cell(c: ChildStatus, rank: int, g: Glyphs, pid_shown: bool) -> Cell:
    """With no PID column in sight the state cell says the child's pid."""
    if pid_shown:
        return line((c["status"], "bright_black"))
    return line((f"{c['pid']} {c['status'][:5]}", "bright_black"))


def child_cpu_cell(c: ChildStatus, *_: object) -> Cell:
    return _pct(c["cpu_percent"])
