"""A scripted NVML: GPUs, their counters, MIG slices, clocks and processes as a scenario file
says, chosen by MPWATCH_SCRIPTED_NVML=<scenario.json> where there is no GPU (tests, CI, the
benches, the recorders). Runs on the supervisor's GPU poller thread, in place of
probes.nvml.NvmlBackend, and answers the same backend interface (probes.gpu_backend.Backend)
as a current driver does: the same scenario played by the C stand-in libnvidia-ml.so.1 under
the real backend (mpwatch.testing.libnvml) gives the probe the same GPUs.

Scenario:
    {"gpus": [{"name": "Fake 80G", "mem_total": 85899345920,
               "uuid": "GPU-…",                 # optional: else GPU-fake-<index>
               "mig": [{"uuid": "MIG-…", "gi": 1, "ci": 0, "profile": "3g.40gb",
                        "mem_total": 42949672960}]}, ...],
                                                # optional: its MIG devices (a UUID alone, or
                                                # defaults: MIG-fake-<k>, gi k+1, ci 0, 1g.10gb,
                                                # an eighth of the GPU); in MIG mode with one
     "init_error": "text",                      # optional: fail to start with this line
     "frames": [                                # the last frame whose "at" (seconds since
       {"at": 0, "gpus": [                      # init) has passed is the current one
         {"util_gpu": 80, "util_mem": 30, "temperature": 60, "power_w": 250,
                                                # every counter of contract.gpu_counters by its
                                                # key (in its unit; SCENARIO_KEYS, DEFAULTS)
          "mem_used": 1000,                     # optional: else sum of processes + extra_used
          "extra_used": 0,
          "reserved": 0,                        # the driver's own share (MemoryInfo_v2)
          "sm_clock": 1100, "sm_clock_max": 1410,   # MHz (default 1410 both)
          "throttle": ["sw_power_cap"],         # clock event reasons (ThrottleReason names)
          "processes": [{"pid": "rank:0", "mem": 1000, "sm": 45},   # sm: its SM % (a
                        {"pid": 4194000, "mem": 5}],                 # process sample); none: 0
          "proc_util": false,                   # optional: the device has no process samples
          "slices": [{"processes": [...], "extra_used": 0, "reserved": 0, "fail": [...]}],
                                                # a GPU in MIG mode: each MIG device's, in order
          "fail": ["temperature", "processes:NO_PERMISSION"]}]}]}
                                                # "what" fails that call alone; "what:CODE" with
                                                # NVML_ERROR_<CODE> ("clocks", "throttle",
                                                # "memory_v2" too)
A pid may be a number or a name resolved at each call: "rank:N" (the worker of rank N
of this supervisor, found by its MPWATCH_RANK), "rank:N/child" (that worker's first
child), "parent" (the supervisor's parent), "self" (the supervisor).

As a driver: a GPU in MIG mode reports no utilization nor process samples, its memory and
process list are root's (NO_PERMISSION to another user, who reads each slice's), and a
slice shows another user's process memory as not available; a MIG device has no counters
or clocks of its own; MemoryInfo (v1) counts the reserve in `used`.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from mpwatch.contract import BY_KEY, GpuCounter, protocol
from mpwatch.probes.gpu_backend import GpuUnavailable, InstanceProc, NotSupported, ProcList, SlotInfo
from mpwatch.probes.gpu_reads import reason_mask

Obj = dict[str, object]
NOT_SUPPORTED, NO_PERMISSION, UNKNOWN = 3, 4, 999  # NVML's codes (nvml.h)
CLOCK_MHZ = 1410  # an A100's SM clock at most: the default clock and maximum


def _obj(v: object) -> Obj:
    return v if isinstance(v, dict) else {}  # JSON objects: their keys are strings


def _list(v: object) -> list[object]:
    return list(v) if isinstance(v, list) else []


def _int(v: object, default: int = 0) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


class ScriptedNvmlError(Exception):
    """An NVML error the scenario scripts; `value` is its code, as pynvml.NVMLError's is."""

    def __init__(self, code: int, what: str):
        super().__init__(f"scripted NVML error {code} of {what}")
        self.value = code


def nvml_code(name: str) -> int:
    """An NVML error's code from its name ("NO_PERMISSION"); UNKNOWN for one it lacks."""
    import pynvml  # nvidia-ml-py, a dependency: NVML's codes by their names; needs no driver

    code = getattr(pynvml, "NVML_ERROR_" + name.strip().upper().removeprefix("NVML_ERROR_"), None)
    return code if isinstance(code, int) else UNKNOWN


@dataclass(frozen=True)
class Slot:
    """A MIG device's handle: MIG device k of GPU `gpu`."""

    gpu: int
    k: int


@dataclass(frozen=True)
class Mig:
    """A scripted MIG device, with the stand-in's defaults."""

    uuid: str
    gi: int
    ci: int
    profile: str
    mem_total: int


