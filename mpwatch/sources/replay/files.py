"""The replay's view of events.jsonl and gpu.jsonl: indexed once, read where the cursor is.

An hour of 64 ranks is ~230 000 report events (40 MB), and the replay must open in under a
second, so the files are memory-mapped and never parsed whole before the first screen: the
notable events (every event but `report`, a few hundred) are found by a regex the C engine
runs over the file. Reports come from sources.replay.reports: its index of every rank's own reports,
built on a thread once the first screen is drawn, and until then a window of the file around the
cursor (`reports_at`: those timed at or before its moment). The GPU timeline is indexed by time; a
tick is parsed when shown, and a GPU's history reads only its ticks' heads. A child process's report (it
carries `child_of`) is never part of its rank's curve.

Tolerant as rundir.reader: lines that are no event are counted into a note, a torn last line
too, a thinned file says so. `refresh` picks up what a live run appended (or reindexes
after a thinning pass replaced the file). Called from the replay source's callers' threads
under its lock (but `curve`, which may wait for the index); the report index is built,
extended and read under a lock of its own (`_swap`: the poller's status and the detail
view's curve may take in a live run's new lines at once); no textual, no supervisor.
"""
from __future__ import annotations

import bisect
import math
import mmap
import os
import re
import threading
import time
from array import array
from pathlib import Path
from typing import cast

from mpwatch.contract import DevKey, Event, EventFields, GpuMark, GpuTick, as_float, shape
from mpwatch.rundir import eventlines, layout, reader, textfiles
from mpwatch.sources.replay.reports import HELD_S, SLICE, Data, ReportIndex, ReportRow, last_report, window

# A gpu.jsonl line's head (found by its literal start, fast; checked to begin a line).
_GPU_LINE = re.compile(rb'\{"ts":(-?[0-9.eE+-]{1,40}),"(gpus|gpu|thinned)"')
WINDOW_START = 192  # bytes a rank per wanted report: a report line is ~150 bytes
TICK_CACHE = 512
# A tick's GPUs as supervisor.gpu.timeline writes them (compact): what a GPU's history needs.
_GPU_SAMPLE = re.compile(rb'\{"index":([0-9]{1,9}),(?:"gi":([0-9]{1,9}),"ci":([0-9]{1,9}),)?'
                         rb'"mem_used":([0-9]{1,18}|null),"mem_total":(?:[0-9]{1,18}|null),"util_gpu":([0-9]{1,18}|null)')
GpuSample = tuple[DevKey, int | None, int | None]  # the GPU or MIG slice, mem_used, util_gpu
BUILD_WAIT_S = 60.0
STEP_BYTES = 128 * 1024  # the index built a step at a time in the TUI's idle time: ~3 ms each


def _line(data: Data, start: int, end: int) -> object:
    """The JSON value of the line data[start:end], read strictly (rundir.textfiles.loads);
    a line past rundir.textfiles.MAX_LINE is never copied out of the mapping (ValueError)."""
    if end - start > textfiles.MAX_LINE:
        raise ValueError("line too long")
    return textfiles.loads(data[start:end])


