"""Each tick's GPU views (contract.status.GpuView) from the probe's samples: every GPU, and
under a GPU in MIG mode every slice as a view of its own; their processes labelled (the last
process list stands between queries), their recent history, and the marks of processes that
came and went. What the watcher decides about them (ranks, alerts) is filled in after.
Kept per device key (contract.gpu_view.DevKey: a GPU, or a slice of one). Poller thread only.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import cast

from mpwatch.contract import (
    COUNTERS,
    HISTORY_POINTS,
    DevKey,
    GpuHistory,
    GpuMark,
    GpuView,
    MigSlice,
    ThrottleReason,
)
from mpwatch.probes.gpu import GpuSample, ProcList
from mpwatch.supervisor.gpu.labels import ProcessLabeler, proc_marks
from mpwatch.text.gpu_names import device_name


def sample_key(s: GpuSample) -> DevKey:
    return (s.index, None, None) if s.mig is None else (s.index, s.mig.gi, s.mig.ci)


def flat(samples: Iterable[GpuSample]) -> list[GpuSample]:
    """Every sample: each GPU's, then its slices'."""
    return [x for s in samples for x in (s, *s.slices)]


class Views:
    def __init__(self) -> None:
        self.labels = ProcessLabeler()
        self._raw_procs: dict[DevKey, ProcList] = {}  # the last process list of each device
        self._proc_util: dict[DevKey, dict[int, int] | None] = {}  # pid -> SM % (None: N/A)
        self._procs_ts: dict[DevKey, float] = {}  # wall time of that query
        self._procs_error: dict[DevKey, dict[str, str]] = {}  # why its last query failed
        self._seen: dict[DevKey, dict[int, float]] = {}  # pid -> wall time first listed
        self._spark: dict[DevKey, tuple[deque[int | None], deque[int | None]]] = {}  # (mem, util)

    def take_processes(self, samples: list[GpuSample], by_pid: Mapping[int, int],
                       children: Mapping[int, int], marks: list[GpuMark]) -> None:
        """A new process query: keep its lists, label new pids, mark who came and went."""
        fresh: dict[DevKey, tuple[GpuSample, dict[int, float], dict[int, float]]] = {}
        for s in flat(samples):
            key = sample_key(s)
            self._procs_error[key] = {k: s.errors[k] for k in ("processes", "proc_util", "process_memory")
                                      if k in s.errors}
            self._proc_util[key] = s.proc_util
            if s.processes is None:  # a failed query: the last list stands, and the error is said
                continue
            self._raw_procs[key] = s.processes
            self._procs_ts[key] = s.ts
            old = self._seen.get(key, {})
            new = {pid: old.get(pid, s.ts) for pid, _ in s.processes}
            self._seen[key] = new
            fresh[key] = (s, old, new)
        listed = {pid for lst in self._raw_procs.values() for pid, _ in lst}
        self.labels.refresh({pid for _, _, new in fresh.values() for pid in new}, by_pid.keys(), keep=listed)
        for key, (s, old, new) in fresh.items():
            where = device_name(s.index, _mig(s))
            marks.extend(proc_marks(key, where, old, new,
                                    lambda pid: self.labels.label(pid, None, by_pid, children)))

    def procs_known(self, key: DevKey) -> bool:
        """Its process list was read, and the last query did not fail."""
        return key in self._raw_procs and "processes" not in self._procs_error.get(key, {})

    def view(self, s: GpuSample, by_pid: Mapping[int, int], children: Mapping[int, int]) -> GpuView:
        """The sample as the status shows it (ranks, alerts, breakdown and history: the watcher's)."""
        key = sample_key(s)
        errors = dict(s.errors)
        errors.update(self._procs_error.get(key, {}))
        util = self._proc_util.get(key)
        seen = self._seen.get(key, {})
        procs = []
        for pid, mem in self._raw_procs.get(key, ()):
            p = self.labels.label(pid, mem, by_pid, children)
            p["sm_util"] = util.get(pid, 0) if util is not None else None
            if pid in seen:
                p["since"] = seen[pid]
            procs.append(p)
        mig = _mig(s)
        v = cast(GpuView, {
            "index": s.index, "name": s.name, "uuid": s.uuid, "mem_used": s.mem_used,
            "mem_total": s.mem_total, **counters(s, whole=mig is None),
            "processes": procs, "errors": errors, "ts": s.ts, "processes_ts": self._procs_ts.get(key),
            "alerts": [], "ranks": [], "history": {"mem_used": [], "util_gpu": []},  # filled by the watcher
            "breakdown": {"allocated": None, "cached": None, "other": None, "outside": None},
            "mem_reserved": s.mem_reserved})
        if mig is not None:
            v["mig"] = mig
        else:  # the clock event reasons are the whole GPU's
            v["throttle_reasons"] = cast("list[ThrottleReason] | None", s.throttle_reasons)
        if s.slices:
            v["slices"] = [self.view(x, by_pid, children) for x in s.slices]
        return v

    def history(self, v: GpuView, key: DevKey) -> GpuHistory:
        mem, util = self._spark.setdefault(key, (deque(maxlen=HISTORY_POINTS), deque(maxlen=HISTORY_POINTS)))
        mem.append(v["mem_used"])
        util.append(v["util_gpu"])
        return {"mem_used": list(mem), "util_gpu": list(util)}


def counters(s: GpuSample, whole: bool) -> dict[str, object]:
    """The sample's counters as a view has them: a whole GPU's every one, a MIG slice's those
    every view has (None: a slice has no counters of its own)."""
    return {c.key: getattr(s, c.key) for c in COUNTERS if whole or c.required}


def _mig(s: GpuSample) -> MigSlice | None:
    return None if s.mig is None else {"gi": s.mig.gi, "ci": s.mig.ci, "profile": s.mig.profile}
