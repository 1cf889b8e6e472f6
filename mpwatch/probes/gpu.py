"""GPU sampling behind a small backend interface: real NVML, a scripted fake, or absent.
Runs on the supervisor's GPU poller thread (supervisor.gpu.watch).

A backend answers a handful of per-device questions (name, UUID, memory, utilization,
temperature, power, compute processes, per-process SM utilization); `GpuProbe` asks them
and turns every failed call into None ("N/A") for that one value, so one unsupported
counter or a lost GPU never stops the poller. Handles, names and UUIDs are got once, at
`open()`.

Backends:
- `NvmlBackend`: the official bindings (package nvidia-ml-py, `import pynvml`). Tests run it,
  with pynvml, on a stand-in libnvidia-ml.so.1 built from C (testing.libnvml).
- `FakeBackend` (testing.scripted_nvml): TEST-ONLY. Selected by a scenario's path, the
  MPWATCH_FAKE_NVML setting (settings.Settings.fake_nvml); see its docstring for the format.
- no backend: `open_backend()` returns a one-line reason instead ("NVML library not
  found ...", "no NVIDIA GPU found", "driver/bindings mismatch: ...").
"""
from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

ProcList = list[tuple[int, "int | None"]]  # [(pid, used bytes or None where the driver cannot tell)]


class GpuUnavailable(Exception):
    """No usable GPU backend; the message is the one line shown to the user."""


class NotSupported(Exception):
    """The device cannot answer this question at all (MIG, an older GPU or driver): N/A
    for good, so the probe stops asking."""


class Backend(Protocol):
    """What GpuProbe asks of a backend; `h` is whatever `handle()` returned."""

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


@dataclass
class GpuSample:
    """One device at one instant. None means N/A (the call failed or is unsupported)."""

    index: int
    name: str | None
    uuid: str | None = None
    mem_used: int | None = None
    mem_total: int | None = None
    util_gpu: int | None = None
    util_mem: int | None = None
    temperature: int | None = None
    power_w: float | None = None
    processes: ProcList | None = None  # None when not sampled now (or the query failed)
    proc_util: dict[int, int] | None = None  # pid -> SM %; None when not sampled now or N/A
    errors: dict[str, str] = field(default_factory=dict)  # what -> why, for the values that are N/A
    ts: float = 0.0  # wall clock


@dataclass
class Device:
    index: int
    handle: object
    name: str | None
    uuid: str | None
    proc_util_ok: bool = True  # False once the device said it has no process samples
    util_seen_us: int = 0  # NVML timestamp of the newest process sample read


# --------------------------------------------------------------------- reasons ----
def reason_for(exc: BaseException) -> str:
    """The one line a user sees for an NVML start-up failure."""
    if isinstance(exc, GpuUnavailable):
        return str(exc)
    try:
        import pynvml
    except ImportError:  # pragma: no cover - the bindings are a dependency
        return f"NVML unavailable: {exc}"
    if isinstance(exc, pynvml.NVMLError):
        code = getattr(exc, "value", None)
        if code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
            # the host named: the line is read elsewhere too (attach over ssh, a replay of its files)
            return f"NVML library not found (libnvidia-ml.so.1): no NVIDIA driver on {socket.gethostname()}"
        if code == pynvml.NVML_ERROR_DRIVER_NOT_LOADED:
            return "no NVIDIA GPU found: the NVIDIA driver is not loaded"
        if code == pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH:
            return ("driver/bindings mismatch: the NVML library and the loaded kernel driver differ "
                    "(driver updated without a reboot?)")
        if code == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
            return f"driver/bindings mismatch: this NVIDIA driver lacks a function the bindings need ({exc})"
        if code == pynvml.NVML_ERROR_NO_PERMISSION:
            return "NVML refused access (no permission to the NVIDIA devices)"
        if code == pynvml.NVML_ERROR_GPU_IS_LOST:
            return "a GPU has fallen off the bus (NVML: GPU is lost)"
        return f"NVML failed to start: {exc}"
    mismatch = getattr(pynvml, "NVMLLibraryMismatchError", None)
    if mismatch is not None and isinstance(exc, mismatch):
        return f"driver/bindings mismatch: {exc}"
    if isinstance(exc, (AttributeError, TypeError)):
        return f"driver/bindings mismatch: {exc}"
    return f"NVML failed to start: {type(exc).__name__}: {exc}"


# ------------------------------------------------------------------- backends ----
def _text(v: object) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