class _Mapped:
    """A file mapped read-only (empty bytes for an empty or missing file)."""

    def __init__(self, path: Path, rd: reader.RunDir):
        self.path = path
        self.rd = rd  # where a note says the file could not be read
        self.data: mmap.mmap | bytes = b""
        self.ino: int | None = None

    def map(self) -> bool:
        """Map the file as it is now; False when it is missing."""
        try:
            with textfiles.open_regular(self.path) as f:
                st = os.fstat(f.fileno())
                self.ino = st.st_ino
                self.data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if st.st_size else b""
        except FileNotFoundError:
            self.data, self.ino = b"", None
            return False
        except OSError as exc:  # no regular file (a FIFO, a folder, a link): read as empty, and said
            self.data, self.ino = b"", None
            self.rd.note(f"{self.path.name} is unreadable ({exc.strerror or exc})")
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
    def __init__(self, rd: reader.RunDir):
        super().__init__(rd.path / layout.EVENTS, rd)
        self.rd = rd
        self.events: list[EventFields] = []  # notable events, oldest first, with seq
        self.ends: array[int] = array("q")  # where each one's line ends in the file
        self.indexed = 0  # bytes indexed: up to the last complete line
        self.skipped = 0
        self.reports: ReportIndex | None = None  # every report, once built (index_step)
        self.built = threading.Event()
        self._building = False  # a thread builds it (start_index)
        self._swap = threading.Lock()  # the report index: built, extended, read, swapped
        self._pending = ReportIndex()
        self._target: tuple[Data, int, int] = (b"", 0, 0)  # what it is built from: data, end, notable events

    def load(self) -> None:
        with self._swap:
            self.events, self.ends, self.indexed, self.skipped = [], array("q"), 0, 0
            self.reports, self._pending, self._building = None, ReportIndex(), False
            self.built.clear()
            if self.map():
                self._index(count=False)
            self._target = (self.data, self.indexed, len(self.events))

    def index_step(self, budget: int = STEP_BYTES) -> bool:
        """Build the report index `budget` bytes further (and count the lines that are no
        event on the way); True once it is built. The TUI calls it in its idle time; a
        caller with no screen waits on start_index."""
        with self._swap:
            if self.reports is not None:
                return True
            p = self._pending
            data, end, notable = self._target
            stop = end if end - p.upto <= budget else data.rfind(b"\n", p.upto, p.upto + budget) + 1
            try:
                p.extend(data, stop if stop > p.upto else end)
            except (ValueError, OSError):  # the mapping went away (closed): the window serves
                return True
            if p.upto < end:
                return False
            self.reports = p
            self.built.set()
            self.skipped += max(0, p.lines - p.reports - p.thinned - notable)
            if self.skipped:
                self.rd.note_skipped(self.skipped)
            return True

    def start_index(self) -> None:
        """Build the report index on a thread of its own, unless one already does."""
        with self._swap:
            if self._building or self.reports is not None:
                return
            self._building = True

        def build() -> None:
            while not self.index_step(SLICE):
                time.sleep(0.001)  # the others' turn
        threading.Thread(target=build, name="mpwatch-replay-index", daemon=True).start()

    def refresh(self) -> bool:
        """Take in what was appended since; True when anything was."""
        if self.replaced():
            self.load()
            return True
        if not self.grown():
            return False
        self.map()
        return self._index()

    def _index(self, count: bool = True) -> bool:
        """Index the notable events of the lines not indexed yet. The lines that are no
        event are counted at once (`count`) or by the report index as it is built (a whole
        file's count costs a tenth of a second that the first screen need not wait for)."""
        data = self.data
        end = data.rfind(b"\n") + 1  # a line still being written waits for its end
        if end <= self.indexed:
            self._torn(len(data) > self.indexed)
            return False
        start, before = self.indexed, len(self.events)
        pos = start
        while (m := eventlines.NOT_REPORT.search(data, pos, end)) is not None:
            s = data.rfind(b"\n", 0, m.start()) + 1
            e = data.find(b"\n", m.end(), end)
            e = end - 1 if e < 0 else e
            pos = e + 1  # a line is looked at once, however many "event"s its strings hold
            try:
                ev = reader.as_event(_line(data, s, e))
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
        if count:  # else the index counts them as it is built (index_step)
            self._count(data, start, end, len(self.events) - before)
        self.indexed = end
        self._torn(len(data) > end)
        return True

    def _count(self, data: Data, start: int, end: int, notable: int) -> None:
        """Lines that are no event (garbage, a torn write in the middle): into a note."""
        chunk = data[start:end]  # a copy (an mmap cannot count): freed at once
        lines = chunk.count(b"\n")
        reports = chunk.count(b'"event": "report"') + chunk.count(b'"event":"report"')
        thinned = chunk.count(b'"event": "thinned"')
        del chunk
        self.skipped += max(0, lines - reports - thinned - notable)
        if self.skipped:
            self.rd.note_skipped(self.skipped)

    def _torn(self, tail: bool) -> None:
        """A last line without its end: being written (a live run), or cut by a kill."""
        if tail and not self.rd.live():
            self.rd.note_torn(layout.EVENTS)

    # ------------------------------------------------------------- reports ----
    def held_end(self, pos: int, t: float) -> int:
        """Where in the file no report of the moment t (the cursor's event's, pos) can be
        any more: the end of the first event after it timed HELD_S past t (the file's end
        where none is)."""
        for j in range(max(pos, 0), len(self.events)):
            if self.events[j]["ts"] > t + HELD_S:
                return self.ends[j]
        return self.indexed

    def _index_now(self) -> ReportIndex | None:
        """The report index (None until built) with a live run's appended lines taken in;
        the caller holds `_swap` (one thread parses new lines, once) and reads it under it."""
        idx = self.reports
        if idx is not None and idx.upto < self.indexed:  # a live run's appended lines
            idx.extend(self.data, self.indexed)
        return idx

    def reports_at(self, pos: int, t: float, ranks: list[int], want: int) -> dict[int, list[ReportRow]]:
        """Each rank's last `want` reports timed at or before t (the moment of the cursor's
        event, pos), oldest first, wherever the file has them: from the index or, until it
        is built, a window of the file up to where no report of t can be any more (held_end);
        a rank that never reported is missing."""
        with self._swap:
            idx = self._index_now()
            if idx is not None:
                return {r: got for r in ranks
                        if (s := idx.series.get(r)) is not None and (got := s.last(t, want))}
        span = WINDOW_START * want * len(ranks)
        at = self.ends[pos] if 0 <= pos < len(self.ends) else self.indexed  # the cursor's event's line
        end = min(self.held_end(pos, t), at + span)
        if not ranks or end <= 0:
            return {}
        found, start = window(self.data, end, ranks, want, 2 * span, t)
        for r in ranks:
            if r not in found and (last := last_report(self.data, r, start, t)) is not None:
                found[r] = [last]  # silent for longer than the window: its last report alone
        return found

    def curve(self, rank: int, t: float) -> list[ReportRow]:
        """Every report of the rank's own processes at or before t, oldest first (waits for
        the index: call without the source's lock)."""
        self.start_index()
        self.built.wait(BUILD_WAIT_S)
        with self._swap:
            idx = self._index_now()
            s = idx.series.get(rank) if idx is not None else None
            return [] if s is None else [s.report(i) for i in range(s.upto(t))]


