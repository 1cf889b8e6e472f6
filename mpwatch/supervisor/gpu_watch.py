"""The GPU watcher: a poller thread in the supervisor over probes.gpu.

Every `interval` seconds it samples memory, utilization, temperature and power of each
GPU; every PROCS_EVERY ticks it also asks for the compute processes (milliseconds per
call on real drivers). Each NVML process is labelled by pid: a worker of this run (rank),
a worker's descendant (child_of), or an outsider with its user and command from psutil
("not visible" when the pid is not in our PID namespace). Then the pure decisions of
gpu_alerts run; an alert that starts becomes one `gpu_alert` event, one that goes on
does not.

Locks: the run's lock is taken only to copy the workers' pids, and never while holding
this watcher's own lock; `snapshot()` is called under the run's lock and takes only ours.
"""
from __future__ import annotations

import os
import threading
import time
from collections import deque

import psutil

from mpwatch.probes import gpu as gpu_probe
from mpwatch.supervisor import gpu_alerts

PROCS_EVERY = 5  # the process list is refreshed every this many ticks
HISTORY_S = 120.0  # per-rank memory history kept for growth rates
OOMS_KEPT = 5  # OOM alerts shown per GPU
WHO_RECHECK_S = 10.0  # a known GPU process is checked for pid reuse this often


