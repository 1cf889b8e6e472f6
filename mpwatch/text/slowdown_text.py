"""The slowdown finding in words (contract.slowdown decides it; supervisor.diagnose.machine says
what took the machine): how slow the run is against its own best and since when, the phase that
grew, and each thing mpwatch sees taking the machine. Pure; any thread."""
from __future__ import annotations

import time
from collections.abc import Sequence

from mpwatch.contract import OTHER, WORK_METRIC, Outsider, SlowdownInfo
from mpwatch.text import fmt, safe

NAME_WIDTH = 40  # a phase's or a process's name as it came, printable and cut
SHOWN = 3  # outsiders named in the sentence (the numbers keep more)


def clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))


def _rate(v: float) -> str:
    return f"{v:.1f}" if v < 100 else f"{v:.0f}"


def head(info: SlowdownInfo, work: tuple[float, float] | None = None) -> str:
    """'the run slowed to 4.8 steps/s from 7.9 (0.61x) since 05:03:10'; work: the work a step
    holds now and at the best, where the script reports it."""
    now, best, ratio = info["steps_per_s"], info["best_steps_per_s"], info["ratio"]
    if work is None:
        pace = f"{_rate(now)} steps/s from {_rate(best)} ({ratio:.2f}x)"
    else:
        pace = (f"{ratio:.2f}x its best {WORK_METRIC} a second ({_rate(now)} steps/s of {fmt.num(work[0])}, "
                f"from {_rate(best)} of {fmt.num(work[1])})")
    return f"the run slowed to {pace} since {clock(info['since'])}"


def _phase(name: str) -> str:
    return "time outside any phase" if name == OTHER else safe.printable(name, NAME_WIDTH)


def growth(info: SlowdownInfo, every: bool) -> str | None:
    """"every rank's forward takes 1.7x its own best", or which ranks' where not every one's."""
    phase, ratio = info["phase"], info["phase_ratio"]
    if phase is None or ratio is None:
        return None
    if every:
        return f"every rank's {_phase(phase)} takes {ratio:.1f}x its own best"
    if not info["ranks"]:
        return f"the ranks' {_phase(phase)} takes {ratio:.1f}x its own best (the median rank's)"
    return f"the {_phase(phase)} of {fmt.ranks(info['ranks'])} takes {ratio:.1f}x its own best"


def data(children: int) -> str:
    """Why every rank's data phase grew, as far as its processes tell."""
    where = (f"their DataLoader's {children} worker process{'es' if children != 1 else ''} each"
             if children else "their own processes (no DataLoader workers)")
    return f"every rank waits longer for its data, loaded in {where}: a slower Dataset or disk"


def outsider(o: Outsider) -> str:
    user = f", user {safe.printable(o['user'], NAME_WIDTH)}" if o["user"] else ""
    return f"{safe.printable(o['name'], NAME_WIDTH)} (pid {o['pid']}{user}) {o['cpu']:.0%}"


def outsiders(shown: Sequence[Outsider], n: int, cpus: float) -> str:
    """'3 processes outside the run take 2.9 CPUs: python3 (pid 3599, user ana) 98%, ...'."""
    who = ", ".join(outsider(o) for o in shown[:SHOWN]) + (", …" if n > SHOWN else "")
    many = f"{n} processes outside the run take" if n != 1 else "a process outside the run takes"
    amount = f"{cpus:.1f}"  # singular where the number shown is one, not where the float is near it
    return f"{many} {amount} CPU{'' if amount == '1.0' else 's'}: {who}"


def cpu_short(wait: float) -> str:
    return f"the ranks wait for a CPU {wait:.0%} of the time (run delay)"


def memory(swap_bps: float | None, majfaults: float | None) -> str:
    parts = ([f"{fmt.size_long(swap_bps)}/s swapped"] if swap_bps else []) + (
        [f"{majfaults:.0f} major page faults/s"] if majfaults else [])
    return "memory pressure: " + ", ".join(parts)


def iowait(share: float) -> str:
    return f"the CPUs wait on I/O {share:.0%} of the time"


def gpus(held: Sequence[str], every: bool) -> str:
    """held: each GPU's words ('GPU 1: sw power cap (SM clock 1095 of 1980 MHz)')."""
    return ("the clocks of every GPU of the run are held back: " if every else "GPU clocks held back: ") + \
        "; ".join(held)


def describe(info: SlowdownInfo, every: bool, work: tuple[float, float] | None = None) -> str:
    """The finding: its head, the phase that grew, then what took the machine."""
    parts = [p for p in (growth(info, every), *info["causes"]) if p]
    return head(info, work) + (": " + "; ".join(parts) if parts else "")


def ended(info: SlowdownInfo | None) -> str:
    """The line an ended finding gets (the events, the headless lines)."""
    if info is None:
        return "the run's pace is back to its best"
    return (f"the run's pace is back to its best (slower from {clock(info['since'])}: "
            f"{cost(info)})")


def cost(info: SlowdownInfo, so_far: bool = False) -> str:
    """'it cost the run 340 steps (45 s)', or 'it has cost the run ... so far'."""
    steps = f"{info['lost_steps']:.0f} steps ({fmt.span(info['lost_s'])})"
    return f"it has cost the run {steps} so far" if so_far else f"it cost the run {steps}"
