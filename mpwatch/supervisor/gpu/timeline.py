"""The GPU timeline: what was on each GPU about once a second, and the moments worth a
marker, kept for the last hour in memory (the `gpu_timeline` control command, the TUI's
GPU screen) and appended to <run dir>/gpu.jsonl (after the fact) through the run's writer
(rundir.writer.RunStore). Written by the GPU poller thread; read by the control server's
threads (under this object's lock).

gpu.jsonl holds one JSON object a line, oldest first, of three kinds:
- a tick (has "gpus"), status.GpuTick: {"ts", "gpus": [{"index", "mem_used", "mem_total",
  "util_gpu", "outside"}], "ranks": [{"rank", "gpu", "nvml", "allocated", "reserved"}]};
  at most one a TICK_S (the poller may tick faster). A MIG slice is an entry of "gpus" after
  its GPU's, with its "gi" and "ci"; a rank on one has them too (`tick_record` makes a tick);
- a mark (has "kind"), status.GpuMark: {"ts", "gpu", "kind", "rank", "pid", "text"},
  kind one of proc_started, proc_exited, alert, alloc_retry, oom;
- a note (has "thinned"), status.GpuThinned: {"ts", "thinned": {"from", "to",
  "ticks_before", "ticks_after", "marks_dropped"}}: older detail was thinned to keep the
  file under its cap (MPWATCH_GPU_TIMELINE_MB, default 64): between "from" and "to" only
  ticks_after of ticks_before ticks are left, and marks_dropped marks (the oldest) are gone.
A full disk or any other write error never stops the run: the line is lost, `error` says
why, and writing is tried again RETRY_S later.
"""
from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import TextIO

from mpwatch.contract import (
    GpuMark,
    GpuThinned,
    GpuTick,
    GpuTickGpu,
    GpuTickRank,
    GpuView,
    WorkerGpu,
    as_float,
    devices,
)
from mpwatch.rundir import textfiles
from mpwatch.rundir.layout import GPU_JSONL
from mpwatch.rundir.writer import RunStore

TICK_S = 1.0  # one tick kept (and written) per this many seconds at most
FINE_S = 600.0  # the last ten minutes are kept at one tick a TICK_S...
COARSE_S = 12.0  # ...the rest of the hour at one a COARSE_S
HOUR_S = 3600.0
MAX_TICKS = 300  # a timeline reply holds at most this many ticks
MARKS_KEPT = 2000  # in memory
MARKS_SENT = 500  # in a reply, the latest
RETRY_S = 10.0


def cap_bytes(mb: float) -> int:
    """The cap (settings.Settings.gpu_timeline_mb, MB) in bytes."""
    return int(mb * (1 << 20))


def _line(rec: Mapping[str, object]) -> str:
    return json.dumps(rec, separators=(",", ":"), allow_nan=False) + "\n"


def tick_record(views: list[GpuView], wgpus: Mapping[int, WorkerGpu], wall: float) -> GpuTick:
    """The tick of a moment: each GPU and MIG slice, each rank on its own."""
    gpus: list[GpuTickGpu] = []
    for v in devices(views):
        mig, i = v.get("mig"), v["index"]
        used, total, util = v["mem_used"], v["mem_total"], v["util_gpu"]
        outside = v["breakdown"]["outside"] if "breakdown" in v else None
        # A slice's ids right after its index: the replay reads a tick's samples by that order.
        gpus.append({"index": i, "mem_used": used, "mem_total": total, "util_gpu": util, "outside": outside}
                    if mig is None else
                    {"index": i, "gi": mig["gi"], "ci": mig["ci"], "mem_used": used, "mem_total": total,
                     "util_gpu": util, "outside": outside})
    ranks: list[GpuTickRank] = []
    for r, wg in sorted(wgpus.items()):
        tr: GpuTickRank = {"rank": r, "gpu": wg["index"], "nvml": wg["mem_bytes"],
                           "allocated": wg["allocated"], "reserved": wg["reserved"]}
        rmig = wg.get("mig")
        if rmig is not None:
            tr["gi"], tr["ci"] = rmig["gi"], rmig["ci"]
        ranks.append(tr)
    return {"ts": wall, "gpus": gpus, "ranks": ranks}


