"""GPU sampling behind a small backend interface: real NVML, a double through the GPU seam, or absent.
Runs on the supervisor's GPU poller thread (supervisor.gpu.watch).

A backend answers a handful of per-device questions (name, UUID, memory, the counters of
contract.gpu_counters, compute processes, per-process SM utilization); `GpuProbe` asks them
and turns every failed call into None ("N/A") for that one value, with why in plain words
(probes.nvml_words), so one unsupported counter or a lost GPU never stops the poller.
Handles, names, UUIDs and the MIG slices of a GPU in MIG mode are got once, at `open()`.
The samples are probes.gpu_sample's; the counters, memory with the driver's reserve apart and
the clock event reasons are read by probes.gpu_reads, MIG slices by probes.gpu_mig, over NVML calls of
probes.nvml_calls.

Backends (probes.gpu_backend.Backend says what they answer):
- probes.nvml's `NvmlBackend`: the official bindings (package nvidia-ml-py, `import pynvml`).
- a double answering from a scenario file, where there is no GPU: the GPU seam's (probes.seam),
  opened when a scenario is given.
- no backend: `open_backend()` returns a one-line reason instead ("NVML library not
  found ...", "no NVIDIA GPU found", "driver/bindings mismatch: ...").
"""
from __future__ import annotations

import socket
import time
from typing import Any

from mpwatch.contract import DevKey
from mpwatch.probes import gpu_mig, gpu_reads, nvml_words, seam

# The backends' interface, re-exported: the probe's users import it from here.
from mpwatch.probes.gpu_backend import Backend as Backend
from mpwatch.probes.gpu_backend import GpuUnavailable as GpuUnavailable
from mpwatch.probes.gpu_backend import NotSupported as NotSupported
from mpwatch.probes.gpu_backend import ProcList as ProcList
from mpwatch.probes.gpu_sample import Device as Device
from mpwatch.probes.gpu_sample import GpuSample as GpuSample


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
            from mpwatch.probes.nvml import no_library

            # the host named: the line is read elsewhere too (attach over ssh, a replay of its files)
            return no_library(socket.gethostname())
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


def open_backend(scenario: str | None = None) -> tuple[Backend | None, str | None]:
    """(backend, None) ready to sample, or (None, one-line reason); scenario: the GPU seam's
    (probes.seam), else the real NVML."""
    backend: Backend
    try:
        if scenario:
            backend = seam.backend(scenario)
        else:
            from mpwatch.probes.nvml import NvmlBackend, library_loads, no_library

            if not library_loads():
                return None, no_library(socket.gethostname())
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
    return nvml_words.words(exc)


class GpuProbe:
    """Samples every device of a backend; each value that fails is None, never an exception."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.devices: list[Device] = []
        self.uuid_index: dict[str, int] = {}  # "GPU-…" or "MIG-…" -> NVML index of the GPU
        self.uuid_keys: dict[str, DevKey] = {}  # the same UUIDs -> the GPU, or the MIG slice they name
        self.status: str | None = None  # one line when some devices could not be opened

    def open(self) -> None:
        """Get the handles, names and UUIDs once, and the slices of a GPU in MIG mode."""
        b = self.backend
        skipped = []
        for i in range(b.count()):
            try:
                h = b.handle(i)
            except Exception as exc:  # noqa: BLE001 - a lost GPU: list the others
                skipped.append(f"GPU {i}: {reason_for(exc)}")
                continue
            d = Device(i, h, _maybe(b.name, h), _maybe(b.uuid, h))  # no UUID: ranks mapped by pid
            d.slots = gpu_mig.discover(b, h)
            self.devices.append(d)
            for u in ([d.uuid] if d.uuid else []) + _safe_mig(b, h):
                self.uuid_index[u] = i
                self.uuid_keys[u] = (i, None, None)
            for u, key in gpu_mig.uuid_keys(d).items():
                self.uuid_index[u], self.uuid_keys[u] = i, key
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
        gpu_reads.read_memory(b, d, h, s, mig=bool(d.slots))
        gpu_reads.read_counters(b, d, s)  # MIG reports no utilization: never asked, never 0
        gpu_reads.read_reasons(b, d, s)
        if d.slots:
            gpu_mig.sample_slices(b, d, s, with_processes)
        elif with_processes:
            self._processes(d, s)
        return s

    def _processes(self, d: Device, s: GpuSample) -> None:
        b, h = self.backend, d.handle
        try:
            s.processes = b.processes(h)
        except Exception as exc:  # noqa: BLE001
            s.errors["processes"] = _why(exc)
        if not d.proc_util_ok:
            s.errors["proc_util"] = "not supported on this GPU or driver"
            return
        try:
            s.proc_util, d.util_seen_us = b.process_utilization(h, d.util_seen_us)
        except NotSupported:
            d.proc_util_ok = False
            s.errors["proc_util"] = "not supported on this GPU or driver"
        except Exception as exc:  # noqa: BLE001 - asked again next time
            s.errors["proc_util"] = _why(exc)

    def close(self) -> None:
        self.backend.shutdown()


def _maybe(fn: Any, h: object) -> str | None:
    try:
        return str(fn(h))
    except Exception:  # noqa: BLE001 - N/A: the device is listed without it
        return None


def _safe_mig(b: Backend, h: object) -> list[str]:
    try:
        return b.mig_uuids(h)
    except Exception:  # noqa: BLE001 - MIG is optional
        return []
