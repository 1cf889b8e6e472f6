"""The GPU watcher: a poller thread in the supervisor over probes.gpu.

Every `interval` seconds it samples memory, utilization, temperature and power of each
GPU; every PROCS_EVERY ticks it also asks for the compute processes and their SM
utilization (milliseconds per call on real drivers). Processes are labelled by pid
(supervisor.gpu.labels), each rank is given its own GPU by UUID or pid (supervisor.gpu.ranks),
the alert decisions run (supervisor.gpu.alerts, supervisor.gpu.rank_alerts), and the tick goes
to the timeline (supervisor.gpu.timeline: memory and gpu.jsonl). An alert that starts becomes one `gpu_alert`
event; one that goes on does not.

Entry points for the run: `GpuWatch.for_run(run)` (the one place that reads the run's
workers), `start()`/`close()`, and the readers `snapshot()`, `worker_gpu(rank)`,
`on_worker_exit(...)`, `timeline(window)`.
Locks: the run's lock is taken only to copy the workers (for_run), never while holding
this watcher's own lock; `snapshot()` is called under the run's lock and takes only ours.
"""
from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Protocol, TypedDict

from mpwatch.contract.status import (
    ALIVE_STATES,
    HISTORY_POINTS,
    CudaView,
    Event,
    GpuAlert,
    GpuHistory,
    GpuMark,
    GpuTick,
    GpuTimelineReply,
    GpuView,
    State,
    WorkerGpu,
)
from mpwatch.probes.gpu import Backend, GpuProbe, GpuSample, ProcList, open_backend, reason_for
from mpwatch.rundir.writer import RunStore
from mpwatch.settings import Settings
from mpwatch.supervisor import errors
from mpwatch.supervisor.errors import CommandError
from mpwatch.supervisor.gpu import rank_alerts, ranks
from mpwatch.supervisor.gpu.labels import ProcessLabeler, proc_marks
from mpwatch.supervisor.gpu.ranks import RankInfo
from mpwatch.supervisor.gpu.timeline import HOUR_S, GpuTimeline, cap_bytes
from mpwatch.supervisor.gpu.tracker import AlertTracker

PROCS_EVERY = 5  # the process list is refreshed every this many ticks
OOMS_KEPT = 5  # OOM alerts shown per GPU

# (the scripted NVML scenario, settings.Settings.scripted_nvml) -> (backend, None) or (None, why)
Opener = Callable[[str | None], "tuple[Backend | None, str | None]"]


class Emit(Protocol):
    def __call__(self, rank: int | None, **fields: object) -> object: ...


class _WorkerLike(Protocol):
    """What for_run reads of a worker (supervisor.core.Worker)."""

    @property
    def rank(self) -> int: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def state(self) -> str: ...
    @property
    def proc_info(self) -> Mapping[str, object]: ...  # the process sampler's; "children" is read
    @property
    def cuda(self) -> CudaView | None: ...  # checked where it entered (supervisor.ipc.ledger)


class _OptsLike(Protocol):
    @property
    def gpu_interval(self) -> float: ...


class _RunLike(Protocol):
    """What for_run reads of the run (supervisor.core.Run)."""

    @property
    def lock(self) -> AbstractContextManager[object]: ...
    @property
    def store(self) -> RunStore: ...
    @property
    def opts(self) -> _OptsLike: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def workers(self) -> Mapping[int, _WorkerLike]: ...

    def event(self, name: str, rank: int | None = None, **fields: object) -> object: ...


class GpuPart(TypedDict):
    """The watcher's part of the status."""

    gpus: list[GpuView]
    gpu_status: str | None


