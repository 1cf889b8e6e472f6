"""The GPU watcher: a poller thread in the supervisor over probes.gpu.

Every `interval` seconds it samples memory, utilization, temperature, power and clocks of
each GPU (and of each MIG slice of a GPU in MIG mode); every PROCS_EVERY ticks it also asks
for the compute processes and their SM utilization (milliseconds per call on real drivers).
The views are built by supervisor.gpu.views, processes labelled by pid (supervisor.gpu.labels),
each rank is given its own GPU or MIG slice by UUID or pid (supervisor.gpu.ranks),
the alert decisions run (supervisor.gpu.alerts, supervisor.gpu.rank_alerts), and the tick goes
to the timeline (supervisor.gpu.timeline: memory and gpu.jsonl). An alert that starts becomes one `gpu_alert`
event; one that goes on does not.

Entry points for the run: `GpuWatch.for_run(run)` (the one place that reads the run's
workers), `start()`/`close()`, the readers `snapshot()`, `worker_gpu(rank)`, `memory(rank, pid)`,
`timeline(window)`, and a rank's CUDA OOM: `on_oom(...)` when its record comes, `on_worker_exit(...)`
when it died (supervisor.gpu.oom_findings keeps the findings).
Locks: the run's lock is taken only to copy the workers (for_run), never while holding
this watcher's own lock; `snapshot()` is called under the run's lock and takes only ours.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Literal, Protocol, TypedDict

from mpwatch.contract import (
    ALIVE_STATES,
    CudaView,
    DevKey,
    Event,
    GpuAlert,
    GpuMark,
    GpuTimelineReply,
    GpuView,
    OomRecord,
    State,
    WorkerGpu,
    WorkerMemory,
    dev_key,
    devices,
    leaves,
)
from mpwatch.probes import seam
from mpwatch.probes.gpu import Backend, GpuProbe, open_backend, reason_for
from mpwatch.rundir.writer import RunStore
from mpwatch.settings import Settings
from mpwatch.supervisor import boundary, errors
from mpwatch.supervisor.errors import CommandError
from mpwatch.supervisor.gpu import oom_findings, rank_alerts, ranks
from mpwatch.supervisor.gpu.alerts import alert_key
from mpwatch.supervisor.gpu.ranks import RankInfo
from mpwatch.supervisor.gpu.timeline import HOUR_S, GpuTimeline, cap_bytes, tick_record
from mpwatch.supervisor.gpu.tracker import AlertTracker
from mpwatch.supervisor.gpu.views import Views

PROCS_EVERY = 5  # the process list is refreshed every this many ticks

# (the GPU seam's scenario, probes.seam; None: the real NVML) -> (backend, None) or (None, why)
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
    def cuda(self) -> CudaView | None: ...  # checked where it entered (supervisor.workers.ledger)


class _OptsLike(Protocol):
    @property
    def gpu_interval(self) -> float: ...
    @property
    def cuda_history(self) -> bool: ...


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
                 timeline: RunStore | None = None, clock: Callable[[], float] = time.monotonic,
                 cuda_history: bool = False):
        """workers() -> the run's workers (alive or not, with a pid); emit(rank, **fields)
        records one gpu_alert event; settings: the alerts' thresholds, the timeline's cap and
        the GPU seam's scenario (probes.seam); env: the workers' (CUDA_VISIBLE_DEVICES); clock:
        the monotonic clock of slopes and idle spans."""
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
        self.visible: set[DevKey] | None = None  # the leaves CUDA_VISIBLE_DEVICES gives (None: all)
        self.pids_hidden = False  # NVML's pids are the host's: none is a rank (a container)
        self.timeline_store = GpuTimeline(timeline, cap_bytes(self.settings.gpu_timeline_mb))
        self.views = Views()
        self._views: list[GpuView] = []
        self._wgpu: dict[int, WorkerGpu] = {}
        self.tracker = AlertTracker(self.cfg)
        self._last_gpu: dict[int, DevKey] = {}  # rank -> its own GPU (or MIG slice) when last seen
        self.ooms = oom_findings.OomFindings(self.cfg, oom_findings.user(), cuda_history)  # the ranks' OOMs

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

        return cls(run.opts.gpu_interval, workers, emit, settings=run.settings, timeline=run.store,
                   cuda_history=run.opts.cuda_history)

    # ------------------------------------------------------------ lifecycle ----
    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="mpwatch-gpu", daemon=True)
        self._thread.start()

    def open(self) -> bool:
        """Start the backend; False (and a status line) when there is none."""
        backend, why = self._opener(seam.scenario(self.settings))
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
        leaves_of: dict[int, list[DevKey]] = {
            d.index: [(d.index, s.id.gi, s.id.ci) for s in d.slots] or [(d.index, None, None)]
            for d in probe.devices}
        self.visible = ranks.visible_keys(self.env, probe.uuid_keys, leaves_of)
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
                    self.status = f"GPU poller error: {boundary.failed('GPU watcher', exc)}"
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
            self.views.take_processes(samples, by_pid, children, marks)
        views = [self.views.view(s, by_pid, children) for s in samples]
        alive = [i for i in infos if i.alive]
        hidden = ranks.pids_hidden(devices(views), alive)
        placement, wgpus = self._place(views, alive)
        self._fill(views, alive, ranks.ranks_by_gpu(placement), hidden)
        loose = self.tracker.decide(leaves(views), alive, wgpus, self.visible, with_procs, now, hidden)
        self.ooms.cover([v["alerts"] for v in devices(views)] + [loose])  # a finding's rank: an atomic test
        started = self.tracker.standing([a for v in devices(views) for a in v["alerts"]] + loose, now)
        with self._lock:
            for v in devices(views):
                v["alerts"] = v["alerts"] + self.ooms.on_gpu(dev_key(v))
            self._views, self._wgpu, self.pids_hidden = views, wgpus, hidden
            self._last_gpu.update({rank: p.key for rank, p in placement.items()})
        for a in started:
            marks.append(alert_mark(a, wall, "alert"))
            self._announce(a)
        marks.extend(self.tracker.counter_marks(alive, wgpus, wall))
        for m in marks:
            self.timeline_store.mark(m)
        self.timeline_store.tick(tick_record(views, wgpus, wall))
        self.last_tick_s = time.perf_counter() - t0

    def _place(self, views: list[GpuView], alive: list[RankInfo]
               ) -> tuple[dict[int, ranks.Placement], dict[int, WorkerGpu]]:
        """Each live rank's own GPU (or MIG slice), and its GPU as the status shows it."""
        assert self.probe is not None
        by_key = {dev_key(v): v for v in leaves(views)}
        holdings = ranks.held(list(by_key.values()))
        uuids = {k: v["uuid"] for k, v in by_key.items()}
        placement = ranks.place(alive, holdings, self.probe.uuid_keys, uuids)
        mates = ranks.ranks_by_gpu(placement)
        wgpus: dict[int, WorkerGpu] = {}
        for i in alive:
            wg = ranks.worker_gpu(i, placement.get(i.rank), by_key, holdings, mates)
            if wg is not None:
                wgpus[i.rank] = wg
        return placement, wgpus

    def _fill(self, views: list[GpuView], alive: list[RankInfo], mates: Mapping[DevKey, list[int]],
              hidden: bool) -> None:
        """Each view's ranks, memory breakdown and history; a GPU in MIG mode's breakdown is its
        slices' (its own ranks stay empty: two ranks on two of its slices share nothing)."""
        for v in devices(views):
            key = dev_key(v)
            own = [i for i in alive if i.rank in mates.get(key, ())]
            v["ranks"] = mates.get(key, [])
            known = self.views.procs_known(key) and not hidden
            v["breakdown"] = ranks.breakdown(v, own, known)
            v["history"] = self.views.history(v, key)
        for v in views:
            if v.get("slices"):
                v["breakdown"] = ranks.sum_breakdowns([s["breakdown"] for s in v.get("slices", [])])

    def _announce(self, a: GpuAlert, update: bool = False) -> None:
        fields = {k: v for k, v in a.items() if k not in ("key", "rank", "since")}
        fields.update({"update": True} if update else {})  # the same finding, completed: shown in place
        try:
            self._emit(a["rank"], **fields)
        except Exception as exc:  # noqa: BLE001 - a full disk must not stop the poller
            errors.note("GPU watcher: recording an alert", exc)

    # ------------------------------------------------------------- readers ----
    def snapshot(self) -> GpuPart:
        """The status's gpus and gpu_status; copies, so the caller may keep them."""
        with self._lock:
            views = self._views
        out = [_copy(v) for v in views]
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

    def memory(self, rank: int, pid: int | None) -> tuple[WorkerMemory, float] | None:
        with self._lock:  # the table's words of the rank's process's CUDA memory (its OOM), and when
            return self.ooms.memory(rank, pid)

    # ----------------------------------------------------------------- OOMs ----
    def on_oom(self, rank: int, pid: int, record: OomRecord) -> GpuAlert:
        """A rank's OOM record came (the channel hub's thread; the rank may have caught it)."""
        return self._oom(rank, pid, record, None, died=False)

    def on_worker_exit(self, rank: int, stderr_tail: Iterable[str] | None, cuda: CudaView | None = None,
                       pid: int | None = None, record: OomRecord | None = None) -> GpuAlert | None:
        """A worker failed: when its stderr or its record says it died of CUDA OOM, its finding
        (that OOM's, completed, when its record came first)."""
        line = rank_alerts.oom_line(stderr_tail)
        if line is None and (record is None or not record["message"]):
            return None
        return self._oom(rank, pid, record, line, died=True, cuda=cuda)

    def _oom(self, rank: int, pid: int | None, record: OomRecord | None, line: str | None, died: bool,
             cuda: CudaView | None = None) -> GpuAlert:
        by_pid = {i.pid: i.rank for i in self._workers()}  # the run's lock, never under ours
        with self._lock:
            uuids = self.probe.uuid_keys if self.probe is not None else {}
            place = oom_findings.place(rank, record, cuda, leaves(self._views), self._last_gpu, uuids, by_pid)
            # a rank mpwatch never saw use CUDA: no record, no allocator counters, on no GPU
            used = record is not None or cuda is not None or place.key is not None
            a, told = self.ooms.raise_(rank, pid, record, line, died, place, time.time(), used)
            if told == "new" and self.tracker.active(a["key"]) is not None:
                told = "update"  # the tracker's caught-OOM alert of it was told first: this completes it
            if place.view is not None:
                place.view["alerts"] = [x for x in place.view["alerts"] if x["key"] != a["key"]] + [a]
        if told == "new":  # the timeline marks the OOM once, where it happened
            self.timeline_store.mark(alert_mark(a, a["since"], "oom"))
        if told != "quiet":
            self._announce(a, update=told == "update")
        return a


def _copy(v: GpuView) -> GpuView:
    c = v.copy()
    c["processes"] = [p.copy() for p in v["processes"]]
    c["alerts"] = [a.copy() for a in v["alerts"]]
    if "slices" in v:
        c["slices"] = [_copy(s) for s in v["slices"]]
    return c


def alert_mark(a: GpuAlert, ts: float, kind: Literal["alert", "oom"]) -> GpuMark:
    """The timeline's mark of an alert that starts (on its GPU, or MIG slice)."""
    mark: GpuMark = {"ts": ts, "gpu": a["gpu"], "kind": kind, "rank": a["rank"], "text": a["message"]}
    where = alert_key(a)
    if where is not None and where[1] is not None and where[2] is not None:
        mark["gi"], mark["ci"] = where[1], where[2]
    return mark
