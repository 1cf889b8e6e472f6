"""The replay's view of events.jsonl and gpu.jsonl: indexed once, read where the cursor is.

An hour of 64 ranks is ~230 000 report events (40 MB), and the replay must open in under a
second, so the files are memory-mapped and never parsed whole: the notable events (every
event but `report`, a few hundred) are found by a regex the C engine runs over the file,
and report events are parsed only where they are needed: the last few of each rank before
the cursor (`reports_before`, the table), or one rank's whole curve (`curve`, the detail
view's plot, cached). The GPU timeline is indexed by time; a tick is parsed when shown.
A child process's report (it carries `child_of`) is never part of its rank's curve.

Tolerant as rundir.py: lines that are no event are counted into a note, a torn last line
too, a thinned file says so. `refresh` picks up what a live run appended (or reindexes
after a thinning pass replaced the file). Called from the replay source's callers' threads
under its lock; no textual, no supervisor.
"""
from __future__ import annotations

import bisect
import json
import mmap
import os
import re
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from mpwatch import rundir, runstore
from mpwatch.status import Event, EventFields, GpuMark, GpuTick

# What runstore.RunStore.event writes (NaN-bearing lines are compact: no spaces).
_NOTABLE = re.compile(rb'"event": ?"(?!report")')
_REPORT = re.compile(rb'^\{"ts": ?([^,]+), ?"event": ?"report", ?"rank": ?(\d+), ?"step": ?([^,]+), ?"loss": ?([^,]+),'
                     rb'([^\n]*)$', re.M)
_CHILD = b'"child_of"'
_GPU_LINE = re.compile(rb'^\{"ts":(-?[0-9.eE+-]+),"(gpus|gpu|thinned)"', re.M)
WINDOW_START = 192  # bytes a rank per wanted report, at first: a report line is ~150 bytes
WINDOW_MAX = 8 << 20  # past this, the ranks still missing are looked up one by one
TICK_CACHE = 512


@dataclass(frozen=True)
class Report:
    ts: float
    step: int | None
    loss: float | None


def _num(raw: bytes) -> float | None:
    raw = raw.strip().strip(b'"')
    if raw == b"null":
        return None
    try:
        return float(raw)
    except ValueError:
        return None


def _step(raw: bytes) -> int | None:
    v = _num(raw)
    return int(v) if v is not None and v == v and abs(v) != float("inf") else None


class _Mapped:
    """A file mapped read-only (empty bytes for an empty or missing file)."""

    def __init__(self, path: Path):
        self.path = path
        self.data: mmap.mmap | bytes = b""
        self.ino: int | None = None

    def map(self) -> bool:
        """Map the file as it is now; False when it is missing."""
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                self.ino = st.st_ino
                self.data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if st.st_size else b""
        except FileNotFoundError:
            self.data, self.ino = b"", None
            return False
        return True

    def replaced(self) -> bool:
        """The file is another one now (a thinning pass swapped it in) or shorter."""
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return st.st_ino != self.ino or st.st_size < len(self.data)

    def grown(self) -> bool:
        try:
            return os.stat(self.path).st_size > len(self.data)
        except OSError:
            return False


