"""The supervisor's one fault boundary: the supervisor outlives what it watches.

Two kinds of fault, one mechanism:

- a room fails: an exception out of a room's entry point (a turn of the serve loop, a thread's
  turn, a callback of the channel hub). `room(NAME)` is the guard every entry point runs in: the
  exception goes to supervisor.log with its traceback and the room's name (supervisor.errors), is
  said once as a `room_failed` event (the room's first fault of the run), and the run goes on;
- a rank's input trips the supervisor: a frame, a hello, a line of its stderr, a file of its
  folder that a handler or a parser could not take. `rank_input(RANK, WHAT)` guards each place
  where one is handled: the traceback goes to supervisor.log, and the rank gets a note, counted
  with why (its status's `bad_inputs`, its row, `ctl status`), said by a `bad_input` event now and
  then (the 1st, 10th, 100th and 1000th).

Neither raises: a sink that fails (a full disk, a broken event log) is logged and let be. The
run's boundary is attached while the run lives (`attach`, by supervisor.core's Run): a room
built without a run (a test's) logs only. Any thread may call it.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol, TypeVar

from mpwatch.contract import Event
from mpwatch.supervisor import errors

T = TypeVar("T")
NOTE_EVENTS = (1, 10, 100, 1000)  # a rank's bad inputs that get an event (all are counted)
WHY_MAX = 300  # characters of why an input or a room failed, in the status and the events


class Say(Protocol):
    """Where the boundary's events go (supervisor.eventlog's EventLog)."""

    def event(self, name: Event, rank: int | None = None, **fields: Any) -> object: ...


class Notes(Protocol):
    """Where a rank's bad inputs are counted (supervisor.workers.ledger's ReportLedger): the count so
    far, or None when there is no such rank."""

    def note_bad_input(self, rank: int, why: str) -> int | None: ...


def why_of(exc: BaseException) -> str:
    """An exception in one line, cut short: what the status and the events say of it."""
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return text if len(text) <= WHY_MAX else text[:WHY_MAX - 1] + "…"


class Boundary:
    def __init__(self, say: Say | None = None, notes: Notes | None = None):
        self.say = say
        self.notes = notes
        self._lock = threading.Lock()
        self.failed_rooms: dict[str, int] = {}  # room -> its faults so far
        self.bad_inputs = 0  # rank inputs that tripped a handler, every rank's

    # ---------------------------------------------------------------- rooms ----
    def room(self, name: str) -> _Guard:
        """`with boundary.room("stall watch"): ...`: an exception inside is the room's fault."""
        return _Guard(lambda exc: self.failed(name, exc))

    def call(self, name: str, fn: Callable[..., T], *args: Any, default: T) -> T:
        """fn(*args) in room `name`; `default` when it failed."""
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - the boundary: said, logged, lived through
            self.failed(name, exc)
            return default

    def failed(self, name: str, exc: BaseException, where: str | None = None) -> str:
        """Room `name` failed with `exc` (at `where`, when the room has several places: a control
        command's name): logged, said once; the line for whoever asked."""
        line = errors.bug(where or name, exc)
        with self._lock:
            n = self.failed_rooms[name] = self.failed_rooms.get(name, 0) + 1
        if n == 1:  # counted before it is said: a failing event log says nothing twice
            self._say(Event.ROOM_FAILED, None, room=name, why=why_of(exc))
        return line

    # ---------------------------------------------------------- rank inputs ----
    def rank_input(self, rank: int | None, what: str) -> _Guard:
        """`with boundary.rank_input(rank, "its stderr's cause"): ...`: an exception inside is a
        bad input of `rank` (None: a peer not known as a rank: logged only)."""
        return _Guard(lambda exc: self.bad_input(rank, what, exc))

    def bad_input(self, rank: int | None, what: str, exc: BaseException) -> None:
        """An input of `rank` tripped its handler with `exc`: its traceback logged, a note on the rank."""
        errors.bug(f"rank {rank}: {what}", exc)
        self.note(rank, what, why_of(exc))

    def note(self, rank: int | None, what: str, why: str) -> None:
        """An input of `rank` not taken (past a bound, refused) or that tripped its handler: counted
        on the rank with why, said by a bad_input event now and then (NOTE_EVENTS)."""
        with self._lock:
            self.bad_inputs += 1
        count = None
        if rank is not None and self.notes is not None:
            try:
                count = self.notes.note_bad_input(rank, f"{what}: {why}")
            except Exception as note_exc:  # noqa: BLE001 - the note's own fault is the ledger's
                self.failed("report ledger", note_exc)
        if count in NOTE_EVENTS:
            self._say(Event.BAD_INPUT, rank, what=what, why=why, count=count)

    def _say(self, name: Event, rank: int | None, **fields: Any) -> None:
        if self.say is None:
            return
        try:
            self.say.event(name, rank, **fields)
        except Exception as exc:  # noqa: BLE001 - the event log failed too: its room says it
            if name is not Event.ROOM_FAILED or fields.get("room") != EVENTLOG:
                self.failed(EVENTLOG, exc)


EVENTLOG = "event log"


class _Guard:
    """The context manager of `room` and `rank_input`: swallows an Exception (never a
    KeyboardInterrupt or SystemExit) after handing it to `on`."""

    __slots__ = ("on",)

    def __init__(self, on: Callable[[BaseException], object]):
        self.on = on

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        if exc is None or not isinstance(exc, Exception):
            return False
        self.on(exc)
        return True


# The run's boundary while it lives (one run a supervisor process); a bare one logs only.
_current = Boundary()


def attach(b: Boundary) -> None:
    global _current
    _current = b


def detach(b: Boundary) -> None:
    global _current
    if _current is b:
        _current = Boundary()


def current() -> Boundary:
    return _current


def room(name: str) -> _Guard:
    """The run's boundary's `room` (for rooms that are not handed the run)."""
    return _current.room(name)


def rank_input(rank: int | None, what: str) -> _Guard:
    return _current.rank_input(rank, what)


def failed(name: str, exc: BaseException, where: str | None = None) -> str:
    return _current.failed(name, exc, where)