class GpuWatch:
    def __init__(self, interval: float, workers, emit, env=None, config=None, opener=None):
        """workers() -> (pid -> rank, child pid -> rank, running ranks); emit(rank, **fields)
        records one gpu_alert event."""
        self.interval = max(0.05, float(interval))
        self._workers = workers
        self._emit = emit
        self.env = dict(os.environ if env is None else env)
        self.cfg = config or gpu_alerts.AlertConfig.from_env(self.env)
        self._opener = opener or gpu_probe.open_backend
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.probe: gpu_probe.GpuProbe | None = None
        self.status: str | None = None  # one line when there is no GPU data, or a partial one
        self.ticks = 0
        self.last_tick_s: float | None = None
        self._views: list[dict] = []
        self._raw_procs: dict[int, list] = {}  # gpu -> [(pid, bytes)] from the last process query
        self._procs_ts: dict[int, float] = {}  # gpu -> wall time of that query
        self._procs_error: dict[int, str | None] = {}  # gpu -> why the last process query failed
        self._by_pid: dict[int, list] = {}  # pid -> [(gpu, bytes)], for per-worker views
        self._last_gpu: dict[int, tuple] = {}  # rank -> (gpu, monotonic) where it was last seen
        self._history: dict[int, dict] = {}  # gpu -> rank -> deque of (t, bytes)
        self._low_since: dict[int, float | None] = {}
        self._active: dict[str, dict] = {}  # key -> alert standing now
        self._announced: dict[str, float] = {}  # key -> when its event was last emitted
        self._ooms: dict = {}  # gpu -> [oom alerts]
        self._who: dict[int, dict] = {}  # pid -> {create, checked, user, cmd, visible, ancestor}

    @classmethod
    def for_run(cls, run) -> GpuWatch:
        def workers():
            by_pid, children, running = {}, {}, set()
            with run.lock:
                for w in run.workers.values():
                    if w.pid is None:
                        continue
                    by_pid[w.pid] = w.rank
                    if w.state == "running":
                        running.add(w.rank)
                    for c in (w.proc_info or {}).get("children", ()):
                        children[c["pid"]] = w.rank
            return by_pid, children, running

        def emit(rank, **fields):
            run.event("gpu_alert", rank, **fields)

        return cls(run.opts.gpu_interval, workers, emit)

    # ------------------------------------------------------------ lifecycle ----
    def start(self):
        self._thread = threading.Thread(target=self._main, name="mpwatch-gpu", daemon=True)
        self._thread.start()

    def open(self) -> bool:
        """Start the backend; False (and a status line) when there is none."""
        backend, why = self._opener(self.env)
        if backend is None:
            self.status = why
            return False
        probe = gpu_probe.GpuProbe(backend)
        try:
            probe.open()
        except Exception as exc:  # noqa: BLE001 - every device failed: one line
            self.status = gpu_probe.reason_for(exc)
            probe.close()
            return False
        self.probe = probe
        self.status = probe.status
        return True

    def _main(self):
        if not self.open():
            return
        try:
            while not self._stop.is_set():
                t0 = time.monotonic()
                try:
                    self.tick()
                    self.status = self.probe.status
                except Exception as exc:  # noqa: BLE001 - the poller never stops the run
                    self.status = f"GPU poller error: {type(exc).__name__}: {exc}"
                self._stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))
        finally:
            self.probe.close()

    def close(self):
        self._stop.set()
        if self._thread is not None:
            # The poller thread shuts NVML down itself on its way out (never under its feet).
            if self._thread is not threading.current_thread():
                self._thread.join(timeout=2.0)
        elif self.probe is not None:
            self.probe.close()

    # ----------------------------------------------------------------- tick ----
    def tick(self):
        t0 = time.perf_counter()
        now = time.monotonic()
        with_procs = self.ticks % PROCS_EVERY == 0
        self.ticks += 1
        samples = self.probe.sample(with_procs)
        by_pid, children, running = self._workers()
        if with_procs:
            self._refresh_who(samples, by_pid)
        views, new_by_pid = [], {}
        for s in samples:
            if s.processes is not None:
                self._raw_procs[s.index] = s.processes
                self._procs_ts[s.index] = s.ts
            if with_procs:  # a failed process query stays said until the next one
                self._procs_error[s.index] = s.errors.get("processes")
            errors = dict(s.errors)
            if self._procs_error.get(s.index):
                errors["processes"] = self._procs_error[s.index]
            procs = [self._label(pid, mem, by_pid, children) for pid, mem in self._raw_procs.get(s.index, ())]
            for p in procs:
                new_by_pid.setdefault(p["pid"], []).append((s.index, p["mem_bytes"]))
            view = {"index": s.index, "name": s.name, "mem_used": s.mem_used, "mem_total": s.mem_total,
                    "util_gpu": s.util_gpu, "util_mem": s.util_mem, "temperature": s.temperature,
                    "power_w": s.power_w, "processes": procs, "errors": errors, "ts": s.ts,
                    "processes_ts": self._procs_ts.get(s.index)}
            held = gpu_alerts.ranks_on(view)
            for rank in held:
                self._last_gpu[rank] = (s.index, now)
            hist = self._history.setdefault(s.index, {})
            if s.processes is not None:  # memory per rank only moves when the process list does
                for rank in [r for r in hist if r not in held]:
                    del hist[rank]
                for rank, mem in held.items():
                    h = hist.setdefault(rank, deque())
                    h.append((now, mem))
                    while now - h[0][0] > HISTORY_S:
                        h.popleft()
            # Growth rates only matter to a nearly full GPU.
            growth = gpu_alerts.growth_rates(hist, now, self.cfg.growth_window_s) \
                if gpu_alerts.is_memory_high(view, self.cfg) else {}
            since = gpu_alerts.low_use_since(self._low_since.get(s.index), now, view, running, self.cfg)
            self._low_since[s.index] = since
            view["alerts"] = gpu_alerts.evaluate(view, growth, since, now, self.cfg)
            views.append(view)
        started = self._standing([a for v in views for a in v["alerts"]], now)
        with self._lock:
            for v in views:
                v["alerts"] = v["alerts"] + list(self._ooms.get(v["index"], ()))
            self._views = views
            self._by_pid = new_by_pid
        for a in started:
            self._announce(a)
        self.last_tick_s = time.perf_counter() - t0

    def _standing(self, alerts: list[dict], now: float) -> list[dict]:
        """Alerts that start now (and were not announced within the cooldown)."""
        current = {a["key"]: a for a in alerts}
        started = []
        for key, a in current.items():
            if key in self._active:
                a["since"] = self._active[key]["since"]
                continue
            a["since"] = time.time()
            last = self._announced.get(key)
            if last is None or now - last >= self.cfg.cooldown_s:
                self._announced[key] = now
                started.append(a)
        self._active = current
        return started

    def _announce(self, a: dict):
        fields = {k: v for k, v in a.items() if k not in ("key", "rank", "since")}
        try:
            self._emit(a.get("rank"), **fields)
        except Exception:  # noqa: BLE001 - a full disk must not stop the poller
            pass

    # --------------------------------------------------------------- labels ----
    def _label(self, pid: int, mem, by_pid: dict, children: dict) -> dict:
        rank = by_pid.get(pid)
        child_of = children.get(pid) if rank is None else None
        who = self._who.get(pid) or {}
        if rank is None and child_of is None and who.get("ancestor") in by_pid:
            child_of = by_pid[who["ancestor"]]  # a child the process sampler has not seen yet
        return {"pid": pid, "rank": rank, "child_of": child_of, "user": who.get("user"),
                "cmd": who.get("cmd"), "mem_bytes": mem, "visible": who.get("visible", False)}

    def _refresh_who(self, samples, worker_pids):
        """User and command of every pid in the new process lists, each looked up once; a
        known process is re-checked (pid reuse) only every WHO_RECHECK_S."""
        now = time.monotonic()
        pids = {pid for s in samples for pid, _ in (s.processes or ())}
        for pid in pids:
            cached = self._who.get(pid)
            if cached is None or now - cached["checked"] >= WHO_RECHECK_S:
                self._who[pid] = self._whois(pid, worker_pids, cached, now)
        if len(self._who) > 4 * len(pids) + 64:  # forget processes long gone
            keep = pids | {pid for lst in self._raw_procs.values() for pid, _ in lst}
            self._who = {pid: w for pid, w in self._who.items() if pid in keep}

    @staticmethod
    def _whois(pid: int, worker_pids, cached: dict | None, now: float) -> dict:
        try:
            proc = psutil.Process(pid)
            create = proc.create_time()
        except psutil.NoSuchProcess:
            return {"visible": False, "cmd": "not visible", "create": None, "checked": now}
        except psutil.Error:
            return {"visible": True, "create": None, "checked": now}
        if cached is not None and cached["create"] == create:
            return dict(cached, checked=now)
        info = {"create": create, "checked": now, "visible": True, "user": None, "cmd": None, "ancestor": None}
        try:
            info["user"] = proc.username()
        except (psutil.Error, KeyError):  # KeyError: a uid without a passwd entry
            pass
        try:
            info["cmd"] = " ".join(proc.cmdline())[:200] or proc.name()
        except psutil.Error:
            try:
                info["cmd"] = proc.name()
            except psutil.Error:
                pass
        if pid not in worker_pids:
            try:
                info["ancestor"] = next((p.pid for p in proc.parents() if p.pid in worker_pids), None)
            except psutil.Error:
                pass
        return info

    # ------------------------------------------------------------- readers ----
    def snapshot(self) -> dict:
        with self._lock:
            gpus = [dict(v, processes=[dict(p) for p in v["processes"]], alerts=[dict(a) for a in v["alerts"]])
                    for v in self._views]
        return {"gpus": gpus, "gpu_status": self.status}

    def worker_gpu(self, pids) -> dict | None:
        """{"index", "mem_bytes", "gpus": [{"index", "mem_bytes"}]} for a worker's pids
        (itself and its children) at the last process query; None where it holds no GPU."""
        per: dict = {}
        with self._lock:
            for pid in pids:
                for g, mem in self._by_pid.get(pid, ()):
                    per[g] = per.get(g, 0) + (mem or 0)
        if not per:
            return None
        main = max(per, key=lambda g: (per[g], -g))
        return {"index": main, "mem_bytes": per[main],
                "gpus": [{"index": g, "mem_bytes": per[g]} for g in sorted(per)]}

    def on_worker_exit(self, rank: int, stderr_tail, cuda: dict | None = None):
        """A worker ended: when its stderr says CUDA OOM, raise the OOM alert."""
        line = gpu_alerts.oom_line(stderr_tail)
        if line is None:
            return None
        now = time.monotonic()
        with self._lock:
            seen = self._last_gpu.get(rank)
            gpu = seen[0] if seen else (cuda or {}).get("device")
            view = next((v for v in self._views if v["index"] == gpu), None)
            age = None
            if view is not None and view.get("processes_ts"):
                age = time.time() - view["processes_ts"]
            alert = gpu_alerts.oom_alert(rank, gpu, view, line, age)
            alert["since"] = time.time()
            if gpu is not None:
                kept = self._ooms.setdefault(gpu, [])
                kept.append(alert)
                del kept[:-OOMS_KEPT]
                if view is not None:
                    view["alerts"] = view["alerts"] + [alert]
        self._announce(alert)
        return alert
