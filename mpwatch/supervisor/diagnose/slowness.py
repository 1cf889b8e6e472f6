"""What the supervisor sees slowing a rank's process, whether or not it is the straggler: its
training thread short of CPU (the process sampler's run delay, beside its CPU% and the node's
load). The pace's `why` (contract.status.Pace); contract.straggler's finding quotes it. Pure;
called under the run's lock by the snapshot builder and the straggler watch.
"""
from __future__ import annotations

import os
from collections.abc import Mapping

CPU_WAIT = 0.25  # its main thread waited for a CPU this share of the time or more: short of CPU


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


def why(info: Mapping[str, object] | None, node_load: float | None, ncpu: int) -> str | None:
    """'short of CPU: ready to run but without a CPU 64% of the time (CPU 31%, load 5.2 on 2
    CPUs)', or None when nothing seen slows it (info: the process sampler's ProcInfo)."""
    wait = info.get("cpu_wait") if info else None
    if not isinstance(wait, (int, float)) or wait < CPU_WAIT:
        return None
    cpu = info.get("cpu_percent") if info else None
    facts = ([f"CPU {cpu:.0f}%"] if isinstance(cpu, (int, float)) else []) + (
        [f"load {node_load:.1f} on {ncpu} CPU{'s' if ncpu > 1 else ''}"] if node_load is not None else [])
    return f"short of CPU: ready to run but without a CPU {wait:.0%} of the time" + (
        f" ({', '.join(facts)})" if facts else "")
