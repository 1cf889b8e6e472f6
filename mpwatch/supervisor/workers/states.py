"""The worker state machine: which state changes are allowed, and the event each records.

Pure: no processes, no threads. `Worker.transition()` (supervisor.workers.worker) is the only
place a worker's state changes, and it asks `check()` here first. `None` as the origin
is a rank that has no state yet (its first start).

A move the table lacks is a bug in the supervisor: it is recorded as an `internal` alert,
then, with MPWATCH_STRICT_STATES=1 (settings.Settings.strict_states; the supervisor's own tests
set it), IllegalTransition is raised; in production the move is applied, so a bug never takes
a run down with it.

A slow start (no first report within --startup-timeout: a `slow_start` event) moves no state:
the worker runs on, and is never stalled before its first report.
"""
from __future__ import annotations

from mpwatch.contract import ALIVE_STATES, ENDED_STATES, Event, State

S = State
_BETWEEN = (S.RESTARTING, S.EXITED, S.FAILED, S.KILLED)  # a process has ended; a new one may start

# (from, to) -> the event that records the move; None: the move has no event of its own.
TRANSITIONS: dict[tuple[State | None, State], Event | None] = {
    (None, S.STARTING): Event.WORKER_STARTED,  # a rank's first start
    (None, S.FAILED): Event.WORKER_EXITED,  # ... that could not start (Popen failed)
    **{(s, S.STARTING): Event.WORKER_STARTED for s in _BETWEEN},  # started again
    **{(s, S.FAILED): Event.WORKER_EXITED for s in _BETWEEN},  # ... and could not start
    (S.STARTING, S.RUNNING): None,  # its hello, its first report, or NO_HELLO_S of silence
    # no report for --stall-timeout since its last (never before its first)
    (S.RUNNING, S.STALLED): Event.STALLED,
    (S.STALLED, S.RUNNING): Event.RECOVERED,  # a report again
    (S.PAUSED, S.RUNNING): Event.RESUMED,  # SIGCONT by request
    **{(s, S.PAUSED): Event.PAUSED for s in (S.STARTING, S.RUNNING, S.STALLED)},  # SIGSTOP by request
    **{(s, end): Event.WORKER_EXITED for s in ALIVE_STATES for end in ENDED_STATES},  # its process ended
    (S.FAILED, S.RESTARTING): None,  # a failure with restarts left: started once its group is gone
}


def _entry_events() -> dict[State, Event | None]:
    """The event of entering each state when every allowed way in agrees on one (used to
    record a move the table lacks); None where they differ (running: recovered, resumed)."""
    seen: dict[State, set[Event | None]] = {}
    for (_, to), event in TRANSITIONS.items():
        seen.setdefault(to, set()).add(event)
    return {state: next(iter(evs)) if len(evs) == 1 else None for state, evs in seen.items()}


ENTRY_EVENTS = _entry_events()


class IllegalTransition(RuntimeError):
    """A state change the table does not allow: a supervisor bug."""


def check(old: State | None, new: State) -> Event | None:
    """The event recording old -> new; raises IllegalTransition for a move not in the table."""
    try:
        return TRANSITIONS[(old, new)]
    except KeyError:
        raise IllegalTransition(f"{old or 'new'} -> {new} is not an allowed worker state change") from None
