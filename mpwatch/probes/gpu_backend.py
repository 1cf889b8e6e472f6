"""What a GPU backend answers (`Backend`), and the two ways it fails: the leaf the probe
(probes.gpu) and both backends (probes.nvml, the real one; probes.nvml_scripted, the scripted
one) share, so that none of them imports another. Runs on the supervisor's GPU poller thread.
"""
from __future__ import annotations

from typing import Protocol

ProcList = list[tuple[int, "int | None"]]  # [(pid, used bytes or None where the driver cannot tell)]


class GpuUnavailable(Exception):
    """No usable GPU backend; the message is the one line shown to the user."""


class NotSupported(Exception):
    """The device cannot answer this question at all (MIG, an older GPU or driver): N/A
    for good, so the probe stops asking."""


class Backend(Protocol):
    """What GpuProbe asks of a backend; `h` is whatever `handle()` returned. A backend may
    have more (NvmlBackend's probes.nvml_calls.NvmlCalls: memory with the driver's reserve
    apart, MIG slices, process instance ids, clocks); the probe asks for those only where they
    exist."""

    kind: str

    def init(self) -> None: ...
    def shutdown(self) -> None: ...
    def count(self) -> int: ...
    def handle(self, index: int) -> object: ...
    def name(self, h: object) -> str: ...
    def uuid(self, h: object) -> str: ...
    def mig_uuids(self, h: object) -> list[str]: ...
    def memory(self, h: object) -> tuple[int, int]: ...
    def utilization(self, h: object) -> tuple[int, int]: ...
    def temperature(self, h: object) -> int: ...
    def power_w(self, h: object) -> float: ...
    def processes(self, h: object) -> ProcList: ...

    def process_utilization(self, h: object, since_us: int) -> tuple[dict[int, int], int]:
        """({pid: SM %} averaged over the samples newer than since_us, newest sample's
        timestamp); raises NotSupported where the device has no process samples."""
        ...
