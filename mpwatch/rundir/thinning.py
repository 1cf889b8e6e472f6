"""Keeping events.jsonl bounded: what a thinning pass keeps, and how the file is rewritten.

A week-long run must not fill a disk, and report events are most of the volume (one a
second per rank, supervisor.workers.ledger). So past the cap the older half of the report
events is thinned to every other one of each series (a rank's own reports, and each child
process's apart), again until the file fits under TARGET of the cap. Never thinned: every
other event (starts, exits, stalls, dumps, alerts...), and the report just before each of a
rank's notable events (its last step before a stall or a crash). A `thinned` event at the
end says which wall times were thinned and how many report events went, so a reader never
mistakes a coarser curve for the whole one (rundir.reader turns it into a note).

The pass streams the file twice (an index of line kinds, then the copy): its memory is a
few bytes a line, not the file. rundir.writer.RunStore runs it on a thread of its own, hands
it the file it writes to, and swaps that in under its lock. Pure file work: no clock but the
note's time.
"""
from __future__ import annotations

import json
import time
from array import array
from collections.abc import Callable, Iterator
from typing import BinaryIO

from mpwatch.contract import Event
from mpwatch.rundir import eventlines, layout

MIN_CAP = 16 * 1024
TARGET = 0.75  # a pass leaves the file under this share of the cap
MIN_REPORTS = 8  # a series this short is left alone
NOTABLE = -1  # the kind of a line that is no report (always kept)


def cap_bytes(mb: float) -> int:
    """The cap (settings.Settings.events_mb, MB) in bytes, at least MIN_CAP."""
    return max(int(mb * (1 << 20)), MIN_CAP)


class _Index:
    """One entry a line of the file: its series (NOTABLE for any other event), size, time."""

    def __init__(self) -> None:
        self.kind = array("i")
        self.size = array("q")
        self.ts = array("d")
        self.protected: set[int] = set()
        self._series: dict[tuple[int, int], int] = {}  # (rank, child pid or 0) -> series id

    def add(self, line: bytes, last_report: dict[int, int]) -> None:
        i = len(self.kind)
        m = eventlines.HEAD.match(line)
        rank = int(m.group(3)) if m and m.group(3) != b"null" else None
        if m and m.group(2) == b"report" and rank is not None:
            child = eventlines.CHILD.search(line)
            key = (rank, int(child.group(1)) if child else 0)
            self.kind.append(self._series.setdefault(key, len(self._series)))
            if child is None:
                last_report[rank] = i
        else:
            self.kind.append(NOTABLE)
            if rank is not None and rank in last_report:  # the step a rank stopped at stays
                self.protected.add(last_report.pop(rank))
        self.size.append(len(line))
        try:
            self.ts.append(float(m.group(1)) if m else 0.0)
        except ValueError:
            self.ts.append(0.0)


def _plan(idx: _Index, target: int) -> tuple[bytearray, float, float, int, int]:
    """Which lines stay (1 in `keep`), the wall times thinned, reports before and after."""
    keep = bytearray(b"\x01") * len(idx.kind)
    reports = [i for i, k in enumerate(idx.kind) if k != NOTABLE]
    before = len(reports)
    total = sum(idx.size)
    t_from = idx.ts[reports[0]] if reports else 0.0
    t_to = t_from
    while total > target and len(reports) >= MIN_REPORTS:
        older = reports[: len(reports) // 2]
        seen: dict[int, int] = {}
        dropped = 0
        for i in older:
            n = seen[idx.kind[i]] = seen.get(idx.kind[i], 0) + 1
            if n % 2 == 0 and i not in idx.protected:
                keep[i] = 0
                total -= idx.size[i]
                dropped += 1
        if not dropped:
            break
        t_to = max(t_to, idx.ts[older[-1]])
        reports = [i for i in reports if keep[i]]
    return keep, t_from, t_to, before, len(reports)


def thin_file(open_events: Callable[[], BinaryIO], w: BinaryIO, cut: int, target: int) -> None:
    """Write to `w` the first `cut` bytes of events.jsonl (read twice, each time through
    open_events) thinned to about `target` bytes, then a `thinned` event saying what went."""
    idx = _Index()
    last_report: dict[int, int] = {}
    with open_events() as f:
        for line in _lines(f, cut):
            idx.add(line, last_report)
    keep, t_from, t_to, before, after = _plan(idx, target)
    with open_events() as f:
        for i, line in enumerate(_lines(f, cut)):
            if i >= len(keep) or keep[i]:
                w.write(line)
        if after < before:
            note = eventlines.record(Event.THINNED.value, None, time.time(), {
                "file": layout.EVENTS, "thinned_from": t_from, "thinned_to": t_to, "reports_before": before,
                "reports_after": after})
            w.write(json.dumps(note).encode() + b"\n")


def _lines(f: BinaryIO, cut: int) -> Iterator[bytes]:
    """The file's lines up to byte `cut`."""
    left = cut
    for line in f:
        if left <= 0:
            return
        if len(line) > left:
            yield line[:left]
            return
        left -= len(line)
        yield line


def append_rest(events: BinaryIO, w: BinaryIO, cut: int) -> None:
    """Append to `w` what was written to events.jsonl (opened, closed here) after byte `cut`
    (under the store's lock)."""
    with events as f:
        f.seek(cut)
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            w.write(chunk)
