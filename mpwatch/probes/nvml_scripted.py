"""A scripted NVML: GPUs, their counters and their processes as a scenario file says, chosen by
MPWATCH_SCRIPTED_NVML=<scenario.json> where there is no GPU (tests, CI, the benches). Runs on the
supervisor's GPU poller thread, in place of probes.nvml.NvmlBackend.

Scenario:
    {"gpus": [{"name": "Fake 80G", "mem_total": 85899345920,
               "uuid": "GPU-…",                 # optional: else GPU-fake-<index>
               "mig": ["MIG-…"]}, ...],          # optional: UUIDs of its MIG instances
     "init_error": "text",                      # optional: fail to start with this line
     "frames": [                                # the last frame whose "at" (seconds since
       {"at": 0, "gpus": [                      # init) has passed is the current one
         {"util_gpu": 80, "util_mem": 30, "temperature": 60, "power_w": 250,
          "mem_used": 1000,                     # optional: else sum of processes + extra_used
          "extra_used": 0,
          "processes": [{"pid": "rank:0", "mem": 1000, "sm": 45},   # sm: its SM % (a
                        {"pid": 4194000, "mem": 5}],                 # process sample); none: 0
          "proc_util": false,                   # optional: the device has no process samples
                                                # (MIG, old drivers): SM % is N/A
          "fail": ["temperature", "processes", "proc_util"]}]}]}
                                                # ("power:NOT_SUPPORTED": the NVML error the C
                                                # stand-in, testing.libnvml, answers with)
A pid may be a number or a name resolved at each call: "rank:N" (the worker of rank N
of this supervisor, found by its MPWATCH_RANK), "rank:N/child" (that worker's first
child), "parent" (the supervisor's parent), "self" (the supervisor).
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable

from mpwatch.contract import protocol
from mpwatch.probes.gpu_backend import GpuUnavailable, NotSupported, ProcList

Obj = dict[str, object]


def _obj(v: object) -> Obj:
    return v if isinstance(v, dict) else {}  # JSON objects: their keys are strings


def _list(v: object) -> list[object]:
    return list(v) if isinstance(v, list) else []


def _int(v: object, default: int = 0) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


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

    def _frame(self, h: object) -> Obj:
        self.calls += 1
        elapsed = self.clock() - (self.t0 or 0.0)
        cur: Obj = {}
        for fr in _list(self.scenario.get("frames")):
            fo = _obj(fr)
            at = fo.get("at", 0)
            if isinstance(at, (int, float)) and at <= elapsed:
                cur = fo
        gpus = _list(cur.get("gpus"))
        i = _int(h)
        return _obj(gpus[i]) if i < len(gpus) else {}

    def _value(self, h: object, key: str) -> Obj:
        g = self._frame(h)
        # "what:CODE": the C stand-in's code
        if key in [str(f).partition(":")[0] for f in _list(g.get("fail"))]:
            raise RuntimeError(f"scripted failure of {key}")
        return g

    def name(self, h: object) -> str:
        return str(self.gpus[_int(h)].get("name", f"Fake GPU {h}"))

    def uuid(self, h: object) -> str:
        return str(self.gpus[_int(h)].get("uuid", f"GPU-fake-{h}"))

    def mig_uuids(self, h: object) -> list[str]:
        return [str(u) for u in _list(self.gpus[_int(h)].get("mig"))]

    def memory(self, h: object) -> tuple[int, int]:
        g = self._value(h, "memory")
        total = _int(self.gpus[_int(h)].get("mem_total"), 16 << 30)
        used = g.get("mem_used")
        if used is None:
            return (sum(_int(_obj(p).get("mem")) for p in _list(g.get("processes")))
                    + _int(g.get("extra_used")), total)
        return _int(used), total

    def utilization(self, h: object) -> tuple[int, int]:
        g = self._value(h, "utilization")
        return _int(g.get("util_gpu")), _int(g.get("util_mem"))

    def temperature(self, h: object) -> int:
        return _int(self._value(h, "temperature").get("temperature"), 40)

    def power_w(self, h: object) -> float:
        v = self._value(h, "power").get("power_w", 50.0)
        return float(v) if isinstance(v, (int, float)) else 50.0

    def processes(self, h: object) -> ProcList:
        out: ProcList = []
        for p in _list(self._value(h, "processes").get("processes")):
            po = _obj(p)
            pid = scenario_pid(po.get("pid"))
            if pid is not None:
                mem = po.get("mem")
                out.append((pid, None if mem is None else _int(mem)))
        return out

    def process_utilization(self, h: object, since_us: int) -> tuple[dict[int, int], int]:
        g = self._value(h, "proc_util")
        if g.get("proc_util") is False:
            raise NotSupported("scripted: no process samples on this device")
        out = {}
        for p in _list(g.get("processes")):
            po = _obj(p)
            pid = scenario_pid(po.get("pid"))
            if pid is not None and po.get("sm") is not None:
                out[pid] = _int(po.get("sm"))
        return out, int(time.time() * 1e6)


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