def _migs(g: Obj) -> list[Mig]:
    total = _int(g.get("mem_total"), 16 << 30)
    out = []
    for k, m in enumerate(_list(g.get("mig"))):
        mo = _obj(m) if isinstance(m, dict) else {"uuid": m}
        out.append(Mig(str(mo.get("uuid", f"MIG-fake-{k}")), _int(mo.get("gi"), k + 1), _int(mo.get("ci")),
                       str(mo.get("profile", "1g.10gb")), _int(mo.get("mem_total"), total // 8)))
    return out


# A counter's name in a frame where it is not its key, and its value where a frame gives none
# (else 0): a default names another counter whose value it takes (the SM clock: its maximum).
SCENARIO_KEYS = {"sm_clock_mhz": "sm_clock", "sm_clock_max_mhz": "sm_clock_max"}
DEFAULTS: dict[str, float | str] = {"temperature": 40, "power_w": 50.0, "sm_clock_max_mhz": CLOCK_MHZ,
                                    "sm_clock_mhz": "sm_clock_max_mhz"}


def counter_value(g: Obj, c: GpuCounter) -> float:
    """A counter's value in a frame's GPU, in the counter's unit (the C stand-in's script
    writes it so too)."""
    v = g.get(SCENARIO_KEYS.get(c.key, c.key))
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    default = DEFAULTS.get(c.key, 0)
    return counter_value(g, BY_KEY[default]) if isinstance(default, str) else float(default)


def _used(g: Obj) -> int:
    used = g.get("mem_used")
    if used is not None:
        return max(_int(used), 0)
    held = sum(_int(_obj(p).get("mem")) for p in _list(g.get("processes")))
    return max(held + _int(g.get("extra_used")), 0)


def _check(g: Obj, what: str) -> None:
    """Raise the scripted failure of `what` on this device, if any."""
    for f in _list(g.get("fail")):
        name, _, code = str(f).partition(":")
        if name == what:
            if not code:
                raise RuntimeError(f"scripted failure of {what}")
            raise ScriptedNvmlError(nvml_code(code), what)


def _root() -> bool:
    return os.geteuid() == 0


def _shown(pid: int, mem: int | None) -> int | None:
    """A MIG device's process memory as a caller may see it: another user's is not available
    to one who is not root."""
    if mem is None or _root():
        return mem
    try:
        return mem if os.stat(f"/proc/{pid}").st_uid == os.geteuid() else None
    except OSError:
        return None


class ScriptedNvml:
    """A backend answering from a scenario: see the module docstring for its format."""

    kind = "scripted"

    def __init__(self, path: str, clock: Callable[[], float] = time.monotonic):
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            if not isinstance(data, dict) or not isinstance(data.get("gpus", []), list):
                raise ValueError("the top level must be an object with a 'gpus' list")
        except (OSError, ValueError) as exc:
            raise GpuUnavailable(f"scripted NVML scenario {path} unreadable: {exc}") from None
        self.scenario: Obj = _obj(data)
        self.gpus = [_obj(g) for g in _list(self.scenario.get("gpus"))]
        self.migs = [_migs(g) for g in self.gpus]
        self.clock = clock
        self.t0: float | None = None
        self.calls = 0

    def init(self) -> None:
        err = self.scenario.get("init_error")
        if err:
            raise GpuUnavailable(str(err))
        self.t0 = self.clock()

    def shutdown(self) -> None:
        pass

    def count(self) -> int:
        return len(self.gpus)

    def handle(self, index: int) -> object:
        return index

    # ------------------------------------------------------------ the scenario ----
    def _frame(self, h: object) -> Obj:
        """The current frame's values of a GPU, or of a MIG device (its GPU's `slices`)."""
        self.calls += 1
        elapsed = self.clock() - (self.t0 or 0.0)
        cur: Obj = {}
        for fr in _list(self.scenario.get("frames")):
            fo = _obj(fr)
            at = fo.get("at", 0)
            if isinstance(at, (int, float)) and at <= elapsed:
                cur = fo
        gpus = _list(cur.get("gpus"))
        i = h.gpu if isinstance(h, Slot) else _int(h)
        g = _obj(gpus[i]) if i < len(gpus) else {}
        if isinstance(h, Slot):
            slices = _list(g.get("slices"))
            return _obj(slices[h.k]) if h.k < len(slices) else {}
        return g

    def _value(self, h: object, key: str) -> Obj:
        g = self._frame(h)
        _check(g, key)
        return g

    def _counter(self, h: object, key: str) -> Obj:
        """A counter of a whole GPU: a MIG device has none."""
        if isinstance(h, Slot):
            raise ScriptedNvmlError(NOT_SUPPORTED, key)
        return self._value(h, key)

    def _in_mig_mode(self, h: object) -> bool:
        return not isinstance(h, Slot) and bool(self.migs[_int(h)])

    # ------------------------------------------------------------- the devices ----
    def name(self, h: object) -> str:
        if isinstance(h, Slot):
            return f"{self.name(h.gpu)} MIG {self.migs[h.gpu][h.k].profile}"
        return str(self.gpus[_int(h)].get("name", f"Fake GPU {h}"))

    def uuid(self, h: object) -> str:
        if isinstance(h, Slot):
            return self.migs[h.gpu][h.k].uuid
        return str(self.gpus[_int(h)].get("uuid", f"GPU-fake-{h}"))

    def mig_uuids(self, h: object) -> list[str]:
        return [m.uuid for m in self.migs[_int(h)]]

    def mig_slots(self, h: object) -> list[SlotInfo]:
        i = _int(h)
        return [(Slot(i, k), m.uuid, self.name(Slot(i, k)), m.gi, m.ci) for k, m in enumerate(self.migs[i])]

    # ----------------------------------------------------------------- memory ----
    def memory_v2(self, h: object) -> tuple[int, int, int]:
        return self._memory(h, v2=True)

    def memory(self, h: object) -> tuple[int, int]:
        """v1: the driver's reserve counted as used, as drivers do."""
        used, total, reserved = self._memory(h, v2=False)
        return used + reserved, total

    def _memory(self, h: object, v2: bool) -> tuple[int, int, int]:
        """(used, total, reserved) of a GPU or a MIG device; a GPU in MIG mode adds its slices
        up, for root only."""
        g = self._value(h, "memory")
        if v2:
            _check(g, "memory_v2")
        if self._in_mig_mode(h) and not _root():
            raise ScriptedNvmlError(NO_PERMISSION, "memory")
        used, reserved = _used(g), max(_int(g.get("reserved")), 0)
        if isinstance(h, Slot):
            return used, self.migs[h.gpu][h.k].mem_total, reserved
        for sl in (_obj(x) for x in _list(g.get("slices"))):
            used, reserved = used + _used(sl), reserved + max(_int(sl.get("reserved")), 0)
        return used, _int(self.gpus[_int(h)].get("mem_total"), 16 << 30), reserved

    # --------------------------------------------------------------- counters ----
    def counter(self, h: object, c: GpuCounter) -> float:
        g = self._counter(h, c.what)
        if not c.on_mig and self._in_mig_mode(h):  # not reported in MIG mode
            raise ScriptedNvmlError(NOT_SUPPORTED, c.what)
        return counter_value(g, c)

    def clock_reasons(self, h: object) -> int:
        return reason_mask([str(r) for r in _list(self._counter(h, "throttle").get("throttle"))])

    # -------------------------------------------------------------- processes ----
    def processes(self, h: object) -> ProcList:
        return [(pid, mem) for pid, mem, _, _ in self.instance_processes(h)]

    def instance_processes(self, h: object) -> list[InstanceProc]:
        """A MIG device's processes with its instance ids; a GPU's own (no instance), then, in
        MIG mode and for root only, every slice's with theirs."""
        g = self._value(h, "processes")
        if isinstance(h, Slot):
            m = self.migs[h.gpu][h.k]
            return [(pid, _shown(pid, mem), m.gi, m.ci) for pid, mem in _procs(g)]
        if self._in_mig_mode(h) and not _root():
            raise ScriptedNvmlError(NO_PERMISSION, "processes")
        out: list[InstanceProc] = [(pid, mem, None, None) for pid, mem in _procs(g)]
        for sl, m in zip((_obj(x) for x in _list(g.get("slices"))), self.migs[_int(h)], strict=False):
            out += [(pid, mem, m.gi, m.ci) for pid, mem in _procs(sl)]
        return out

    def process_utilization(self, h: object, since_us: int) -> tuple[dict[int, int], int]:
        if isinstance(h, Slot) or self._in_mig_mode(h):
            raise NotSupported("scripted: no process samples in MIG mode")
        g = self._frame(h)
        if g.get("proc_util") is False:
            raise NotSupported("scripted: no process samples on this device")
        try:
            _check(g, "proc_util")
        except ScriptedNvmlError as exc:
            if exc.value == NOT_SUPPORTED:
                raise NotSupported(str(exc)) from None
            raise
        out = {}
        for p in _list(g.get("processes")):
            po = _obj(p)
            pid = scenario_pid(po.get("pid"))
            if pid is not None and po.get("sm") is not None:
                out[pid] = _int(po.get("sm"))
        return out, int(time.time() * 1e6)


def _procs(g: Obj) -> list[tuple[int, int | None]]:
    """The processes of a device whose pids resolve now: (pid, bytes or None)."""
    out = []
    for p in _list(g.get("processes")):
        po = _obj(p)
        pid = scenario_pid(po.get("pid"))
        if pid is not None:
            mem = po.get("mem")
            out.append((pid, None if mem is None else max(_int(mem), 0)))
    return out


def scenario_pid(spec: object) -> int | None:
    """A scenario pid: a number, or a name resolved against this process's children."""
    if isinstance(spec, int) and not isinstance(spec, bool):
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
    for k in list(kids):  # a worker forked by the run's forkserver (supervisor.preload) is its child
        try:
            if protocol.ENV_RANK not in k.environ():
                kids += k.children()
        except psutil.Error:
            continue
    for k in kids:
        try:
            if k.environ().get(protocol.ENV_RANK) != want:
                continue
            if sub == "child":
                grand = k.children()
                return grand[0].pid if grand else None
            return k.pid
        except psutil.Error:
            continue
    return None


def serve(scenario: str) -> ScriptedNvml:
    """The GPU seam's double (probes.seam): NVML as `scenario` plays it."""
    return ScriptedNvml(scenario)