class NvmlBackend:
    """The real thing, over nvidia-ml-py. `nv` is the pynvml module (a stand-in in tests)."""

    kind = "nvml"

    def __init__(self) -> None:
        import pynvml  # nvidia-ml-py; imported here so the fake needs no driver

        self.nv = pynvml
        self._procs_fn: object = None

    def init(self) -> None:
        self.nv.nvmlInit()

    def shutdown(self) -> None:
        try:
            self.nv.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down: nothing to tell
            pass

    def count(self) -> int:
        return int(self.nv.nvmlDeviceGetCount())

    def handle(self, index: int) -> object:
        return self.nv.nvmlDeviceGetHandleByIndex(index)

    def name(self, h: object) -> str:
        return _text(self.nv.nvmlDeviceGetName(h))

    def uuid(self, h: object) -> str:
        return _text(self.nv.nvmlDeviceGetUUID(h))  # "GPU-…": the spelling CUDA_VISIBLE_DEVICES takes

    def mig_uuids(self, h: object) -> list[str]:
        """UUIDs ("MIG-…") of the MIG instances of a GPU in MIG mode: a worker on one of
        them names it, and it maps to this GPU's index."""
        nv = self.nv
        try:
            current, _ = nv.nvmlDeviceGetMigMode(h)
            if current != getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1):
                return []
            n = int(nv.nvmlDeviceGetMaxMigDeviceCount(h))
        except Exception:  # noqa: BLE001 - no MIG on this GPU or driver
            return []
        out = []
        for i in range(n):
            try:
                out.append(_text(nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetMigDeviceHandleByIndex(h, i))))
            except Exception:  # noqa: BLE001 - an empty slot
                continue
        return out

    def memory(self, h: object) -> tuple[int, int]:
        m = self.nv.nvmlDeviceGetMemoryInfo(h)
        return int(m.used), int(m.total)

    def utilization(self, h: object) -> tuple[int, int]:
        u = self.nv.nvmlDeviceGetUtilizationRates(h)
        return int(u.gpu), int(u.memory)

    def temperature(self, h: object) -> int:
        return int(self.nv.nvmlDeviceGetTemperature(h, self.nv.NVML_TEMPERATURE_GPU))

    def power_w(self, h: object) -> float:
        return float(self.nv.nvmlDeviceGetPowerUsage(h)) / 1000.0  # milliwatts

    def processes(self, h: object) -> ProcList:
        # The unversioned call needs the newest struct; an older driver only has _v2.
        fns = [self._procs_fn] if self._procs_fn else [
            self.nv.nvmlDeviceGetComputeRunningProcesses,
            getattr(self.nv, "nvmlDeviceGetComputeRunningProcesses_v2", None)]
        last: BaseException | None = None
        for fn in fns:
            if not callable(fn):
                continue
            try:
                procs = fn(h)
            except Exception as exc:
                if not _missing_function(self.nv, exc):
                    raise
                last = exc
                continue
            self._procs_fn = fn
            # usedGpuMemory is None where the driver cannot tell (WDDM, some vGPUs).
            return [(int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory)) for p in procs]
        raise last if last is not None else RuntimeError("no process query in these bindings")

    def process_utilization(self, h: object, since_us: int) -> tuple[dict[int, int], int]:
        nv = self.nv
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(h, since_us)
        except nv.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in (nv.NVML_ERROR_NOT_FOUND, getattr(nv, "NVML_SUCCESS", 0)):
                return {}, since_us  # no process ran a kernel since since_us
            if code in (nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_FUNCTION_NOT_FOUND):
                raise NotSupported(str(exc)) from None
            raise
        return average_samples([(int(s.pid), int(s.timeStamp), int(s.smUtil)) for s in samples], since_us)


def average_samples(samples: Sequence[tuple[int, int, int]], since_us: int) -> tuple[dict[int, int], int]:
    """({pid: mean SM %} over samples newer than since_us, newest timestamp). Some drivers
    return older samples too, and some an smUtil above 100: both are left out/clamped."""
    sums: dict[int, list[int]] = {}
    newest = since_us
    for pid, ts, sm in samples:
        if ts <= since_us:
            continue
        newest = max(newest, ts)
        acc = sums.setdefault(pid, [0, 0])
        acc[0] += min(max(sm, 0), 100)
        acc[1] += 1
    return {pid: round(total / n) for pid, (total, n) in sums.items()}, newest