class EventsFile(_Mapped):
    def __init__(self, rd: rundir.RunDir):
        super().__init__(rd.path / runstore.EVENTS)
        self.rd = rd
        self.events: list[EventFields] = []  # notable events, oldest first, with seq
        self.ends: array[int] = array("q")  # where each one's line ends in the file
        self.indexed = 0  # bytes indexed: up to the last complete line
        self.skipped = 0
        self._curves: dict[int, tuple[int, list[Report]]] = {}  # rank -> (bytes scanned, its curve)

    def load(self) -> None:
        self.events, self.ends, self.indexed, self.skipped = [], array("q"), 0, 0
        self._curves.clear()
        if self.map():
            self._index()

    def refresh(self) -> bool:
        """Take in what was appended since; True when anything was."""
        if self.replaced():
            self.load()
            return True
        if not self.grown():
            return False
        self.map()
        return self._index()

    def _index(self) -> bool:
        data = self.data
        end = data.rfind(b"\n") + 1  # a line still being written waits for its end
        if end <= self.indexed:
            self._torn(len(data) > self.indexed)
            return False
        start, before = self.indexed, len(self.events)
        for m in _NOTABLE.finditer(data, start, end):
            s = data.rfind(b"\n", 0, m.start()) + 1
            e = data.find(b"\n", m.end(), end)
            try:
                ev = rundir.as_event(json.loads(data[s:e]))
            except ValueError:
                ev = None
            if ev is None:
                continue  # counted below with the lines that are no event
            rec = cast(EventFields, ev)
            if rec["event"] == Event.THINNED:
                self.rd.note_thinned(rec)
                continue
            rec["seq"] = len(self.events) + 1
            self.events.append(rec)
            self.ends.append(e)
        chunk = data[start:end]  # a copy (an mmap cannot count): freed at once
        lines = chunk.count(b"\n")
        reports = chunk.count(b'"event": "report"') + chunk.count(b'"event":"report"')
        thinned = chunk.count(b'"event": "thinned"')
        del chunk
        self.skipped += max(0, lines - reports - thinned - (len(self.events) - before))
        if self.skipped:
            self.rd.note_skipped(self.skipped)
        self.indexed = end
        self._torn(len(data) > end)
        return True

    def _torn(self, tail: bool) -> None:
        """A last line without its end: being written (a live run), or cut by a kill."""
        if tail and not self.rd.live():
            self.rd.note_torn(runstore.EVENTS)

    # ------------------------------------------------------------- reports ----
    def end_of(self, pos: int) -> int:
        """Where the cursor's event ends in the file (everything indexed past the last one)."""
        return self.ends[pos] if 0 <= pos < len(self.ends) else self.indexed

    def reports_before(self, end: int, ranks: list[int], want: int) -> dict[int, list[Report]]:
        """Each rank's last `want` reports written before byte `end`, oldest first (fewer
        where it has fewer; a rank that never reported is missing)."""
        out: dict[int, list[Report]] = {}
        if not ranks or end <= 0:
            return out
        span = WINDOW_START * want * len(ranks)
        missing = set(ranks)
        while True:
            start = max(0, end - span)
            start = 0 if start == 0 else self.data.find(b"\n", start, end) + 1
            found: dict[int, list[Report]] = {}
            for ts, rank, step, loss, rest in _REPORT.findall(self.data[start:end]):
                if _CHILD in rest:
                    continue
                t = _num(ts)
                if t is not None:
                    found.setdefault(int(rank), []).append(Report(t, _step(step), _num(loss)))
            missing = {r for r in ranks if len(found.get(r, ())) < want}
            out = {r: found[r][-want:] for r in ranks if r in found}
            if not missing or start == 0 or span >= WINDOW_MAX:
                break
            span *= 4
        for r in missing - out.keys():  # silent for long: its last report, searched for alone
            last = self._last_report(r, start)
            if last is not None:
                out[r] = [last]
        return out

    def _last_report(self, rank: int, end: int) -> Report | None:
        needle = b'"event": "report", "rank": %d, "step": ' % rank
        data = self.data
        while end > 0:
            i = data.rfind(needle, 0, end)
            if i < 0:
                return None
            s = data.rfind(b"\n", 0, i) + 1
            e = data.find(b"\n", i)
            m = _REPORT.match(data[s:e if e >= 0 else len(data)])
            if m is not None and _CHILD not in m.group(5) and (t := _num(m.group(1))) is not None:
                return Report(t, _step(m.group(3)), _num(m.group(4)))
            end = s
        return None

    def curve(self, rank: int) -> list[Report]:
        """Every report of the rank's own processes (never a child's), oldest first; cached
        and extended as the file grows."""
        scanned, pts = self._curves.get(rank, (0, []))
        if scanned < self.indexed:
            pat = re.compile(rb'"event": ?"report", ?"rank": ?%d, ?"step": ?([^,]+), ?"loss": ?([^,]+),' % rank)
            data = self.data
            pts = list(pts)
            for m in pat.finditer(data, scanned, self.indexed):
                s = data.rfind(b"\n", 0, m.start()) + 1
                e = data.find(b"\n", m.end(), self.indexed)
                if data.find(_CHILD, m.end(), e) >= 0:
                    continue
                ts = _num(data[s:m.start()].partition(b":")[2].rstrip(b", "))  # {"ts": <here>,
                if ts is not None:
                    pts.append(Report(ts, _step(m.group(1)), _num(m.group(2))))
            self._curves[rank] = (self.indexed, pts)
        return pts


