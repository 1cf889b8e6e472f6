"""GPU sampling behind a small backend interface: real NVML, a scripted fake, or absent.

A backend answers a handful of per-device questions (name, memory, utilization,
temperature, power, compute processes); `GpuProbe` asks them and turns every failed
call into None ("N/A") for that one value, so one unsupported counter or a lost GPU
never stops the poller. Device handles are got once, at `open()`.

Backends:
- `NvmlBackend`: the official bindings (package nvidia-ml-py, `import pynvml`).
- `FakeBackend`: TEST-ONLY. Selected by the environment variable MPWATCH_FAKE_NVML=<path
  to a JSON scenario>; see FakeBackend's docstring for the format.
- no backend: `open_backend()` returns a one-line reason instead ("NVML library not
  found ...", "no NVIDIA GPU found", "driver/bindings mismatch: ...").
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

FAKE_ENV = "MPWATCH_FAKE_NVML"


class GpuUnavailable(Exception):
    """No usable GPU backend; the message is the one line shown to the user."""


@dataclass
class GpuSample:
    """One device at one instant. None means N/A (the call failed or is unsupported)."""

    index: int
    name: str | None
    mem_used: int | None = None
    mem_total: int | None = None
    util_gpu: int | None = None
    util_mem: int | None = None
    temperature: int | None = None
    power_w: float | None = None
    processes: list | None = None  # [(pid, used bytes or None)]; None when not sampled now
    errors: dict = field(default_factory=dict)  # what -> why, for the values that are N/A
    ts: float = 0.0  # wall clock


# --------------------------------------------------------------------- reasons ----
def reason_for(exc: BaseException) -> str:
    """The one line a user sees for an NVML start-up failure."""
    try:
        import pynvml
    except ImportError:  # pragma: no cover - the bindings are a dependency
        return f"NVML unavailable: {exc}"
    if isinstance(exc, GpuUnavailable):
        return str(exc)
    if isinstance(exc, pynvml.NVMLError):
        code = getattr(exc, "value", None)
        if code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
            return "NVML library not found (libnvidia-ml.so.1): no NVIDIA driver on this machine"
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
class NvmlBackend:
    """The real thing, over nvidia-ml-py."""

    kind = "nvml"

    def __init__(self):
        import pynvml  # nvidia-ml-py; imported here so the fake needs no driver

        self.nv = pynvml
        self._procs_fn = None

    def init(self):
        self.nv.nvmlInit()

    def shutdown(self):
        try:
            self.nv.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down: nothing to tell
            pass

    def count(self) -> int:
        return self.nv.nvmlDeviceGetCount()

    def handle(self, index: int):
        return self.nv.nvmlDeviceGetHandleByIndex(index)

    def name(self, h) -> str:
        name = self.nv.nvmlDeviceGetName(h)
        return name.decode(errors="replace") if isinstance(name, bytes) else str(name)

    def memory(self, h) -> tuple[int, int]:
        m = self.nv.nvmlDeviceGetMemoryInfo(h)
        return int(m.used), int(m.total)

    def utilization(self, h) -> tuple[int, int]:
        u = self.nv.nvmlDeviceGetUtilizationRates(h)
        return int(u.gpu), int(u.memory)

    def temperature(self, h) -> int:
        return int(self.nv.nvmlDeviceGetTemperature(h, self.nv.NVML_TEMPERATURE_GPU))

    def power_w(self, h) -> float:
        return self.nv.nvmlDeviceGetPowerUsage(h) / 1000.0  # milliwatts

    def processes(self, h) -> list[tuple[int, int | None]]:
        # The unversioned call needs the newest struct; an older driver only has _v2.
        fns = [self._procs_fn] if self._procs_fn else [
            self.nv.nvmlDeviceGetComputeRunningProcesses,
            getattr(self.nv, "nvmlDeviceGetComputeRunningProcesses_v2", None)]
        last = None
        for fn in fns:
            if fn is None:
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


def _missing_function(nv, exc) -> bool:
    """The driver's NVML lacks this (versioned) entry point: try an older one."""
    mismatch = getattr(nv, "NVMLLibraryMismatchError", None)
    if mismatch is not None and isinstance(exc, mismatch):
        return True
    return isinstance(exc, nv.NVMLError) and getattr(exc, "value", None) == nv.NVML_ERROR_FUNCTION_NOT_FOUND


