"""What took the machine from a run slower than its own best, as far as mpwatch sees it: processes
outside the run taking the node's CPUs (probes.node), the ranks short of CPU (the process sampler's
run delay, supervisor.diagnose.slowness), memory pressure (swapping, major page faults), I/O wait,
the clocks of the run's GPUs held back (NVML's clock event reasons), every rank's data phase grown.
Each past a threshold of its own is one cause, in words (text.slowdown_text). Pure; called by the
slowdown watch on the main thread.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from mpwatch.contract import GpuView, Outsider, slowdown, slowed_by
from mpwatch.probes.node import NodeLoad
from mpwatch.supervisor.diagnose import slowness
from mpwatch.text import slowdown_text

OUTSIDE_CPUS = 0.5  # processes outside the run take at least this many CPUs,
OUTSIDE_SHARE = 0.05  # and this share of the node's
SWAP_BPS = 1 << 20  # swapped in and out a second: memory pressure
MAJFAULTS = 100.0  # or major page faults a second
IOWAIT = 0.2  # the node's CPU time waiting on I/O


@dataclass(frozen=True)
class Seen:
    """What the watch read of the node and of its ranks at one look."""

    load: NodeLoad | None = None  # None: not looked at yet (the first look only takes the counters)
    waits: list[float] = field(default_factory=list)  # each stepping rank's cpu_wait (the sampler's)
    children: int = 0  # the median stepping rank's descendants (DataLoader workers)
    gpus: list[str] = field(default_factory=list)  # each GPU of the run held back, in words
    every_gpu: bool = False  # and that is every GPU of the run


def held(view: GpuView) -> str | None:
    """'GPU 1: sw power cap (SM clock 1095 of 1980 MHz)', or None for a GPU nothing holds back."""
    reasons = slowed_by(view.get("throttle_reasons"))
    if not reasons:
        return None
    sm, top = view.get("sm_clock_mhz"), view.get("sm_clock_max_mhz")
    clock = f" (SM clock {sm} of {top} MHz)" if sm is not None and top is not None else ""
    return f"GPU {view['index']}: {', '.join(r.replace('_', ' ') for r in reasons)}{clock}"


def gpus_held(views: Sequence[GpuView], used: set[int]) -> tuple[list[str], bool]:
    """The run's GPUs (`used`: NVML's indexes of the stepping ranks' own GPUs) held back, in
    words, and whether that is every one of them."""
    got = [t for v in views if v["index"] in used and (t := held(v))]
    return got, bool(got) and len(got) == len(used)


Cause = tuple[str, str]  # its kind (outside, cpu, memory, iowait, gpu, data) and its words


def causes(seen: Seen, growth: slowdown.Growth | None) -> tuple[list[Cause], list[Outsider]]:
    """Each cause past its threshold, and the busiest outsiders (named or not)."""
    out: list[Cause] = []
    load = seen.load
    outsiders = list(load.outsiders) if load is not None else []
    if load is not None and load.outside_cpu >= max(OUTSIDE_CPUS, OUTSIDE_SHARE * load.cpus):
        out.append(("outside", slowdown_text.outsiders(load.outsiders, load.outside_n, load.outside_cpu)))
    wait = _median(seen.waits)
    if wait is not None and wait >= slowness.CPU_WAIT:
        out.append(("cpu", slowdown_text.cpu_short(wait)))
    if load is not None and ((load.swap_bps or 0) >= SWAP_BPS or (load.majfaults or 0) >= MAJFAULTS):
        out.append(("memory", slowdown_text.memory(load.swap_bps, load.majfaults)))
    if load is not None and (load.iowait or 0) >= IOWAIT:
        out.append(("iowait", slowdown_text.iowait(load.iowait or 0.0)))
    if seen.gpus:
        out.append(("gpu", slowdown_text.gpus(seen.gpus, seen.every_gpu)))
    if growth is not None and growth.phase == "data" and growth.every:
        out.append(("data", slowdown_text.data(seen.children)))
    return out, outsiders


def _median(vals: Sequence[float]) -> float | None:
    if not vals:
        return None
    s = sorted(vals)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2

