"""The NVML calls of probes.nvml.NvmlBackend beyond the basic counters, over nvidia-ml-py
(`self.nv`, the pynvml module): memory with the driver's reserve apart, MIG slices (their
handles, UUIDs, names and instance ids), process lists with each process's instance ids,
the reasons the clocks are held back. Each speaks NVML's types and raises what
NVML raises; GpuProbe (probes.gpu, probes.gpu_reads, probes.gpu_mig) turns failures into N/A.
Runs on the supervisor's GPU poller thread.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mpwatch.probes.gpu_backend import InstanceProc, NotSupported, SlotInfo
from mpwatch.probes.gpu_sample import NO_INSTANCE

MIG_SLOTS_MAX = 64  # a GPU's MIG devices (an A100/H100 has 7 at most)


def as_text(v: object) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def maybe_text(fn: Callable[[object], object], h: object) -> str | None:
    try:
        return as_text(fn(h))
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

    def mig_devices(self, h: object) -> list[object]:
        """The handles of a GPU's MIG devices when it is in MIG mode (none otherwise; an empty
        slot has none)."""
        nv = self.nv
        try:
            current, _ = nv.nvmlDeviceGetMigMode(h)
            if current != getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1):
                return []
            n = min(int(nv.nvmlDeviceGetMaxMigDeviceCount(h)), MIG_SLOTS_MAX)
        except Exception:  # noqa: BLE001 - no MIG on this GPU or driver
            return []
        out = []
        for i in range(n):
            try:
                out.append(nv.nvmlDeviceGetMigDeviceHandleByIndex(h, i))
            except Exception:  # noqa: BLE001 - an empty slot
                continue
        return out

    def mig_slots(self, h: object) -> list[SlotInfo]:
        """The MIG devices of a GPU in MIG mode (none otherwise)."""
        nv = self.nv
        out: list[SlotInfo] = []
        for m in self.mig_devices(h):
            try:
                gi, ci = int(nv.nvmlDeviceGetGpuInstanceId(m)), int(nv.nvmlDeviceGetComputeInstanceId(m))
            except Exception:  # noqa: BLE001 - a slot NVML cannot place
                continue
            out.append((m, maybe_text(nv.nvmlDeviceGetUUID, m), maybe_text(nv.nvmlDeviceGetName, m), gi, ci))
        return out

    def instance_processes(self, h: object) -> list[InstanceProc]:
        """The compute processes with the MIG instance each runs in (None outside MIG)."""
        return [(int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory),
                 _instance(getattr(p, "gpuInstanceId", None)),
                 _instance(getattr(p, "computeInstanceId", None))) for p in self.proc_infos(h)]

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
