"""The data poller: a thread that reads the control socket and posts immutable snapshots.

One request pair (status, then events since the last seen) per tick, at most 4 ticks a
second; the next tick is scheduled only after the app has applied the last snapshot
(Dolphie's rule: collections never overlap or pile up). It uses post_message, which is
thread-safe and never blocks this thread on the UI. When the supervisor goes away the
poller asks the source how the run ended (Source.ended: final.json) and posts RunGone instead.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from textual.message import Message

from mpwatch.contract import EventFields, Status
from mpwatch.sources.local import ClientError
from mpwatch.sources.source import Source

INTERVAL_S = 0.25  # at most 4 refreshes a second
# The share of one core the TUI may spend keeping up. When a refresh costs more (a wide run
# on a slow machine), the next poll waits longer, down to one refresh per MAX_INTERVAL_S:
# the run and its training jobs matter more than the TUI's frame rate. Keys are handled
# between refreshes either way.
CPU_BUDGET = 0.10
MAX_INTERVAL_S = 1.0
# Loss points per worker a snapshot carries: the widest sparkline. At 256 workers the full
# tail would be most of each snapshot's bytes, decoded 4 times a second.
TAIL_POINTS = 12


class Target(Protocol):
    """Where snapshots go: the App (post_message is thread-safe)."""

    def post_message(self, message: Message) -> bool: ...


@dataclass(frozen=True)
class Snapshot:
    status: Status  # the supervisor's snapshot (treated as read-only)
    events: tuple[EventFields, ...]  # notable events since the previous snapshot, with seq
    seq: int
    taken: float  # monotonic time of the request


@dataclass
class SnapshotReady(Message):
    snapshot: Snapshot


@dataclass
class PollFailed(Message):
    """A poll failed in an unexpected way (a bug, a malformed reply); polling goes on."""

    why: str


@dataclass
class RunGone(Message):
    """The control socket is gone: final is final.json (None when missing), why says so."""

    final: Status | None
    info: dict[str, Any] | None
    why: str


class Poller:
    def __init__(self, source: Source | None, target: Target | None, interval: float = INTERVAL_S,
                 since: int = 0):
        self.source = source
        self.target = target  # anything with post_message (the App)
        self.interval = interval  # the shortest; `current` is stretched to fit CPU_BUDGET
        self.current = interval
        self.since = since
        self.applied = threading.Event()
        self.applied.set()
        self._stop = threading.Event()
        self._wake = threading.Event()  # poll now: an action changed the run
        self._thread = threading.Thread(target=self._loop, name="mpwatch-tui-poller", daemon=True)
        self.polls = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self.applied.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def kick(self) -> None:
        """Poll at once instead of at the next interval (after an action, so the screen shows
        its effect without waiting out a stretched interval)."""
        self._wake.set()

    def _pace(self, cpu: float, wall: float) -> None:
        """The next interval from the last cycle's CPU share (of the whole TUI process)."""
        if wall <= 0:
            return
        want = self.current * (cpu / wall) / CPU_BUDGET
        # Halfway there each cycle: one slow frame (a resize, the detail view) is not a trend.
        self.current = min(max((self.current + want) / 2, self.interval), max(MAX_INTERVAL_S, self.interval))

    def _loop(self) -> None:
        source, target = self.source, self.target
        assert source is not None and target is not None  # a poller that runs has both
        c0: float | None = None  # paced from the second cycle: the first one pays for the app's start
        w0 = 0.0
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                status = source.status(tail=TAIL_POINTS)
                ev = source.events(self.since)
            except ClientError as exc:
                self._gone(str(exc))
                return
            except Exception as exc:  # noqa: BLE001 - the screen must say so, never freeze silently
                target.post_message(PollFailed(f"{type(exc).__name__}: {exc}"))
                self._stop.wait(max(self.interval, 1.0))
                continue
            self.polls += 1
            events = tuple(ev["events"])
            self.since = max(self.since, ev["seq"])
            self.applied.clear()
            target.post_message(SnapshotReady(Snapshot(status, events, self.since, t0)))
            # Wait for the app to apply it, then keep to the interval.
            self.applied.wait(10.0)
            rest = self.current - (time.monotonic() - t0)
            if rest > 0:
                self._wake.wait(rest)
            self._wake.clear()
            c1, w1 = time.process_time(), time.monotonic()
            if c0 is not None:
                self._pace(c1 - c0, w1 - w0)
            c0, w0 = c1, w1

    def _gone(self, why: str) -> None:
        assert self.source is not None  # a poller that runs has one
        final, info = self.source.ended(self._stop)
        if not self._stop.is_set() and self.target is not None:
            # final.json is the supervisor's last status, written by the same snapshot builder.
            self.target.post_message(RunGone(final, info, why))
