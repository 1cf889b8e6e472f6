"""The NVML calls of probes.nvml.NvmlBackend beyond the basic counters, over nvidia-ml-py
(`self.nv`, the pynvml module): memory with the driver's reserve apart, MIG slices (their
handles, UUIDs, names and instance ids), process lists with each process's instance ids,
SM clocks and the reasons they are held back. Each speaks NVML's types and raises what
NVML raises; GpuProbe (probes.gpu, probes.gpu_reads, probes.gpu_mig) turns failures into N/A.
Runs on the supervisor's GPU poller thread.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mpwatch.probes.gpu_backend import InstanceProc, NotSupported, SlotInfo
from mpwatch.probes.gpu_sample import NO_INSTANCE


def _text(v: object) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def _maybe(fn: Callable[[object], object], h: object) -> str | None:
    try:
        return _text(fn(h))
    except Exception:  # noqa: BLE001 - named by its ids then
        return None


def _instance(v: object) -> int | None:
    return None if not isinstance(v, int) or v == NO_INSTANCE else v


class NvmlCalls:
    """Mixed into NvmlBackend, whose `nv` is the pynvml module and whose `proc_infos(h)` is
    the process list as NVML's structs."""

    nv: Any

    def __init__(self) -> None:
        self._reasons_fn: Callable[[object], int] | None = None  # the clock reasons call that works here

    def proc_infos(self, h: object) -> list[Any]:
        raise NotImplementedError  # NvmlBackend's, with its struct-version fallbacks

    def memory_v2(self, h: object) -> tuple[int, int, int]:
        """(used, total, reserved): `used` leaves out the driver's own reserve."""
        version = getattr(self.nv, "nvmlMemory_v2", None)
        if version is None:
            raise NotSupported("these bindings have no nvmlDeviceGetMemoryInfo_v2")
        try:
            m = self.nv.nvmlDeviceGetMemoryInfo(h, version=version)
        except TypeError:  # bindings older than the version argument
            raise NotSupported("these bindings have no nvmlDeviceGetMemoryInfo_v2") from None
        return int(m.used), int(m.total), int(m.reserved)

    def mig_slots(self, h: object) -> list[SlotInfo]:
        """The MIG devices of a GPU in MIG mode (none otherwise)."""
        nv = self.nv
        try:
            current, _ = nv.nvmlDeviceGetMigMode(h)
            if current != getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1):
                return []
            n = int(nv.nvmlDeviceGetMaxMigDeviceCount(h))
        except Exception:  # noqa: BLE001 - no MIG on this GPU or driver
            return []
        out: list[SlotInfo] = []
        for i in range(n):
            try:
                m = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
                gi, ci = int(nv.nvmlDeviceGetGpuInstanceId(m)), int(nv.nvmlDeviceGetComputeInstanceId(m))
            except Exception:  # noqa: BLE001 - an empty slot
                continue
            out.append((m, _maybe(nv.nvmlDeviceGetUUID, m), _maybe(nv.nvmlDeviceGetName, m), gi, ci))
        return out

    def instance_processes(self, h: object) -> list[InstanceProc]:
        """The compute processes with the MIG instance each runs in (None outside MIG)."""
        return [(int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory),
                 _instance(getattr(p, "gpuInstanceId", None)),
                 _instance(getattr(p, "computeInstanceId", None))) for p in self.proc_infos(h)]

    def sm_clocks(self, h: object) -> tuple[int, int]:
        """The SM clock now and its maximum, MHz."""
        nv = self.nv
        sm = nv.NVML_CLOCK_SM
        return int(nv.nvmlDeviceGetClockInfo(h, sm)), int(nv.nvmlDeviceGetMaxClockInfo(h, sm))

    def clock_reasons(self, h: object) -> int:
        """The clock event reasons' bitmask; a driver older than R535 has them only under their
        old name (throttle reasons, the same bits)."""
        if self._reasons_fn is not None:
            return int(self._reasons_fn(h))
        last: BaseException | None = None
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            fn = getattr(self.nv, name, None)
            if not callable(fn):
                continue
            try:
                mask = int(fn(h))
            except self.nv.NVMLError as exc:
                if getattr(exc, "value", None) != self.nv.NVML_ERROR_FUNCTION_NOT_FOUND:
                    raise
                last = exc
                continue
            self._reasons_fn = fn
            return mask
        raise last if last is not None else NotSupported("no clock reasons in these bindings")
