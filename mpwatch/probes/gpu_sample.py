"""What the GPU probe (probes.gpu) hands the supervisor: one GpuSample per GPU at one instant,
a GPU in MIG mode with one per slice under it, and the probe's own record of each device
(Device, MigSlot). Plain data; built on the supervisor's GPU poller thread.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mpwatch.probes.gpu_backend import ProcList

NO_INSTANCE = 0xFFFFFFFF  # NVML's gpuInstanceId / computeInstanceId of a process outside MIG


@dataclass(frozen=True)
class MigId:
    """Which MIG slice: its GPU instance, compute instance and profile ("1g.10gb")."""

    gi: int
    ci: int
    profile: str | None


@dataclass
class GpuSample:
    """One device (a GPU, or a MIG slice of one) at one instant. None means N/A (the call
    failed or is unsupported); `errors` says why, in plain words."""

    index: int  # NVML's index of the GPU (a slice's: its GPU's)
    name: str | None
    uuid: str | None = None
    mem_used: int | None = None  # allocated; the driver's reserve apart where it says so
    mem_total: int | None = None
    # The counters, one field each, named and typed as contract.gpu_counters.COUNTERS say.
    util_gpu: int | None = None
    util_mem: int | None = None
    temperature: int | None = None
    power_w: float | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    processes: ProcList | None = None  # None when not sampled now (or the query failed)
    proc_util: dict[int, int] | None = None  # pid -> SM %; None when not sampled now or N/A
    errors: dict[str, str] = field(default_factory=dict)  # what -> why, for the values that are N/A
    ts: float = 0.0  # wall clock
    mem_reserved: int | None = None  # the driver's own share (nvmlDeviceGetMemoryInfo_v2)
    throttle_reasons: list[str] | None = None  # contract.gpu_view.ThrottleReason names; None: N/A
    mig: MigId | None = None  # a MIG slice of GPU `index`
    slices: list[GpuSample] = field(default_factory=list)  # a GPU in MIG mode: its slices


@dataclass
class MigSlot:
    """A MIG device of a GPU, as found at open: its handle and what does not change."""

    handle: object
    uuid: str | None
    name: str | None
    id: MigId
    mem_v2: bool = True  # False once it has no nvmlDeviceGetMemoryInfo_v2


@dataclass
class Device:
    index: int
    handle: object
    name: str | None
    uuid: str | None
    proc_util_ok: bool = True  # False once the device said it has no process samples
    util_seen_us: int = 0  # NVML timestamp of the newest process sample read
    mem_v2: bool = True  # False once the driver said it has no nvmlDeviceGetMemoryInfo_v2
    na: dict[str, str] = field(default_factory=dict)  # what the device cannot tell at all -> why
    slots: list[MigSlot] = field(default_factory=list)  # in MIG mode: its slices
    parent_procs: bool = True  # False once the GPU refused its whole process list (MIG, not root)
