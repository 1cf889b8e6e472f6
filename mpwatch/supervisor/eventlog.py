"""The run's event log: every event goes to events.jsonl (rundir.writer), and every event but
`report` also gets a sequence number, joins the recent ones clients poll through the
control socket (`events`), and becomes a headless status line. Run alerts are kept here.

Any thread may record; `_lock` guards the sequence, the recent events and the alerts and
is never held while writing.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Protocol

from mpwatch.contract.status import Event, RunAlert
from mpwatch.rundir import writer

RECENT_EVENTS = 1000  # notable events kept for clients
ALERTS_KEPT = 50

EventDict = dict[str, Any]  # an EventRecord (contract.status) and the event's own fields


class StatusLines(Protocol):
    """Where --headless prints (supervisor.headless's Reporter)."""

    def event(self, rec: EventDict) -> None: ...


class EventLog:
    def __init__(self, store: writer.RunStore, lines: StatusLines | None = None):
        self.store = store
        self.lines = lines
        self._lock = threading.Lock()
        self.seq = 0
        self._recent: deque[EventDict] = deque(maxlen=RECENT_EVENTS)
        self._alerts: list[RunAlert] = []

    def event(self, name: Event, rank: int | None = None, **fields: Any) -> EventDict:
        rec = self.store.event(name.value, rank, **fields)
        if name is Event.REPORT:  # a point of a curve, not news
            return rec
        with self._lock:
            self.seq += 1
            rec = dict(rec, seq=self.seq)
            self._recent.append(rec)
        if self.lines is not None:
            self.lines.event(rec)
        return rec

    def report(self, rank: int, ts: float, fields: dict[str, Any]) -> None:
        """A report event (fields: rundir.eventlines.report_fields): a point of a curve, not news."""
        self.store.report(rank, ts, fields)

    def alert(self, kind: str, message: str, rank: int | None = None, *, culprits: list[int] | None = None,
              waiting: list[int] | None = None, processes: list[dict[str, Any]] | None = None) -> None:
        """A run alert (disk, hang, unkillable, internal): kept for the status, and an event."""
        rec = RunAlert(ts=time.time(), kind=kind, message=message, rank=rank)
        extra: dict[str, Any] = {}
        if culprits is not None:
            rec["culprits"] = extra["culprits"] = culprits
        if waiting is not None:
            rec["waiting"] = extra["waiting"] = waiting
        if processes is not None:
            rec["processes"] = extra["processes"] = processes
        with self._lock:
            self._alerts.append(rec)
            del self._alerts[:-ALERTS_KEPT]
        self.event(Event.ALERT, rank, kind=kind, message=message, **extra)

    def alerts(self) -> list[RunAlert]:
        with self._lock:
            return list(self._alerts)

    def has_alert(self, kind: str) -> bool:
        with self._lock:
            return any(a["kind"] == kind for a in self._alerts)

    def since(self, seq: int) -> tuple[list[EventDict], int]:
        """Events after `seq`, and the latest sequence number."""
        with self._lock:
            return [e for e in self._recent if e["seq"] > seq], self.seq
