"""Report events of events.jsonl, read for the replay: each rank's own reports (never a
child process's: rundir.eventlines, whose patterns find them unparsed) as columns of time,
step and loss.

Two ways to them, the same answers:
- ReportIndex: every report, parsed once (a regex over the mapped file, a slice at a time:
  the TUI builds it in its idle time once the first screen is drawn, 128 KiB a tick, so a
  key never waits behind it; an hour of 64 ranks is a few seconds of ticks), one Series a
  rank: a moment's last reports are a bisection away.
- until it is built, `window`: the reports of the last stretch of the file before the
  cursor, and `last_report` for a rank silent longer than that.
A moment's reports are those timed at or before it, wherever the file has them: the screen at a
moment is the run as it was then (issue 40: at "+3.0 s event 4/7" rank 0 read step 3, though its
report timed +2.9 s said step 13; the supervisor holds a rank's latest report back up to a second
before it writes it, supervisor.workers.ledger, so that report's line came after the event's). Both
ways cut at the same time; the window reads on past the cursor's event for as long as a report
of its moment may still come (HELD_S). A loss of NaN reads as none reported, both ways.
Pure file reading; no lock of its own (the caller's).
"""
from __future__ import annotations

import bisect
import math
import mmap
import re
from array import array
from dataclasses import dataclass, field

from mpwatch.rundir.eventlines import OWN_REPORT, report_needles

Data = mmap.mmap | bytes

SLICE = 1 << 19
NAN = float("nan")
HELD_S = 2.0  # the latest a report timed at a moment is written after it (the ledger holds it up to 1 s)


@dataclass(frozen=True)
class ReportRow:
    """One point of a rank's own curve as the replay reads it back (the wire's checked entry
    is supervisor.workers.batch_check.Report)."""

    ts: float
    step: int | None
    loss: float | None


def num(raw: bytes) -> float | None:
    """A number as written (null, "nan" and what is no number: None)."""
    raw = raw.strip().strip(b'"')
    if raw == b"null":
        return None
    try:
        v = float(raw)
    except ValueError:
        return None
    return v if v == v else None


def step_of(raw: bytes) -> int | None:
    v = num(raw)
    return int(v) if v is not None and v == v and abs(v) != float("inf") else None


def _floats(col: tuple[bytes, ...]) -> array[float]:
    """A column of numbers (null and "nan" as NaN)."""
    try:
        return array("d", map(float, col))
    except ValueError:
        return array("d", (NAN if (v := num(x)) is None else v for x in col))


@dataclass
class Series:
    """One rank's reports in the file's order (a step or loss of NaN: none reported), with
    where each one's line starts in the file."""

    ts: array[float] = field(default_factory=lambda: array("d"))
    step: array[float] = field(default_factory=lambda: array("d"))
    loss: array[float] = field(default_factory=lambda: array("d"))
    at: array[int] = field(default_factory=lambda: array("q"))

    def report(self, i: int) -> ReportRow:
        s, v = self.step[i], self.loss[i]
        return ReportRow(self.ts[i], int(s) if s == s else None, v if v == v else None)

    def upto(self, t: float) -> int:
        """How many came at or before t (the curve's cut)."""
        return bisect.bisect_right(self.ts, t)

    def last(self, t: float, want: int) -> list[ReportRow]:
        """The last `want` of those timed at or before t (a rank's reports come in its time's
        order: one process's clock, one at a time)."""
        n = self.upto(t)
        return [self.report(i) for i in range(max(0, n - want), n)]


class ReportIndex:
    def __init__(self) -> None:
        self.series: dict[int, Series] = {}
        self.upto = 0  # bytes of the file parsed
        # what the parsed lines were, for the note on lines that are no event
        self.lines = 0
        self.reports = 0  # a child's too
        self.thinned = 0

    def extend(self, data: Data, end: int) -> None:
        """Parse the complete lines between what was parsed and `end`, a slice at a time."""
        pos = self.upto
        while pos < end:
            cut = end if end - pos <= SLICE else data.rfind(b"\n", pos, pos + SLICE) + 1
            if cut <= pos:
                cut = end
            chunk, base = data[pos:cut], pos
            pos = cut
            self.lines += chunk.count(b"\n")
            self.reports += chunk.count(b'"event": "report"') + chunk.count(b'"event":"report"')
            self.thinned += chunk.count(b'"event": "thinned"')
            found = list(OWN_REPORT.finditer(chunk))
            if not found:
                continue
            ts, ranks, steps, losses = zip(*map(re.Match.groups, found), strict=True)
            tsa, sta, loa = _floats(ts), _floats(steps), _floats(losses)
            at = [base + m.start() for m in found]
            rows: dict[int, list[int]] = {}
            for i, r in enumerate(map(int, ranks)):
                rows.setdefault(r, []).append(i)
            for r, idx in rows.items():
                s = self.series.setdefault(r, Series())
                s.ts.extend(map(tsa.__getitem__, idx))
                s.step.extend(map(sta.__getitem__, idx))
                s.loss.extend(map(loa.__getitem__, idx))
                s.at.extend(map(at.__getitem__, idx))
        self.upto = max(self.upto, end)


def window(data: Data, end: int, ranks: list[int], want: int, span: int,
           at: float = math.inf) -> tuple[dict[int, list[ReportRow]], int]:
    """Each rank's last `want` reports timed at or before `at` among those of the `span`
    bytes before `end`, and where that stretch starts."""
    start = max(0, end - span)
    start = 0 if start == 0 else data.find(b"\n", start, end) + 1
    found: dict[int, list[ReportRow]] = {}
    wanted = set(ranks)
    for ts, rank, step, loss in OWN_REPORT.findall(data[start:end]):
        r = int(rank)
        t = num(ts)
        if r in wanted and t is not None and t <= at:
            found.setdefault(r, []).append(ReportRow(t, step_of(step), num(loss)))
    return {r: v[-want:] for r, v in found.items()}, start


def last_report(data: Data, rank: int, end: int, at: float = math.inf) -> ReportRow | None:
    """The rank's last own report before byte `end` timed at or before `at`, searched for
    backwards in both of the writer's spellings (a line with a NaN is compact), the later hit
    first."""
    needles = report_needles(rank)
    while end > 0:
        i = max(data.rfind(n, 0, end) for n in needles)
        if i < 0:
            return None
        s = data.rfind(b"\n", 0, i) + 1
        e = data.find(b"\n", i)
        m = OWN_REPORT.match(data[s:e if e >= 0 else len(data)])
        if m is not None and (t := num(m.group(1))) is not None and t <= at:
            return ReportRow(t, step_of(m.group(3)), num(m.group(4)))
        end = s
    return None
