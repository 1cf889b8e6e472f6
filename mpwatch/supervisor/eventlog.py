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
from typing import Any, Protocol, cast

from mpwatch.contract import Event, RunAlert, RunAlertKind, SlowdownInfo, StragglerInfo
from mpwatch.rundir import writer
from mpwatch.supervisor import boundary

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
        """Record an event; never raises (a failure is the event log's, supervisor.boundary's)."""
        rec: EventDict = {"ts": fields.get("ts", time.time()), "event": name.value, "rank": rank}
        with boundary.room(boundary.EVENTLOG):
            rec = self._event(name, rank, fields)
        return rec

    def _event(self, name: Event, rank: int | None, fields: dict[str, Any]) -> EventDict:
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
        with boundary.room(boundary.EVENTLOG):
            self.store.report(rank, ts, fields)

    def alert(self, kind: RunAlertKind, message: str, rank: int | None = None, *,
              culprits: list[int] | None = None, waiting: list[int] | None = None,
              processes: list[dict[str, Any]] | None = None, key: str | None = None,
              straggler: StragglerInfo | None = None, slowdown: SlowdownInfo | None = None) -> None:
        """A run alert (disk, hang, straggler, slowdown, unkillable, internal): kept for the status, and an
        event.
        An alert with the `key` of a standing one replaces it where it stands (a finding that
        learnt more: one finding, updated), and its event says `update`."""
        given = {"culprits": culprits, "waiting": waiting, "processes": processes, "key": key,
                 "straggler": straggler, "slowdown": slowdown}
        # the alert's optional keys (typed in the signature), which its event carries too
        extra: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        rec = cast(RunAlert, {"ts": time.time(), "kind": kind, "message": message, "rank": rank, **extra})
        with self._lock:
            at = next((i for i, a in enumerate(self._alerts)
                       if key is not None and a.get("key") == key), None)
            if at is None:
                self._alerts.append(rec)
                del self._alerts[:-ALERTS_KEPT]
            else:
                rec["ts"] = self._alerts[at]["ts"]  # the finding stands since it was first made
                self._alerts[at] = rec
                extra["update"] = True
        self.event(Event.ALERT, rank, kind=kind, message=message, **extra)

    def refresh(self, key: str, message: str, straggler: StragglerInfo | None = None,
                slowdown: SlowdownInfo | None = None) -> None:
        """A standing keyed alert's words and numbers now, with no event: a finding whose numbers
        move every second (what a straggler has cost so far) is current in the status, and its
        events say it when it changes."""
        with self._lock:
            for a in self._alerts:
                if a.get("key") == key:
                    a["message"] = message
                    if straggler is not None:
                        a["straggler"] = straggler
                    if slowdown is not None:
                        a["slowdown"] = slowdown

    def end_alert(self, key: str) -> None:
        """The condition of a keyed alert is over (a hang whose ranks report again): it leaves
        the status, and an event says so (`ended`), so a replay drops it at that moment too."""
        with self._lock:
            gone = [a for a in self._alerts if a.get("key") == key]
            self._alerts = [a for a in self._alerts if a.get("key") != key]
        for a in gone:
            last = {k: a[k] for k in ("straggler", "slowdown") if k in a}  # its numbers in the end
            self.event(Event.ALERT, a["rank"], kind=a["kind"], message=a["message"], key=key, ended=True,
                       **last)

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
