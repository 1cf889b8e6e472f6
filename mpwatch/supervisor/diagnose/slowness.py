"""What the supervisor sees slowing a rank's process, whether or not it is the straggler: its GPU
held back (NVML's clock event reasons that slow a busy GPU: its power cap, heat, a hardware
slowdown; its SM clock against its maximum) and its training thread short of CPU (the process
sampler's run delay, beside its CPU% and the node's load). The pace's `why`
(contract.status.Pace); contract.straggler's finding quotes it. Pure; called under the run's lock
by the snapshot builder and the straggler watch.
"""
from __future__ import annotations

import bisect
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from mpwatch.contract import GpuView, slowed_by

CPU_WAIT = 0.25  # its main thread waited for a CPU this share of the time or more: short of CPU,
CPU_WAIT_OVER = 0.15  # and this much more than its peers' median (on a busy machine every rank waits)


def cpus() -> int:
    """The CPUs this supervisor may run on (its workers share them unless pinned elsewhere)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:  # pragma: no cover - no load average here
        return None


def cpu_wait(info: Mapping[str, object] | None) -> float | None:
    wait = info.get("cpu_wait") if info else None
    return float(wait) if isinstance(wait, (int, float)) else None


def peers_wait(infos: Mapping[int, Mapping[str, object] | None]) -> dict[int, float | None]:
    """Each rank's peers' median cpu_wait (the process sampler's ProcInfo of each rank here):
    the values sorted once, each rank's own left out by its place (256 ranks: no 256 sorts)."""
    waits = {r: w for r, i in infos.items() if (w := cpu_wait(i)) is not None}
    vals = sorted(waits.values())
    out: dict[int, float | None] = {}
    for r in infos:
        own = waits.get(r)
        n = len(vals) - (own is not None)  # the others
        if n <= 0:
            out[r] = None
            continue
        j = n // 2  # the others' median (the upper one of two)
        at = bisect.bisect_left(vals, own) if own is not None else len(vals)  # where its own value sits
        out[r] = vals[j] if j < at else vals[j + 1]
    return out


def why(info: Mapping[str, object] | None, node_load: float | None, ncpu: int,
        peers: float | None = None) -> str | None:
    """'short of CPU: ready to run but without a CPU 64% of the time (CPU 31%, load 5.2 on 2
    CPUs)', or None when nothing seen slows it (info: the process sampler's ProcInfo; peers: the
    median of the other ranks' cpu_wait here, which it must exceed by CPU_WAIT_OVER: on a machine
    where every rank waits as long, being short of CPU slows none more than another)."""
    wait = cpu_wait(info)
    if wait is None or wait < CPU_WAIT or (peers is not None and wait < peers + CPU_WAIT_OVER):
        return None
    cpu = info.get("cpu_percent") if info else None
    facts = ([f"CPU {cpu:.0f}%"] if isinstance(cpu, (int, float)) else []) + (
        [f"load {node_load:.1f} on {ncpu} CPU{'s' if ncpu > 1 else ''}"] if node_load is not None else [])
    return f"short of CPU: ready to run but without a CPU {wait:.0%} of the time" + (
        f" ({', '.join(facts)})" if facts else "")


def gpu_why(view: GpuView | None) -> str | None:
    """'its GPU 1 is throttled: sw power cap (SM clock 1095 of 1980 MHz)', or None when nothing
    holds a GPU's clocks back but choices (idle, application clocks) or NVML cannot tell."""
    held = slowed_by(view.get("throttle_reasons")) if view is not None else []
    if view is None or not held:
        return None
    sm, top = view.get("sm_clock_mhz"), view.get("sm_clock_max_mhz")
    clock = f" (SM clock {sm} of {top} MHz)" if sm is not None and top is not None else ""
    return f"its GPU {view['index']} is throttled: {', '.join(r.replace('_', ' ') for r in held)}{clock}"


def gpu_reasons(views: Sequence[GpuView], placed: Mapping[int, int | None]) -> dict[int, str]:
    """Each rank whose own GPU (placed: rank -> NVML's index, the GPU watcher's) is throttled."""
    by_index = {v["index"]: v for v in views}
    return {r: text for r, i in placed.items() if i is not None and (text := gpu_why(by_index.get(i)))}


@dataclass(frozen=True)
class Node:
    """What `why` compares a rank with, read once per status: the node's load, its CPUs, each
    rank's peers' median cpu_wait, and the ranks whose GPU is throttled."""

    load: float | None = None
    cpus: int = 1
    peers: dict[int, float | None] = field(default_factory=dict)
    gpus: dict[int, str] = field(default_factory=dict)

    @classmethod
    def now(cls, infos: Mapping[int, Mapping[str, object] | None],
            gpus: Mapping[int, str] | None = None) -> Node:
        """infos: each rank's ProcInfo (the process sampler's), None where it has none; gpus:
        gpu_reasons of the GPU watcher's views."""
        return cls(load(), cpus(), peers_wait(infos), dict(gpus or {}))

    def why(self, rank: int, info: Mapping[str, object] | None) -> str | None:
        parts = [t for t in (self.gpus.get(rank), why(info, self.load, self.cpus, self.peers.get(rank))) if t]
        return "; ".join(parts) or None