class GpuWatch:
    def __init__(self, interval: float, workers: Callable[[], list[RankInfo]], emit: Emit, *,
                 settings: Settings, env: Mapping[str, str] | None = None, opener: Opener | None = None,
                 timeline: RunStore | None = None, clock: Callable[[], float] = time.monotonic):
        """workers() -> the run's workers (alive or not, with a pid); emit(rank, **fields)
        records one gpu_alert event; settings: the alerts' thresholds, the timeline's cap and
        the scripted NVML; env: the workers' (CUDA_VISIBLE_DEVICES); clock: the monotonic clock
        of slopes and idle spans."""
        self.interval = max(0.05, float(interval))
        self._workers = workers
        self._emit = emit
        self.env = dict(os.environ if env is None else env)
        self.settings = settings
        self.cfg = settings.gpu
        self._opener: Opener = opener or open_backend
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.probe: GpuProbe | None = None
        self.status: str | None = None  # one line when there is no GPU data, or a partial one
        self.ticks = 0
        self.last_tick_s: float | None = None
        self.visible: set[int] | None = None  # GPUs the workers may use (CUDA_VISIBLE_DEVICES); None: all
        self.pids_hidden = False  # NVML's pids are the host's: none is a rank (a container)
        self.labels = ProcessLabeler()
        self.timeline_store = GpuTimeline(timeline, cap_bytes(self.settings.gpu_timeline_mb))
        self._views: list[GpuView] = []
        self._wgpu: dict[int, WorkerGpu] = {}
        self._raw_procs: dict[int, ProcList] = {}  # gpu -> the last process list
        self._proc_util: dict[int, dict[int, int] | None] = {}  # gpu -> pid -> SM % (None: N/A)
        self._procs_ts: dict[int, float] = {}  # gpu -> wall time of that query
        self._procs_error: dict[int, dict[str, str]] = {}  # gpu -> why its last query failed
        self._seen: dict[int, dict[int, float]] = {}  # gpu -> pid -> wall time first listed
        self._spark: dict[int, tuple[deque[int | None], deque[int | None]]] = {}  # gpu -> (mem, util)
        self.tracker = AlertTracker(self.cfg)
        self._last_gpu: dict[int, int] = {}  # rank -> its own GPU when last seen
        self._ooms: dict[int, list[GpuAlert]] = {}  # gpu -> OOM alerts of ranks that died

    @classmethod
    def for_run(cls, run: _RunLike) -> GpuWatch:
        def workers() -> list[RankInfo]:
            out = []
            with run.lock:
                for w in run.workers.values():
                    if w.pid is None:
                        continue
                    kids = w.proc_info.get("children") if w.proc_info else None
                    pids = [c["pid"] for c in kids if isinstance(c, dict) and isinstance(c.get("pid"), int)] \
                        if isinstance(kids, list) else []
                    out.append(RankInfo(w.rank, w.pid, w.state == State.RUNNING, w.state in ALIVE_STATES,
                                        pids, w.cuda))
            return out

        def emit(rank: int | None, **fields: object) -> object:
            return run.event(Event.GPU_ALERT, rank, **fields)

        return cls(run.opts.gpu_interval, workers, emit, settings=run.settings, timeline=run.store)

    # ------------------------------------------------------------ lifecycle ----
    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="mpwatch-gpu", daemon=True)
        self._thread.start()

    def open(self) -> bool:
        """Start the backend; False (and a status line) when there is none."""
        backend, why = self._opener(self.settings.scripted_nvml)
        if backend is None:
            self.status = why
            return False
        probe = GpuProbe(backend)
        try:
            probe.open()
        except Exception as exc:  # noqa: BLE001 - every device failed: one line
            errors.note("GPU watcher: opening the devices", exc)
            self.status = reason_for(exc)
            probe.close()
            return False
        self.probe = probe
        self.status = probe.status
        self.visible = ranks.visible_gpu_indices(self.env, probe.uuid_index, len(probe.devices))
        return True

    def _main(self) -> None:
        if not self.open():
            return
        assert self.probe is not None
        try:
            while not self._stop.is_set():
                t0 = time.monotonic()
                try:
                    self.tick()
                    self.status = self.probe.status
                except Exception as exc:  # noqa: BLE001 - the poller never stops the run
                    self.status = f"GPU poller error: {errors.bug('GPU watcher', exc)}"
                self._stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))
        finally:
            self.probe.close()
            self.timeline_store.close()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            # The poller thread shuts NVML down itself on its way out (never under its feet).
            if self._thread is not threading.current_thread():
                self._thread.join(timeout=2.0)
        elif self.probe is not None:
            self.probe.close()
            self.timeline_store.close()

    # ----------------------------------------------------------------- tick ----
    def tick(self) -> None:
        assert self.probe is not None
        t0 = time.perf_counter()
        now, wall = self._clock(), time.time()
        with_procs = self.ticks % PROCS_EVERY == 0
        self.ticks += 1
        samples = self.probe.sample(with_procs)
        infos = self._workers()
        by_pid = {i.pid: i.rank for i in infos}
        children = {c: i.rank for i in infos for c in i.children}
        marks: list[GpuMark] = []
        if with_procs:
            self._take_processes(samples, by_pid, children, marks)
        views = [self._view(s, by_pid, children) for s in samples]
        alive = [i for i in infos if i.alive]
        by_index = {v["index"]: v for v in views}
        holdings = ranks.held(views)
        hidden = ranks.pids_hidden(views, alive)
        uuids = {d.index: d.uuid for d in self.probe.devices}
        placement = ranks.place(alive, holdings, self.probe.uuid_index, uuids)
        mates = ranks.ranks_by_gpu(placement)
        wgpus: dict[int, WorkerGpu] = {}
        for i in alive:
            wg = ranks.worker_gpu(i, placement.get(i.rank), by_index, holdings, mates)
            if wg is not None:
                wgpus[i.rank] = wg
        for v in views:
            g = v["index"]
            own = [i for i in alive if i.rank in mates.get(g, ())]
            v["ranks"] = mates.get(g, [])
            known = g in self._raw_procs and "processes" not in self._procs_error.get(g, {}) and not hidden
            v["breakdown"] = ranks.breakdown(v, own, known)
            v["history"] = self._history(v)
        loose = self.tracker.decide(views, alive, wgpus, self.visible, with_procs, now, hidden)
        started = self.tracker.standing([a for v in views for a in v["alerts"]] + loose, now)
        with self._lock:
            for v in views:
                v["alerts"] = v["alerts"] + list(self._ooms.get(v["index"], ()))
            self._views, self._wgpu, self.pids_hidden = views, wgpus, hidden
            self._last_gpu.update({rank: p.index for rank, p in placement.items() if p.index is not None})
        for a in started:
            marks.append({"ts": wall, "gpu": a["gpu"], "kind": "alert", "rank": a["rank"],
                          "text": a["message"]})
            self._announce(a)
        marks.extend(self.tracker.counter_marks(alive, wgpus, wall))
        for m in marks:
            self.timeline_store.mark(m)
        self.timeline_store.tick(self._tick_record(views, wgpus, wall))
        self.last_tick_s = time.perf_counter() - t0

    def _take_processes(self, samples: list[GpuSample], by_pid: Mapping[int, int],
                        children: Mapping[int, int], marks: list[GpuMark]) -> None:
        """A new process query: keep its lists, label new pids, mark who came and went."""
        fresh: dict[int, tuple[dict[int, float], dict[int, float]]] = {}
        for s in samples:
            self._procs_error[s.index] = {k: s.errors[k] for k in ("processes", "proc_util") if k in s.errors}
            self._proc_util[s.index] = s.proc_util
            if s.processes is None:  # a failed query: the last list stands, and the error is said
                continue
            self._raw_procs[s.index] = s.processes
            self._procs_ts[s.index] = s.ts
            old = self._seen.get(s.index, {})
            new = {pid: old.get(pid, s.ts) for pid, _ in s.processes}
            self._seen[s.index] = new
            fresh[s.index] = (old, new)
        listed = {pid for lst in self._raw_procs.values() for pid, _ in lst}
        self.labels.refresh({pid for _, new in fresh.values() for pid in new}, by_pid.keys(), keep=listed)
        for g, (old, new) in fresh.items():
            marks.extend(proc_marks(g, old, new, lambda pid: self.labels.label(pid, None, by_pid, children)))

    def _view(self, s: GpuSample, by_pid: Mapping[int, int], children: Mapping[int, int]) -> GpuView:
        errors = dict(s.errors)
        errors.update(self._procs_error.get(s.index, {}))
        util = self._proc_util.get(s.index)
        seen = self._seen.get(s.index, {})
        procs = []
        for pid, mem in self._raw_procs.get(s.index, ()):
            p = self.labels.label(pid, mem, by_pid, children)
            p["sm_util"] = util.get(pid, 0) if util is not None else None
            if pid in seen:
                p["since"] = seen[pid]
            procs.append(p)
        return {"index": s.index, "name": s.name, "uuid": s.uuid, "mem_used": s.mem_used,
                "mem_total": s.mem_total, "util_gpu": s.util_gpu, "util_mem": s.util_mem,
                "temperature": s.temperature, "power_w": s.power_w,
                "processes": procs, "errors": errors, "ts": s.ts, "processes_ts": self._procs_ts.get(s.index),
                "alerts": [], "ranks": [], "history": {"mem_used": [], "util_gpu": []},  # both filled by tick
                "breakdown": {"allocated": None, "cached": None, "other": None, "outside": None}}

    def _history(self, v: GpuView) -> GpuHistory:
        mem, util = self._spark.setdefault(v["index"], (deque(maxlen=HISTORY_POINTS),
                                                        deque(maxlen=HISTORY_POINTS)))
        mem.append(v["mem_used"])
        util.append(v["util_gpu"])
        return {"mem_used": list(mem), "util_gpu": list(util)}

    def _announce(self, a: GpuAlert) -> None:
        fields = {k: v for k, v in a.items() if k not in ("key", "rank", "since")}
        try:
            self._emit(a["rank"], **fields)
        except Exception as exc:  # noqa: BLE001 - a full disk must not stop the poller
            errors.note("GPU watcher: recording an alert", exc)

    @staticmethod
    def _tick_record(views: list[GpuView], wgpus: Mapping[int, WorkerGpu], wall: float) -> GpuTick:
        return {"ts": wall,
                "gpus": [{"index": v["index"], "mem_used": v["mem_used"], "mem_total": v["mem_total"],
                          "util_gpu": v["util_gpu"],
                          "outside": v["breakdown"]["outside"] if "breakdown" in v else None}
                         for v in views],
                "ranks": [{"rank": r, "gpu": wg["index"], "nvml": wg["mem_bytes"],
                           "allocated": wg["allocated"], "reserved": wg["reserved"]}
                          for r, wg in sorted(wgpus.items())]}

    # ------------------------------------------------------------- readers ----
    def snapshot(self) -> GpuPart:
        """The status's gpus and gpu_status; copies, so the caller may keep them."""
        with self._lock:
            views = self._views
        out = []
        for v in views:
            c = v.copy()
            c["processes"] = [p.copy() for p in v["processes"]]
            c["alerts"] = [a.copy() for a in v["alerts"]]
            out.append(c)
        status = self.status
        if self.pids_hidden:  # said with whatever else is partial
            status = ranks.HIDDEN_PIDS + (f"; {status}" if status else "")
        return {"gpus": out, "gpu_status": status}

    def worker_gpu(self, rank: int) -> WorkerGpu | None:
        """A live rank's GPU as the last tick resolved it; None when it has none."""
        with self._lock:
            wg = self._wgpu.get(rank)
        return wg.copy() if wg is not None else None

    def timeline(self, window: object) -> GpuTimelineReply:
        """The `gpu_timeline` reply: {"ticks", "marks"} of the last `window` seconds."""
        if isinstance(window, bool) or not isinstance(window, (int, float)) or not 0 < window <= HOUR_S:
            raise CommandError(f"'window' must be a number of seconds from 1 to {HOUR_S:.0f}")
        ticks, marks = self.timeline_store.window(float(window))
        return {"ticks": ticks, "marks": marks}

    def on_worker_exit(self, rank: int, stderr_tail: Iterable[str] | None,
                       cuda: CudaView | None = None) -> GpuAlert | None:
        """A worker ended: when its stderr says CUDA OOM, raise the OOM alert."""
        line = rank_alerts.oom_line(stderr_tail)
        if line is None:
            return None
        with self._lock:
            gpu = self._last_gpu.get(rank)
            if gpu is None and cuda is not None and cuda.get("uuid") and self.probe is not None:
                gpu = self.probe.uuid_index.get(cuda.get("uuid") or "")
            view = next((v for v in self._views if v["index"] == gpu), None)
            age = time.time() - view["processes_ts"] if view is not None and view["processes_ts"] else None
            alert = rank_alerts.oom_alert(rank, gpu, view, line, age)
            alert["since"] = time.time()
            if gpu is not None:
                kept = self._ooms.setdefault(gpu, [])
                kept.append(alert)
                del kept[:-OOMS_KEPT]
                if view is not None:
                    view["alerts"] = view["alerts"] + [alert]
        self.timeline_store.mark({"ts": alert["since"], "gpu": gpu, "kind": "oom", "rank": rank,
                                  "text": alert["message"]})
        self._announce(alert)
        return alert

