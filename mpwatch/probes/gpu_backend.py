"""What a GPU backend answers (`Backend`), and the two ways it fails: the leaf the probe
(probes.gpu) and the backends (probes.nvml, the real one; the GPU seam's, probes.seam) share,
so that none of them imports another. Runs on the supervisor's GPU poller thread.
"""
from __future__ import annotations

from typing import Protocol

from mpwatch.contract import GpuCounter

ProcList = list[tuple[int, "int | None"]]  # [(pid, used bytes or None where the driver cannot tell)]
SlotInfo = tuple[object, "str | None", "str | None", int, int]  # a MIG device: (handle, uuid, name, gi, ci)
InstanceProc = tuple[int, "int | None", "int | None", "int | None"]  # (pid, bytes, gi, ci); None: N/A


class GpuUnavailable(Exception):
    """No usable GPU backend; the message is the one line shown to the user."""


class NotSupported(Exception):
    """The device cannot answer this question at all (MIG, an older GPU or driver): N/A
    for good, so the probe stops asking."""


class Backend(Protocol):
    """What GpuProbe asks of a backend; `h` is whatever `handle()` returned, or a MIG device's
    handle from `mig_slots()`. Both backends answer all of it, each call as NVML would (the
    real one, probes.nvml.NvmlBackend with probes.nvml_calls.NvmlCalls; the one the GPU seam
    serves, probes.seam): a failure raises an exception whose `value` is NVML's
    code where there is one (probes.nvml_words words it), or NotSupported."""

    kind: str

    def init(self) -> None: ...
    def shutdown(self) -> None: ...
    def count(self) -> int: ...
    def handle(self, index: int) -> object: ...
    def name(self, h: object) -> str: ...
    def uuid(self, h: object) -> str: ...
    def mig_uuids(self, h: object) -> list[str]: ...
    def memory(self, h: object) -> tuple[int, int]: ...

    def counter(self, h: object, c: GpuCounter) -> float:
        """A counter of contract.gpu_counters in its own unit (watts, not NVML's milliwatts)."""
        ...

    def processes(self, h: object) -> ProcList: ...

    def process_utilization(self, h: object, since_us: int) -> tuple[dict[int, int], int]:
        """({pid: SM %} averaged over the samples newer than since_us, newest sample's
        timestamp); raises NotSupported where the device has no process samples."""
        ...

    def memory_v2(self, h: object) -> tuple[int, int, int]:
        """(used, total, reserved): `used` leaves out the driver's own reserve
        (nvmlDeviceGetMemoryInfo_v2); NotSupported where the driver or bindings lack it."""
        ...

    def mig_slots(self, h: object) -> list[SlotInfo]:
        """The MIG devices of a GPU in MIG mode (none otherwise)."""
        ...

    def instance_processes(self, h: object) -> list[InstanceProc]:
        """The compute processes with the MIG instance each runs in (None outside MIG)."""
        ...

    def clock_reasons(self, h: object) -> int:
        """The clock event reasons' bitmask (NVML's bits: probes.gpu_reads.REASON_BITS)."""
        ...
