"""The time cursor of a replay: which moment of the run the screen shows.

A moment is one notable event (every event but `report`), or the end: the final status
when the run left one (else the last thing its files say). Steps go event by event; jumps
go to the next or previous moment worth stopping at: a failure, a stall, a restart or an
alert (`MARKED`). Pure over the list of events; sources.replay.source owns one and locks around it.
"""
from __future__ import annotations

from collections.abc import Sequence

from mpwatch.contract import Event, EventFields, State
from mpwatch.text import eventtext

FAILURE, STALL, RESTART, ALERT = "failure", "stall", "restart", "alert"
# What the jump keys stop at and the strip shows, most telling first.
MARKED = (FAILURE, STALL, RESTART, ALERT)


def kind_of(e: EventFields) -> str | None:
    """The mark an event gets on the timeline strip, None for the plain ones."""
    name = e["event"]
    if name == Event.WORKER_EXITED and eventtext.exit_state(e) == State.FAILED:
        return FAILURE
    if name == Event.STALLED:
        return STALL
    if name == Event.RESTARTED:
        return RESTART
    if name in (Event.ALERT, Event.GPU_ALERT):
        return ALERT
    return None


class Cursor:
    """A position in [0, n]: events[pos], or n for the end."""

    def __init__(self, events: Sequence[EventFields]):
        self.events = events
        self.pos = len(events)

    @property
    def end(self) -> int:
        return len(self.events)

    @property
    def at_end(self) -> bool:
        return self.pos >= self.end

    def follow(self, was_at_end: bool) -> None:
        """After the list grew (a live run): the end stays the end, any other moment stays put."""
        if was_at_end:
            self.pos = self.end

    def step(self, n: int) -> bool:
        """n events on (back when negative); False when already at that edge."""
        new = min(max(self.pos + n, 0), self.end)
        moved = new != self.pos
        self.pos = new
        return moved

    def jump(self, direction: int, kinds: Sequence[str] = MARKED) -> bool:
        """To the next (1) or previous (-1) event of one of `kinds`; False when there is none."""
        i = self.pos + direction
        while 0 <= i < self.end:
            if kind_of(self.events[i]) in kinds:
                self.pos = i
                return True
            i += direction
        return False

    def to_end(self) -> bool:
        moved = not self.at_end
        self.pos = self.end
        return moved

    def to_start(self) -> bool:
        moved = self.pos != 0
        self.pos = 0
        return moved

    def to_seq(self, seq: int) -> bool:
        """To the event with this seq (events carry seq = position + 1)."""
        if 1 <= seq <= self.end:
            moved = self.pos != seq - 1
            self.pos = seq - 1
            return moved
        return False

    def current(self) -> EventFields | None:
        return None if self.at_end else self.events[self.pos]