class FakeBackend:
    """TEST-ONLY scripted NVML, chosen by MPWATCH_FAKE_NVML=<scenario.json>.

    Scenario:
        {"gpus": [{"name": "Fake 80G", "mem_total": 85899345920}, ...],
         "init_error": "text",                  # optional: fail to start with this line
         "frames": [                            # the last frame whose "at" (seconds since
           {"at": 0, "gpus": [                  # init) has passed is the current one
             {"util_gpu": 80, "util_mem": 30, "temperature": 60, "power_w": 250,
              "mem_used": 1000,                 # optional: else sum of processes + extra_used
              "extra_used": 0,
              "processes": [{"pid": "rank:0", "mem": 1000}, {"pid": 4194000, "mem": 5}],
              "fail": ["temperature", "processes"]}]}]}
    A pid may be a number or a name resolved at each call: "rank:N" (the worker of rank N
    of this supervisor, found by its MPWATCH_RANK), "rank:N/child" (that worker's first
    child), "parent" (the supervisor's parent), "self" (the supervisor).
    """

    kind = "fake"

    def __init__(self, path: str, clock=time.monotonic):
        try:
            with open(path, encoding="utf-8") as f:
                self.scenario = json.load(f)
            if not isinstance(self.scenario, dict) or not isinstance(self.scenario.get("gpus", []), list):
                raise ValueError("the top level must be an object with a 'gpus' list")
        except (OSError, ValueError) as exc:
            raise GpuUnavailable(f"fake NVML scenario {path} unreadable: {exc}") from None
        self.clock = clock
        self.t0 = None
        self.calls = 0

    def init(self):
        err = self.scenario.get("init_error")
        if err:
            raise GpuUnavailable(str(err))
        self.t0 = self.clock()

    def shutdown(self):
        pass

    def count(self) -> int:
        return len(self.scenario.get("gpus", []))

    def handle(self, index: int):
        return index

    def _frame(self, h) -> dict:
        self.calls += 1
        elapsed = self.clock() - (self.t0 or 0.0)
        cur = {}
        for fr in self.scenario.get("frames", []):
            if fr.get("at", 0) <= elapsed:
                cur = fr
        gpus = cur.get("gpus", [])
        return gpus[h] if h < len(gpus) and isinstance(gpus[h], dict) else {}

    def _value(self, h, key):
        g = self._frame(h)
        if key in g.get("fail", ()):
            raise RuntimeError(f"scripted failure of {key}")
        return g

    def name(self, h) -> str:
        return str(self.scenario["gpus"][h].get("name", f"Fake GPU {h}"))

    def memory(self, h):
        g = self._value(h, "memory")
        total = int(self.scenario["gpus"][h].get("mem_total", 16 << 30))
        used = g.get("mem_used")
        if used is None:
            used = sum(int(p.get("mem") or 0) for p in g.get("processes", [])) + int(g.get("extra_used", 0))
        return int(used), total

    def utilization(self, h):
        g = self._value(h, "utilization")
        return int(g.get("util_gpu", 0)), int(g.get("util_mem", 0))

    def temperature(self, h):
        return int(self._value(h, "temperature").get("temperature", 40))

    def power_w(self, h):
        return float(self._value(h, "power").get("power_w", 50.0))

    def processes(self, h):
        g = self._value(h, "processes")
        out = []
        for p in g.get("processes", []):
            pid = resolve_fake_pid(p.get("pid"))
            if pid is not None:
                out.append((pid, None if p.get("mem") is None else int(p["mem"])))
        return out


def resolve_fake_pid(spec) -> int | None:
    """A scenario pid: a number, or a name resolved against this process's children."""
    if isinstance(spec, int):
        return spec
    if spec == "self":
        return os.getpid()
    if spec == "parent":
        return os.getppid()
    if not isinstance(spec, str) or not spec.startswith("rank:"):
        return None
    import psutil

    want, _, sub = spec[5:].partition("/")
    try:
        kids = psutil.Process().children()
    except psutil.Error:
        return None
    for k in kids:
        try:
            if k.environ().get("MPWATCH_RANK") != want:
                continue
            if sub == "child":
                grand = k.children()
                return grand[0].pid if grand else None
            return k.pid
        except psutil.Error:
            continue
    return None


def open_backend(env=None):
    """(backend, None) ready to sample, or (None, one-line reason)."""
    env = os.environ if env is None else env
    try:
        fake = env.get(FAKE_ENV)
        if fake:
            backend = FakeBackend(fake)
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

    def __init__(self, backend):
        self.backend = backend
        self.devices: list[tuple[int, object, str | None]] = []  # (index, handle, name)
        self.status: str | None = None  # one line when some devices could not be opened

    def open(self):
        """Get the handles and names once."""
        b = self.backend
        skipped = []
        for i in range(b.count()):
            try:
                h = b.handle(i)
            except Exception as exc:  # noqa: BLE001 - a lost GPU: list the others
                skipped.append(f"GPU {i}: {reason_for(exc)}")
                continue
            try:
                name = b.name(h)
            except Exception:  # noqa: BLE001
                name = None
            self.devices.append((i, h, name))
        if skipped:
            self.status = "; ".join(skipped)
        if not self.devices:
            raise GpuUnavailable(self.status or "no NVIDIA GPU found")

    def sample(self, with_processes: bool) -> list[GpuSample]:
        out = []
        b = self.backend
        for index, h, name in self.devices:
            s = GpuSample(index=index, name=name, ts=time.time())
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
            if with_processes:
                try:
                    s.processes = b.processes(h)
                except Exception as exc:  # noqa: BLE001
                    s.errors["processes"] = _why(exc)
            out.append(s)
        return out

    def close(self):
        self.backend.shutdown()
