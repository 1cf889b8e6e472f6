"""The GPU view of a status (Status.gpus): each GPU NVML sees, its processes labelled by rank,
where its memory goes, its recent history and its alerts (supervisor.gpu builds them).
Readers import every name from mpwatch.contract. Pure; any thread.

A GPU in MIG mode is split into slices (MIG devices), each a GpuView of its own under the GPU's
`slices`, with `mig` saying which one: its memory, processes, ranks, alerts and history are its
own, as a whole GPU's are. `leaves()` lists what ranks run on: every GPU outside MIG mode and
every slice; `dev_key()` names one apart from its GPU.
"""
from __future__ import annotations

import sys
from typing import Any, Literal, TypedDict, cast, get_args

if sys.version_info >= (3, 11):
    from typing import NotRequired
else:  # pragma: no cover - Python 3.10
    from typing_extensions import NotRequired


class GpuProcess(TypedDict):
    """A compute process NVML lists on a GPU, labelled by pid."""

    pid: int
    rank: int | None  # a worker of this run
    child_of: int | None  # a worker's descendant (DataLoader worker, spawned trainer)
    user: str | None
    cmd: str | None
    mem_bytes: int | None  # None where the driver cannot tell (WDDM, some vGPUs)
    visible: bool  # False: the pid is in another PID namespace (a container)
    sm_util: int | None  # % SM of this process (NVML process samples); None: N/A
    since: NotRequired[float]  # wall clock it was first seen on this GPU


AlertKind = Literal[
    "contention",  # two or more ranks have this GPU as their own
    "stray_context",  # a rank holds memory on a GPU that is not its own (all on GPU 0)
    "outside",  # a process outside the run holds a real share of a GPU a rank uses
    "memory_high",  # memory pressure, with the time to full at the current slope
    "alloc_retries",  # a rank's allocator retries rise: OOM is near
    "oom",  # a rank ran out of CUDA memory (died of it, or caught it): the OOM finding
    "fragmentation",  # much reserved memory unallocated while little is free
    "idle",  # a GPU idle while the others work (or while its ranks run)
]


ALERT_KINDS = frozenset(get_args(AlertKind))


def alert_kind(value: object) -> AlertKind | None:
    """The AlertKind a value read back from JSON names; None for anything else."""
    return cast(AlertKind, value) if value in ALERT_KINDS else None


class OomDetail(TypedDict):
    """An OOM finding's own fields (supervisor.gpu.oom_story): its numbers, its story, its note."""

    story: Literal["fragmentation", "others", "own", "unknown"]  # what explains it (its hint says so)
    note: str  # the rank's NOTE in the table: who held the memory, first
    died: bool  # the rank died of it (else it caught it and went on)
    tried: int | None  # bytes it asked for
    free: int | None  # what the GPU had free
    total: int | None
    allocated: int | None  # the rank's allocator at the OOM
    reserved: int | None
    cached: int | None  # reserved but unallocated
    snapshot: str | None  # the allocator snapshot written at the OOM (--cuda-memory-history)


class GpuAlert(TypedDict):
    kind: AlertKind
    key: str  # names the condition: an alert that goes on keeps its key
    gpu: int | None
    rank: int | None
    message: str  # one sentence, with the numbers
    since: float  # wall clock it started
    severity: NotRequired[Literal["error", "warning", "info"]]
    hint: NotRequired[str]  # what to do about it
    short: NotRequired[str]  # a few words for the GPU row ("2 ranks share", "OOM rank 3")
    ranks: NotRequired[list[int]]
    gi: NotRequired[int]  # about a MIG slice of GPU `gpu`: its GPU and compute instance
    ci: NotRequired[int]
    pid: NotRequired[int]
    user: NotRequired[str | None]
    mem_bytes: NotRequired[int | None]
    fraction: NotRequired[float]
    growth_bytes_per_s: NotRequired[float | None]
    time_to_full_s: NotRequired[float | None]
    others: NotRequired[list[dict[str, Any]]]
    line: NotRequired[str]
    oom: NotRequired[OomDetail]  # an OOM finding's