def _missing_function(nv: object, exc: BaseException) -> bool:
    """The driver's NVML lacks this (versioned) entry point: try an older one."""
    mismatch = getattr(nv, "NVMLLibraryMismatchError", None)
    if isinstance(mismatch, type) and isinstance(exc, mismatch):
        return True
    err = getattr(nv, "NVMLError", None)
    return (isinstance(err, type) and isinstance(exc, err)
            and getattr(exc, "value", None) == getattr(nv, "NVML_ERROR_FUNCTION_NOT_FOUND", None))


def open_backend(scenario: str | None = None) -> tuple[Backend | None, str | None]:
    """(backend, None) ready to sample, or (None, one-line reason); scenario: a scripted
    NVML's (TEST-ONLY), else the real one."""
    backend: Backend
    try:
        if scenario:
            from mpwatch.testing.scripted_nvml import FakeBackend  # TEST-ONLY

            backend = FakeBackend(scenario)
        else:
            try:
                backend = NvmlBackend()
            except ImportError:
                return None, "NVML bindings not installed (pip install nvidia-ml-py)"
        backend.init()
    except Exception as exc:  # noqa: BLE001 - whatever NVML raises becomes one line
        return None, reason_for(exc)
    try:
        n = backend.count()
    except Exception as exc:  # noqa: BLE001
        backend.shutdown()
        return None, reason_for(exc)
    if n == 0:
        backend.shutdown()
        return None, "no NVIDIA GPU found"
    return backend, None


# ---------------------------------------------------------------------- probe ----
def _why(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text[:120]


class GpuProbe:
    """Samples every device of a backend; each value that fails is None, never an exception."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.devices: list[Device] = []
        self.uuid_index: dict[str, int] = {}  # "GPU-…" or "MIG-…" -> NVML index of the GPU
        self.status: str | None = None  # one line when some devices could not be opened

    def open(self) -> None:
        """Get the handles, names and UUIDs once."""
        b = self.backend
        skipped = []
        for i in range(b.count()):
            try:
                h = b.handle(i)
            except Exception as exc:  # noqa: BLE001 - a lost GPU: list the others
                skipped.append(f"GPU {i}: {reason_for(exc)}")
                continue
            name = uuid = None
            try:
                name = b.name(h)
            except Exception:  # noqa: BLE001
                pass
            try:
                uuid = b.uuid(h)
            except Exception:  # noqa: BLE001 - then ranks are mapped to it by pid only
                pass
            self.devices.append(Device(i, h, name, uuid))
            for u in ([uuid] if uuid else []) + _safe_mig(b, h):
                self.uuid_index[u] = i
        if skipped:
            self.status = "; ".join(skipped)
        if not self.devices:
            raise GpuUnavailable(self.status or "no NVIDIA GPU found")

    def sample(self, with_processes: bool) -> list[GpuSample]:
        """Every device now; with_processes also asks for the process list and the
        per-process SM utilization since the last time (milliseconds on real drivers)."""
        return [self._sample(d, with_processes) for d in self.devices]

    def _sample(self, d: Device, with_processes: bool) -> GpuSample:
        b, h = self.backend, d.handle
        s = GpuSample(index=d.index, name=d.name, uuid=d.uuid, ts=time.time())
        try:
            s.mem_used, s.mem_total = b.memory(h)
        except Exception as exc:  # noqa: BLE001 - N/A for this value only
            s.errors["memory"] = _why(exc)
        try:
            s.util_gpu, s.util_mem = b.utilization(h)
        except Exception as exc:  # noqa: BLE001
            s.errors["utilization"] = _why(exc)
        try:
            s.temperature = b.temperature(h)
        except Exception as exc:  # noqa: BLE001
            s.errors["temperature"] = _why(exc)
        try:
            s.power_w = round(b.power_w(h), 1)
        except Exception as exc:  # noqa: BLE001
            s.errors["power"] = _why(exc)
        if not with_processes:
            return s
        try:
            s.processes = b.processes(h)
        except Exception as exc:  # noqa: BLE001
            s.errors["processes"] = _why(exc)
        if not d.proc_util_ok:
            s.errors["proc_util"] = "not supported on this GPU or driver"
            return s
        try:
            s.proc_util, d.util_seen_us = b.process_utilization(h, d.util_seen_us)
        except NotSupported as exc:
            d.proc_util_ok = False
            s.errors["proc_util"] = f"not supported on this GPU or driver ({_why(exc)})"
        except Exception as exc:  # noqa: BLE001 - asked again next time
            s.errors["proc_util"] = _why(exc)
        return s

    def close(self) -> None:
        self.backend.shutdown()


def _safe_mig(b: Backend, h: object) -> list[str]:
    try:
        return b.mig_uuids(h)
    except Exception:  # noqa: BLE001 - MIG is optional
        return []
