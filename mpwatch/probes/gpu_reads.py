"""The GPU probe's readings: the counters (contract.gpu_counters), memory with the driver's
reserve apart (nvmlDeviceGetMemoryInfo_v2, where the driver has it), and why the clocks are
held back (the clock event reasons). Each fills a GpuSample and says in plain words why a
value is N/A.
Runs on the supervisor's GPU poller thread (probes.gpu.GpuProbe).
"""
from __future__ import annotations

from mpwatch.contract import COUNTERS, THROTTLE_REASONS
from mpwatch.probes import nvml_words
from mpwatch.probes.gpu_backend import Backend, NotSupported
from mpwatch.probes.gpu_sample import Device, GpuSample, MigSlot

# NVML's clock event reason bits (nvmlClocksEventReason*, nvml.h), in THROTTLE_REASONS' order.
REASON_BITS: dict[str, int] = dict(zip(THROTTLE_REASONS, (1 << i for i in range(len(THROTTLE_REASONS))),
                                       strict=True))


def reason_names(mask: int) -> list[str]:
    """The reasons a bitmask holds, in NVML's order; bits this mpwatch does not know are left out."""
    return [name for name, bit in REASON_BITS.items() if mask & bit]


def reason_mask(names: list[str]) -> int:
    """The bitmask of reason names (a scenario's: the GPU seam, probes.seam); unknown names count 0."""
    mask = 0
    for name in names:
        mask |= REASON_BITS.get(name, 0)
    return mask


def read_memory(b: Backend, d: Device | MigSlot, h: object, s: GpuSample, mig: bool) -> None:
    """Memory used (allocated) and total, with the driver's reserve apart where the driver
    tells it (v2); an older driver's v1 counts the reserve as used."""
    if d.mem_v2:
        try:
            s.mem_used, s.mem_total, s.mem_reserved = b.memory_v2(h)
            return
        except NotSupported:
            d.mem_v2 = False  # an older driver or bindings: v1 from now on
        except Exception as exc:  # noqa: BLE001 - N/A for this value only
            if not nvml_words.not_there(exc):
                s.errors["memory"] = nvml_words.words(exc, mig)
                return
            d.mem_v2 = False
    try:
        s.mem_used, s.mem_total = b.memory(h)
    except Exception as exc:  # noqa: BLE001
        s.errors["memory"] = nvml_words.words(exc, mig)


def read_counters(b: Backend, d: Device, s: GpuSample) -> None:
    """Every counter of contract.gpu_counters, in its own unit; a reading that fails is N/A
    for its counters alone, and one the device cannot tell at all is not asked again (and
    still said). A GPU in MIG mode is never asked what MIG does not report."""
    for c in COUNTERS:
        if c.what in s.errors:  # a reading of several counters (utilization) failed once: said once
            continue
        if d.slots and not c.on_mig:
            s.errors[c.what] = nvml_words.ON_MIG
        elif _ask(d, s, c.what):
            try:
                got = b.counter(d.handle, c)
                setattr(s, c.key, int(got) if c.digits is None else round(got, c.digits))
            except Exception as exc:  # noqa: BLE001 - N/A for this value only
                _failed(d, s, c.what, exc)


def read_reasons(b: Backend, d: Device, s: GpuSample) -> None:
    """The reasons the clocks are held back (none: []); a device that cannot tell them at all
    is not asked again, and still said."""
    if _ask(d, s, "throttle"):
        try:
            s.throttle_reasons = reason_names(b.clock_reasons(d.handle))
        except Exception as exc:  # noqa: BLE001
            _failed(d, s, "throttle", exc)


def _ask(d: Device, s: GpuSample, what: str) -> bool:
    if what in d.na:
        s.errors[what] = d.na[what]
        return False
    return True


def _failed(d: Device, s: GpuSample, what: str, exc: BaseException) -> None:
    s.errors[what] = nvml_words.words(exc)
    if nvml_words.not_there(exc):
        d.na[what] = s.errors[what]