class GpuFile(_Mapped):
    """gpu.jsonl: ticks by time (parsed when shown), marks, the thinning notes."""

    def __init__(self, rd: reader.RunDir):
        super().__init__(rd.path / layout.GPU_JSONL, rd)
        self.rd = rd
        self.ts: array[float] = array("d")
        self.starts: array[int] = array("q")
        self.marks: list[GpuMark] = []
        self.indexed = 0
        self.skipped = 0
        self._deferred: tuple[Data, int, int, int] | None = None
        self._ticks: dict[int, GpuTick] = {}
        self._samples: dict[int, list[GpuSample]] = {}

    @property
    def present(self) -> bool:
        return self.ino is not None

    def load(self) -> None:
        self.ts, self.starts, self.marks, self.indexed, self.skipped = array("d"), array("q"), [], 0, 0
        self._ticks.clear()
        self._samples.clear()
        if self.map():
            self._index(count=False)

    def refresh(self) -> bool:
        if self.replaced() or (self.ino is None and self.path.exists()):
            self.load()
            return True
        if not self.grown():
            return False
        self.map()
        self._index()
        return True

    def _index(self, count: bool = True) -> None:
        """Index ticks and read marks and notes; lines that are none of them are counted at
        once (`count`) or by count_deferred, as EventsFile's."""
        data = self.data
        end = data.rfind(b"\n") + 1
        start, read = self.indexed, 0
        for m in _GPU_LINE.finditer(data, self.indexed, end):
            if m.start() > 0 and data[m.start() - 1] != 0x0A:  # not at a line's start
                continue
            read += 1
            try:
                ts = float(m.group(1))
            except ValueError:
                continue
            if not math.isfinite(ts):
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
                rec = _line(data, m.start(), e)
            except ValueError:
                continue
            if not isinstance(rec, dict) or as_float(rec.get("ts")) is None:
                continue
            if kind == b"gpu" and shape.problem(rec, GpuMark) is None:
                self.marks.append(cast(GpuMark, rec))
            elif kind == b"thinned" and isinstance(rec.get("thinned"), dict) \
                    and (upto := as_float(rec["thinned"].get("to"))) is not None:
                self.rd.note_gpu_thinned(upto)
        if count:
            self._count(data, start, end, read)
        else:
            self._deferred = (data, start, end, read)
        if len(data) > end and not self.rd.live():
            self.rd.note_torn(layout.GPU_JSONL)
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
                raw = _line(self.data, s, e if e >= 0 else len(self.data))
            except ValueError:
                return None
            if shape.problem(raw, GpuTick) is not None:  # a damaged or crafted tick: none, never a KeyError
                return None
            if len(self._ticks) >= TICK_CACHE:
                self._ticks.clear()
            got = self._ticks[i] = cast(GpuTick, raw)
        return got

    def samples(self, i: int) -> list[GpuSample]:
        """Each GPU's memory and utilization in tick i, read without parsing the whole tick
        (a GPU's two-minute history reads 120 of them); cached."""
        got = self._samples.get(i)
        if got is None:
            if not 0 <= i < len(self.starts):
                return []
            s = self.starts[i]
            nl = self.data.find(b"\n", s)
            nl = len(self.data) if nl < 0 else nl
            e = self.data.find(b'"ranks":', s, nl)  # on its own line: never a look through the file
            line = self.data[s:e if e >= 0 else nl] if nl - s <= textfiles.MAX_LINE else b""

            def opt(raw: bytes) -> int | None:
                return None if raw == b"null" else int(raw)

            got = [((int(g), opt(gi) if gi else None, opt(ci) if ci else None), opt(m), opt(u))
                   for g, gi, ci, m, u in _GPU_SAMPLE.findall(line)]
            if len(self._samples) >= TICK_CACHE * 8:
                self._samples.clear()
            self._samples[i] = got
        return got

    def count_deferred(self) -> None:
        got, self._deferred = self._deferred, None
        if got is not None:
            self._count(*got)

    def _count(self, data: Data, start: int, end: int, read: int) -> None:
        self.skipped += data[start:end].count(b"\n") - read
        if self.skipped:
            self.rd.note(f"{layout.GPU_JSONL}: {self.skipped} unreadable line(s) skipped",
                         (f"{layout.GPU_JSONL}: ", "unreadable line(s) skipped"))
