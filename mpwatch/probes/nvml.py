"""The real GPU backend: NVML through its official bindings (package nvidia-ml-py, `import
pynvml`), whichever libnvidia-ml.so.1 pynvml loads. Runs on the supervisor's GPU poller thread
(probes.gpu.GpuProbe asks it).
The counters are read as their records say (contract.gpu_counters); the calls beyond them
(memory with the driver's reserve apart, MIG slices, process instance ids, clock event
reasons) are probes.nvml_calls.NvmlCalls', mixed in.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mpwatch.contract import GpuCounter
from mpwatch.probes.gpu_backend import NotSupported, ProcList
from mpwatch.probes.nvml_calls import NvmlCalls, as_text, maybe_text

LIBRARY = "libnvidia-ml.so.1"  # what pynvml loads on Linux, by this name, at nvmlInit


def library_loads() -> bool:
    """The NVML library loads, as pynvml would load it. Asked before pynvml is imported: on a
    machine without the driver (every CPU-only node, CI) the bindings are never imported, 25 ms
    of CPU at each supervisor's start that end in "library not found" anyway."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):  # pynvml looks elsewhere there: let it say
        return True
    if getattr(sys.modules.get("pynvml"), "nvmlLib", None) is not None:  # loaded already: pynvml keeps it
        return True
    try:
        ctypes.CDLL(LIBRARY)
    except OSError:
        return False
    return True


def no_library(host: str) -> str:
    """The one line for a machine where the library does not load."""
    return f"NVML library not found ({LIBRARY}): no NVIDIA driver on {host}"


class NvmlBackend(NvmlCalls):
    """The real thing, over nvidia-ml-py. `nv` is the pynvml module."""

    kind = "nvml"

    def __init__(self) -> None:
        import pynvml  # nvidia-ml-py; imported here: the GPU seam's backend needs no driver

        super().__init__()
        self.nv: Any = pynvml
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
        return as_text(self.nv.nvmlDeviceGetName(h))

    def uuid(self, h: object) -> str:
        return as_text(self.nv.nvmlDeviceGetUUID(h))  # "GPU-…": the spelling CUDA_VISIBLE_DEVICES takes

    def mig_uuids(self, h: object) -> list[str]:
        """UUIDs ("MIG-…") of the MIG instances of a GPU in MIG mode: a worker on one of
        them names it, and it maps to this GPU's index."""
        uuids = (maybe_text(self.nv.nvmlDeviceGetUUID, m) for m in self.mig_devices(h))
        return [u for u in uuids if u is not None]

    def memory(self, h: object) -> tuple[int, int]:
        m = self.nv.nvmlDeviceGetMemoryInfo(h)
        return int(m.used), int(m.total)

    def counter(self, h: object, c: GpuCounter) -> float:
        """As the counter's record says: pynvml's function, its constants, the struct's field."""
        call = c.nvml
        got = getattr(self.nv, call.fn)(h, *(getattr(self.nv, a) for a in call.args))
        return float(getattr(got, call.field) if call.field else got) / call.per

    def processes(self, h: object) -> ProcList:
        # usedGpuMemory is None where the driver cannot tell (WDDM, some vGPUs, MIG for a user).
        return [(int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory))
                for p in self.proc_infos(h)]

    def proc_infos(self, h: object) -> list[Any]:
        """The compute processes as NVML's structs. The unversioned call needs the newest
        struct; an older driver only has _v2."""
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
            return list(procs)
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