class GpuTimeline:
    def __init__(self, store: RunStore | None, cap_bytes: int):
        self.store = store  # where gpu.jsonl goes; None: memory only (benchmarks)
        self.path = store.dir / GPU_JSONL if store is not None else None
        self.cap = max(cap_bytes, 4096)
        self.error: str | None = None  # why the last write failed, until one succeeds
        self.thinned = 0  # compactions so far
        self._lock = threading.Lock()  # the in-memory hour
        self._io = threading.Lock()  # the file: the poller writes ticks, the main thread an OOM's mark
        self._fine: deque[tuple[float, str]] = deque()  # (ts, the tick as JSON)
        self._coarse: deque[tuple[float, str]] = deque()
        self._marks: deque[GpuMark] = deque(maxlen=MARKS_KEPT)
        self._last_ts = 0.0
        self._file: TextIO | None = None
        self._size = 0
        self._retry_at = 0.0

    # ------------------------------------------------------------ writers ----
    def tick(self, rec: GpuTick) -> bool:
        """Keep (and write) a tick unless one was kept less than TICK_S ago."""
        ts = rec["ts"]
        if ts - self._last_ts < TICK_S * 0.95:
            return False
        line = _line(rec)
        with self._lock:
            self._last_ts = ts
            self._fine.append((ts, line))
            while self._fine and ts - self._fine[0][0] > FINE_S:
                self._fine.popleft()
            if not self._coarse or ts - self._coarse[-1][0] >= COARSE_S:
                self._coarse.append((ts, line))
            while self._coarse and ts - self._coarse[0][0] > HOUR_S:
                self._coarse.popleft()
        self._write(line)
        return True

    def mark(self, rec: GpuMark) -> None:
        with self._lock:
            self._marks.append(rec)
        self._write(_line(rec))

    def _write(self, line: str) -> None:
        if self.store is None:
            return
        with self._io:
            self._append(self.store, line)

    def _append(self, store: RunStore, line: str) -> None:
        now = time.monotonic()
        f = self._file
        if f is None:
            if now < self._retry_at:
                return
            try:
                self._file = f = store.open_append(GPU_JSONL)  # held open across ticks
                self._size = f.tell()
            except OSError as exc:
                self._failed(exc, now)
                return
        try:
            f.write(line)
            f.flush()
            self._size += len(line)
            self.error = None
        except OSError as exc:
            self._failed(exc, now)
            return
        if self._size > self.cap:
            self._compact()

    def _failed(self, exc: OSError, now: float) -> None:
        self.error = f"{self.path}: {exc.strerror or exc}"
        self._retry_at = now + RETRY_S
        self._close_file()

    def close(self) -> None:
        with self._io:
            self._close_file()

    def _close_file(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None

    # ---------------------------------------------------------- thinning ----
    def _compact(self) -> None:
        """Rewrite the file under 3/4 of its cap: thin the older half of the ticks to every
        other one (again, until it fits), dropping the oldest marks only when they alone
        fill half the cap; a note says what went."""
        assert self.store is not None and self.path is not None
        self._close_file()
        ticks: list[tuple[float, str]] = []
        marks: list[tuple[float, str]] = []
        notes: list[tuple[float, str]] = []
        try:
            for rec in textfiles.read_jsonl(self.path):  # a line cut short by a full disk is skipped
                ts = as_float(rec.get("ts")) or 0.0
                (ticks if "gpus" in rec else marks if "kind" in rec else notes).append((ts, _line(rec)))
        except OSError as exc:
            self._failed(exc, time.monotonic())
            return
        before, dropped = len(ticks), 0
        t_from = ticks[0][0] if ticks else 0.0
        t_to = t_from
        marks_bytes = sum(len(ln) for _, ln in marks)
        if marks_bytes > self.cap // 2:
            dropped = len(marks) // 2
            marks = marks[dropped:]
        while sum(len(ln) for _, ln in ticks + marks + notes) > self.cap * 3 // 4 and len(ticks) > 8:
            half = len(ticks) // 2
            t_to = ticks[half - 1][0]
            ticks = ticks[:half][::2] + ticks[half:]
        note: GpuThinned = {"ts": time.time(),
                            "thinned": {"from": t_from, "to": t_to, "ticks_before": before,
                                        "ticks_after": len(ticks), "marks_dropped": dropped}}
        out = sorted(ticks + marks + notes, key=lambda x: x[0]) + [(note["ts"], _line(note))]
        try:
            self.store.replace(GPU_JSONL, (ln for _, ln in out))
        except OSError as exc:
            self._failed(exc, time.monotonic())
            return
        self.thinned += 1

    # ------------------------------------------------------------ readers ----
    def window(self, seconds: float, now: float | None = None) -> tuple[list[GpuTick], list[GpuMark]]:
        """The ticks of the last `seconds` (at most MAX_TICKS, evenly picked, the latest
        always in) and the marks (the latest MARKS_SENT), oldest first."""
        now = time.time() if now is None else now
        start = now - seconds
        with self._lock:
            fine_from = self._fine[0][0] if self._fine else now
            picked = [x for x in self._coarse if start <= x[0] < fine_from] + \
                     [x for x in self._fine if x[0] >= start]
            marks = [m for m in self._marks if m["ts"] >= start][-MARKS_SENT:]
        if len(picked) > MAX_TICKS:
            stride = len(picked) / MAX_TICKS
            picked = [picked[len(picked) - 1 - int(i * stride)] for i in range(MAX_TICKS)][::-1]
        return [json.loads(line) for _, line in picked], marks