# Why a GPU's clocks are held back now (NVML's clock event reasons, once "throttle reasons"),
# in nvidia-smi's words; GpuView.throttle_reasons lists those that hold.
ThrottleReason = Literal[
    "idle",  # nothing runs
    "applications_clocks_setting",  # clocks set to the applications' values (nvidia-smi -ac)
    "sw_power_cap",  # the power limit: the driver lowers the clocks to stay under it
    "hw_slowdown",  # the hardware slows the clocks (too hot, or a power brake)
    "sync_boost",  # held to the slowest GPU of its sync boost group
    "sw_thermal_slowdown",  # the driver lowers the clocks: GPU or memory too hot
    "hw_thermal_slowdown",  # the hardware lowers the clocks: too hot
    "hw_power_brake_slowdown",  # the power brake (the power supply asks for less)
    "display_clock_setting",  # held by the display clock
    "board_limit",  # the board's limit policy
    "reliability",  # the reliability policy
]
THROTTLE_REASONS: tuple[ThrottleReason, ...] = get_args(ThrottleReason)
# The reasons that make a busy GPU run slower than it could: power and heat, not choices.
SLOWDOWNS: frozenset[ThrottleReason] = frozenset({
    "sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"})


def slowed_by(reasons: list[ThrottleReason] | None) -> list[ThrottleReason]:
    """The reasons among a GPU's `throttle_reasons` that slow it (SLOWDOWNS), in their order."""
    return [r for r in reasons or () if r in SLOWDOWNS]


class MigSlice(TypedDict):
    """Which MIG slice a view (or a rank's GPU) is: a MIG device of its GPU, named by its GPU
    instance and compute instance. DCGM exporter's labels GPU_I_ID and GPU_I_PROFILE."""

    gi: int  # GPU instance id
    ci: int  # compute instance id (0 unless the GPU instance is split further)
    profile: str | None  # "1g.10gb": its share of the GPU's compute and memory


class MemoryBreakdown(TypedDict):
    """Where a GPU's used memory goes (bytes; None where unknown). The parts add up to at
    most mem_used; what NVML counts beyond them is not attributed to any process."""

    allocated: int | None  # torch allocated by the ranks whose own GPU this is
    cached: int | None  # reserved but not allocated (the caching allocator)
    other: int | None  # the rest of the ranks' processes' NVML memory (context, non-torch)
    outside: int | None  # processes outside the run


# The words of a view's `errors` that readers recognise (probes.nvml_words says them).
ON_MIG = "n/a on MIG"  # what MIG does not report: utilization, per-process SM %
ROOT_ON_MIG = "needs root on this MIG GPU"  # what NVML keeps for root on a GPU in MIG mode

HISTORY_POINTS = 120  # points of GpuHistory: two minutes at the default 1 s GPU interval


class GpuHistory(TypedDict):
    """The last HISTORY_POINTS samples, oldest first, one per poller tick."""

    mem_used: list[int | None]
    util_gpu: list[int | None]


class GpuView(TypedDict):
    index: int
    name: str | None
    uuid: str | None
    mem_used: int | None
    mem_total: int | None
    util_gpu: int | None  # %
    util_mem: int | None  # %
    temperature: int | None  # C
    power_w: float | None
    processes: list[GpuProcess]
    errors: dict[str, str]  # value -> why it is N/A
    ts: float
    processes_ts: float | None
    alerts: list[GpuAlert]
    ranks: list[int]  # ranks whose own GPU this is
    breakdown: MemoryBreakdown
    history: GpuHistory
    node: NotRequired[int]  # a merged view: the node rank of the GPU's machine
    # a merged view: NVML's index there (`index` numbers every node's GPUs apart)
    node_index: NotRequired[int]
    # The driver's own share (nvmlDeviceGetMemoryInfo_v2): not in mem_used, so not the ranks'.
    # None: not told apart (an older driver counts it in mem_used).
    mem_reserved: NotRequired[int | None]
    sm_clock_mhz: NotRequired[int | None]  # the SM clock now
    sm_clock_max_mhz: NotRequired[int | None]  # the most it can run at
    throttle_reasons: NotRequired[list[ThrottleReason] | None]  # holding its clocks now; None: N/A
    mig: NotRequired[MigSlice]  # a MIG slice of GPU `index` (a view in its GPU's `slices`)
    slices: NotRequired[list[GpuView]]  # a GPU in MIG mode: its slices, each a view of its own


DevKey = tuple[int, int | None, int | None]  # (GPU index, GPU instance, compute instance)


def dev_key(view: GpuView) -> DevKey:
    """A GPU's or a slice's key: (index, None, None) for a whole GPU, (index, gi, ci) for a slice."""
    mig = view.get("mig")
    return (view["index"], None, None) if mig is None else (view["index"], mig["gi"], mig["ci"])


def leaves(gpus: list[GpuView]) -> list[GpuView]:
    """What ranks run on: every GPU outside MIG mode, and the slices of those in it."""
    return [leaf for g in gpus for leaf in (g.get("slices") or [g])]


def devices(gpus: list[GpuView]) -> list[GpuView]:
    """Every view: each GPU, then its slices."""
    return [v for g in gpus for v in (g, *g.get("slices", ()))]
