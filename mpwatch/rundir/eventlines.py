"""An events.jsonl line as rundir.writer spells it, and the rule that tells a rank's own
report from a child process's: written here once, for the writer (the key order) and for
every reader, parsed (rundir.reader, rundir.postmortem) or not (rundir.thinning and
sources.replay scan the bytes, so their patterns follow the key order fixed here).

Every line: {"ts", "event", "rank", then the event's own fields}. A report's own fields are
step, loss, metrics, n, dropped, and phases when its process times phases (its seconds in each
since it started: contract.pace's samples); a report a process the worker started sent (a DataLoader
worker, a spawned trainer) adds pid and `child_of` (the worker's pid) last: its own curve,
never part of its rank's. A line is written with json's default separators (", ", ": "),
or compact when it holds a NaN (contract.protocol.encode_lossy), so the patterns take both.
Pure; no I/O.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from mpwatch.contract import Event

CHILD_OF = "child_of"


def record(event: str, rank: int | None, ts: float, fields: Mapping[str, Any]) -> dict[str, Any]:
    """An event's record in the writer's key order."""
    rec: dict[str, Any] = {"ts": round(ts, 6), "event": event, "rank": rank}
    rec.update(fields)
    return rec


def report_fields(step: int | None, loss: float | None, metrics: Mapping[str, Any], n: int, dropped: int,
                  child: tuple[int, int | None] | None = None,
                  phases: Mapping[str, float] | None = None) -> dict[str, Any]:
    """A report's own fields in the order the patterns below expect; child: (its pid, the
    worker's pid) for a report a process the worker started sent; phases: the process's phase
    totals then (to the tenth of a millisecond)."""
    out: dict[str, Any] = {"step": step, "loss": loss, "metrics": dict(metrics), "n": n, "dropped": dropped}
    if phases:
        out["phases"] = {k: round(v, 4) for k, v in phases.items()}
    if child is not None:
        out["pid"], out[CHILD_OF] = child
    return out


def own_report(rec: Mapping[str, object]) -> bool:
    """A parsed record is a report of the rank's own process (not of a child it started)."""
    return rec.get("event") == Event.REPORT and CHILD_OF not in rec


# ---------------------------------------------------------- lines read unparsed ----
# Each part of a pattern is bounded and stays on its line (a crafted file's line without a comma
# never sends one look through the lines below it), and a number captured is ASCII digits an
# int() reads at once (contract.numtext's 18).
# Any line's head: ts, event, rank.
HEAD = re.compile(rb'^\{"ts":\s?(-?[0-9.eE+-]{1,40}),\s?"event":\s?"([a-z_]{1,64})",\s?"rank":\s?'
                  rb'(-?[0-9]{1,18}|null)')
# A child's report: its pid (the series it belongs to) just before child_of.
CHILD = re.compile(rb'"pid":\s?([0-9]{1,18}),\s?"child_of":')
# A rank's own report: ts, rank, step, loss (a line with child_of further on is a child's).
OWN_REPORT = re.compile(rb'^\{"ts": ?([^,\n]{1,64}), ?"event": ?"report", ?"rank": ?([0-9]{1,18}), '
                        rb'?"step": ?([^,\n]{1,64}), ?"loss": ?([^,\n]{1,64}),(?![^\n]*"child_of")', re.M)
# Where a line's event is anything but a report.
NOT_REPORT = re.compile(rb'"event": ?"(?!report")')


def report_needles(rank: int) -> tuple[bytes, bytes]:
    """What a report line of `rank` holds, in both spellings (spaced, compact)."""
    return (b'"event": "report", "rank": %d, "step": ' % rank, b'"event":"report","rank":%d,"step":' % rank)
