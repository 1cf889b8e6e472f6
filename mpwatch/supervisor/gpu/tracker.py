"""The memory of the GPU alert decisions: slopes of each GPU's and each rank's memory,
idle clocks, the ranks' allocator counters, and which alerts stand (so that one that
starts is told from one that goes on). The decisions themselves are pure functions in
supervisor.gpu.alerts and supervisor.gpu.rank_alerts. Used by the GPU watcher on the poller thread only.
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Mapping
from typing import TypeVar

from mpwatch.contract import DevKey, GpuAlert, GpuMark, GpuView, WorkerGpu, dev_key
from mpwatch.supervisor.gpu import alerts, rank_alerts
from mpwatch.supervisor.gpu.ranks import RankInfo, own_key

_P = TypeVar("_P", tuple[float, int], tuple[float, int, int])


def _trimmed(d: deque[_P], point: _P, window: float) -> deque[_P]:
    """d with point appended and the points older than `window` before it dropped."""
    d.append(point)
    while point[0] - d[0][0] > window:
        d.popleft()
    return d


def sustained_growth(points: deque[tuple[float, int]], now: float, window: float) -> float | None:
    """Bytes/s over the whole window, when memory grew over all of it and still grows in
    its last quarter; else None. A model's start-up ramp (tens of GB in seconds, then
    flat) is no leak: the window must be nearly full and the recent slope positive."""
    if not points or now - points[0][0] < 0.9 * window:
        return None
    whole = alerts.slope(points, window / 2)
    recent: list[tuple[float, int]] = []
    for p in reversed(points):
        if now - p[0] > window / 4:
            break
        recent.append(p)
    late = alerts.slope(recent[::-1], window / 8)
    return whole if whole is not None and whole > 0 and late is not None and late > 0 else None


class AlertTracker:
    def __init__(self, cfg: alerts.AlertConfig):
        self.cfg = cfg
        self._used: dict[DevKey, deque[tuple[float, int]]] = {}  # device -> (t, mem_used): its slope
        self._rank_mem: dict[DevKey, dict[int, deque[tuple[float, int]]]] = {}  # device -> rank -> (t, bytes)
        self._counters: dict[int, deque[tuple[float, int, int]]] = {}  # rank -> (t, retries, ooms)
        self._idle: dict[DevKey, tuple[alerts.IdleKind, float]] = {}  # device -> (kind, since)
        self._active: dict[str, GpuAlert] = {}  # key -> alert standing now
        self._announced: dict[str, float] = {}  # key -> when its event was last emitted

    def decide(self, views: list[GpuView], alive: list[RankInfo], wgpus: Mapping[int, WorkerGpu],
               visible: set[DevKey] | None, with_procs: bool, now: float,
               pids_hidden: bool = False) -> list[GpuAlert]:
        """Fill each view's alerts; returns the rank alerts that name no GPU. `views`: the
        leaves (every GPU outside MIG mode, every MIG slice); `visible`: those the workers may
        use (None: all); with_procs: the process lists are new; pids_hidden: NVML's pids are not
        this namespace's (supervisor.gpu.ranks.pids_hidden), so no process on a GPU can be
        called an outsider."""
        cfg, window = self.cfg, self.cfg.growth_window_s
        by_key = {dev_key(v): v for v in views}
        running = {i.rank for i in alive if i.running}
        busy = [v for v in views if (v["util_gpu"] or 0) >= cfg.busy_util and alerts.ranks_on(v)]
        n_gpus = len(visible) if visible is not None else len(views)
        for v in views:
            g = dev_key(v)
            rate = None
            if v["mem_used"] is not None:
                rate = sustained_growth(_trimmed(self._used.setdefault(g, deque()), (now, v["mem_used"]),
                                                 window), now, window)
            if with_procs:  # a rank's memory only moves when the process list does
                hist = self._rank_mem.setdefault(g, {})
                held = alerts.ranks_on(v)
                for r in [r for r in hist if r not in held]:
                    del hist[r]
                for r, mem in held.items():
                    _trimmed(hist.setdefault(r, deque()), (now, mem), window)
            growth = {r: s for r, d in self._rank_mem.get(g, {}).items()
                      if (s := alerts.slope(d, 1.0)) is not None}
            kind = alerts.idle_kind(v, running, busy, visible is None or g in visible, cfg)
            since = self._idle_since(g, kind, now)
            idle = alerts.idle(v, kind, since, now, busy, cfg)
            v["alerts"] = alerts.evaluate(v, len(alive) > n_gpus, growth, rate, idle, cfg, pids_hidden)
        return self._rank_alerts(by_key, alive, wgpus, now)

    def _rank_alerts(self, by_key: Mapping[DevKey, GpuView], alive: list[RankInfo],
                     wgpus: Mapping[int, WorkerGpu], now: float) -> list[GpuAlert]:
        """Each rank's alerts, put on the view of the GPU (or slice) they name; those that
        name none are returned."""
        cfg, loose = self.cfg, list[GpuAlert]()
        for i in alive:
            wg = wgpus.get(i.rank)
            if wg is None:
                continue
            retries, ooms = self._rises(i, now)
            found = rank_alerts.stray_contexts(i.rank, wg)
            key = own_key(wg)
            own = by_key.get(key) if key is not None else None
            split = i.cuda.get("inactive_split") if i.cuda else None
            for a in (rank_alerts.alloc_retries(i.rank, wg, retries, cfg.growth_window_s, cfg),
                      rank_alerts.fragmentation(i.rank, wg, own, split, cfg),
                      rank_alerts.oom_caught(i.rank, wg, ooms)):
                if a is not None:
                    found.append(a)
            for a in found:
                where = alerts.alert_key(a)
                target = by_key.get(where) if where is not None else None
                (target["alerts"] if target is not None else loose).append(a)
        return loose

    def _idle_since(self, g: DevKey, kind: alerts.IdleKind | None, now: float) -> float:
        """Since when GPU g has been idle of this kind (now, when it just became so); forgotten
        when not idle."""
        prev = self._idle.get(g)
        since = prev[1] if prev is not None and prev[0] == kind else now
        if kind is None:
            self._idle.pop(g, None)
        else:
            self._idle[g] = (kind, since)
        return since

    def _rises(self, info: RankInfo, now: float) -> tuple[int, int]:
        """How much the rank's allocator retries and OOMs rose within the growth window."""
        cuda = info.cuda
        if cuda is None:
            return 0, 0
        d = self._counters.setdefault(info.rank, deque())
        point = (now, cuda.get("alloc_retries", 0), cuda.get("num_ooms", 0))
        if d and (point[1] < d[-1][1] or point[2] < d[-1][2]):
            d.clear()  # a new process (restart): its counters start again at 0
        _trimmed(d, point, self.cfg.growth_window_s)
        return d[-1][1] - d[0][1], d[-1][2] - d[0][2]

    def counter_marks(self, alive: Iterable[RankInfo], wgpus: Mapping[int, WorkerGpu],
                      wall: float) -> list[GpuMark]:
        out: list[GpuMark] = []
        for i in alive:
            d = self._counters.get(i.rank)
            if not d or len(d) < 2:
                continue
            (_, r0, o0), (_, r1, o1) = d[-2], d[-1]
            key = own_key(wgpus[i.rank]) if i.rank in wgpus else None
            marks: list[GpuMark] = []
            if r1 > r0:
                marks.append({"ts": wall, "gpu": None, "kind": "alloc_retry", "rank": i.rank, "pid": i.pid,
                              "text": f"rank {i.rank}: {r1 - r0} allocator "
                                      f"retr{'ies' if r1 - r0 > 1 else 'y'}"})
            if o1 > o0:
                marks.append({"ts": wall, "gpu": None, "kind": "oom", "rank": i.rank, "pid": i.pid,
                              "text": f"rank {i.rank}: CUDA out of memory (caught)"})
            out += [on_device(m, key) for m in marks]
        return out

    def active(self, key: str) -> GpuAlert | None:
        """The alert of this key standing now, if any."""
        return self._active.get(key)

    def standing(self, found: list[GpuAlert], now: float) -> list[GpuAlert]:
        """Alerts that start now (and were not announced within the cooldown)."""
        current = {a["key"]: a for a in found}
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


def on_device(m: GpuMark, key: DevKey | None) -> GpuMark:
    """A mark placed on a GPU, or a MIG slice of one."""
    if key is not None:
        m["gpu"] = key[0]
        if key[1] is not None and key[2] is not None:
            m["gi"], m["ci"] = key[1], key[2]
    return m
