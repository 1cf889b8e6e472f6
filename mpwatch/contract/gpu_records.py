"""The GPU timeline's records: the lines of gpu.jsonl (supervisor.gpu.timeline writes
them, about one tick a second, plus marks and thinning notes) and the `gpu_timeline` control
command's answer. Part of the status contract (readers import it from mpwatch.contract)."""
from __future__ import annotations

import sys
from typing import Literal, TypedDict

if sys.version_info >= (3, 11):
    from typing import NotRequired
else:  # pragma: no cover - Python 3.10
    from typing_extensions import NotRequired


class GpuTickGpu(TypedDict):
    index: int
    mem_used: int | None
    mem_total: int | None
    util_gpu: int | None
    outside: int | None  # bytes held by processes outside the run
    gi: NotRequired[int]  # a MIG slice of GPU `index`: its GPU and compute instance
    ci: NotRequired[int]


class GpuTickRank(TypedDict):
    rank: int
    gpu: int | None
    nvml: int | None  # NVML bytes of its processes on its own GPU
    allocated: int | None
    reserved: int | None
    gi: NotRequired[int]  # its own GPU is a MIG slice of GPU `gpu`: the slice's instances
    ci: NotRequired[int]


class GpuTick(TypedDict):
    """One line of gpu.jsonl (about one a second), and one sample of the `gpu_timeline`
    control command: what was on each GPU at that moment."""

    ts: float
    gpus: list[GpuTickGpu]
    ranks: list[GpuTickRank]


class GpuMark(TypedDict):
    """A moment worth a marker on the GPU screen."""

    ts: float
    gpu: int | None
    kind: Literal["proc_started", "proc_exited", "alert", "alloc_retry", "oom"]
    rank: int | None
    pid: NotRequired[int | None]
    text: str
    gi: NotRequired[int]  # about a MIG slice of GPU `gpu`: its GPU and compute instance
    ci: NotRequired[int]


# What was thinned from gpu.jsonl to keep it under its cap: the ticks between the wall
# times `from` and `to` went from ticks_before to ticks_after; marks_dropped, the oldest
# marks, went (only when marks alone fill half the cap). Functional form: "from" is a keyword.
GpuThinnedInfo = TypedDict("GpuThinnedInfo", {"from": float, "to": float, "ticks_before": int,
                                              "ticks_after": int, "marks_dropped": int})


class GpuThinned(TypedDict):
    """A note line of gpu.jsonl (supervisor.gpu.timeline): older detail was thinned,
    never dropped silently."""

    ts: float
    thinned: GpuThinnedInfo


class GpuTimelineReply(TypedDict):
    """The `gpu_timeline` control command's answer (besides "ok"): the last `window`
    seconds, at most ~300 ticks evenly picked (the latest always in), oldest first."""

    ticks: list[GpuTick]
    marks: list[GpuMark]