def before(reports: list[Report], t: float) -> int:
    """How many of the reports (oldest first) came at or before t."""
    return bisect.bisect_right([r.ts for r in reports], t)


class GpuFile(_Mapped):
    """gpu.jsonl: ticks by time (parsed when shown), marks, the thinning notes."""

    def __init__(self, rd: rundir.RunDir):
        super().__init__(rd.path / rundir.GPU_JSONL)
        self.rd = rd
        self.ts: array[float] = array("d")
        self.starts: array[int] = array("q")
        self.marks: list[GpuMark] = []
        self.indexed = 0
        self.skipped = 0
        self._ticks: dict[int, GpuTick] = {}

    @property
    def present(self) -> bool:
        return self.ino is not None

    def load(self) -> None:
        self.ts, self.starts, self.marks, self.indexed, self.skipped = array("d"), array("q"), [], 0, 0
        self._ticks.clear()
        if self.map():
            self._index()

    def refresh(self) -> bool:
        if self.replaced() or (self.ino is None and self.path.exists()):
            self.load()
            return True
        if not self.grown():
            return False
        self.map()
        self._index()
        return True

    def _index(self) -> None:
        data = self.data
        end = data.rfind(b"\n") + 1
        lines, read = data[self.indexed:end].count(b"\n"), 0
        for m in _GPU_LINE.finditer(data, self.indexed, end):
            read += 1
            try:
                ts = float(m.group(1))
            except ValueError:
                continue
            kind = m.group(2)
            if kind == b"gpus":
                if self.ts and ts < self.ts[-1]:
                    continue  # out of order (never written so): keep the index sorted
                self.ts.append(ts)
                self.starts.append(m.start())
                continue
            e = data.find(b"\n", m.end(), end)
            try:
                rec = json.loads(data[m.start():e])
            except ValueError:
                continue
            if kind == b"gpu" and isinstance(rec, dict) and isinstance(rec.get("kind"), str):
                self.marks.append(cast(GpuMark, rec))
            elif kind == b"thinned" and isinstance(rec.get("thinned"), dict):
                upto = rec["thinned"].get("to")
                if isinstance(upto, (int, float)):
                    self.rd.note_gpu_thinned(float(upto))
        self.skipped += lines - read
        if self.skipped:
            self.rd.note(f"{rundir.GPU_JSONL}: {self.skipped} unreadable line(s) skipped",
                         (f"{rundir.GPU_JSONL}: ", "unreadable line(s) skipped"))
        if len(data) > end and not self.rd.live():
            self.rd.note_torn(rundir.GPU_JSONL)
        self.indexed = end

    def at(self, t: float) -> int:
        """Index of the last tick at or before t (-1: none)."""
        return bisect.bisect_right(self.ts, t) - 1

    def tick(self, i: int) -> GpuTick | None:
        got = self._ticks.get(i)
        if got is None and 0 <= i < len(self.starts):
            s = self.starts[i]
            e = self.data.find(b"\n", s)
            try:
                raw = json.loads(self.data[s:e if e >= 0 else len(self.data)])
            except ValueError:
                return None
            if not isinstance(raw, dict) or not isinstance(raw.get("gpus"), list) \
                    or not isinstance(raw.get("ranks"), list):
                return None
            if len(self._ticks) >= TICK_CACHE:
                self._ticks.clear()
            got = self._ticks[i] = cast(GpuTick, raw)
        return got
