"""The worker state machine: every move of the table, walked on a real Worker whose events
go to a real run store, and a move the table refuses. Also the pure exit verdicts."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import deque

import pytest

from mpwatch.rundir.writer import RunStore
from mpwatch.contract.status import MERGED_WORKER_KEYS, Event, State, WorkerStatus
from mpwatch.supervisor.workers import exits
from mpwatch.supervisor.workers import states
from mpwatch.supervisor.eventlog import EventLog
from mpwatch.supervisor.snapshot import worker_status
from mpwatch.supervisor.workers.worker import TAIL, Attempt, Worker

MOVES = sorted(states.TRANSITIONS, key=lambda m: (str(m[0]), str(m[1])))


@pytest.fixture(scope="module")
def proc():
    """A real process for the attempts (none is signalled here)."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield p
    p.kill()
    p.wait()


@pytest.fixture
def log(tmp_path):
    store = RunStore(tmp_path)
    store.create()
    yield EventLog(store)
    store.close()


def recorded(log: EventLog) -> list[dict]:
    log.store.flush()
    return [json.loads(line) for line in (log.store.dir / "events.jsonl").read_text().splitlines()]


def path_to(state: State) -> list[State]:
    """The states a worker goes through from its first start to `state`, by allowed moves."""
    seen: dict[State, list[State]] = {}
    todo = deque((new, [new]) for (old, new) in states.TRANSITIONS if old is None)
    while todo:
        s, path = todo.popleft()
        if s in seen:
            continue
        seen[s] = path
        todo.extend((new, path + [new]) for (old, new) in states.TRANSITIONS if old == s)
    return seen[state]


def worker_in(state: State, proc, log: EventLog) -> Worker:
    first, *rest = path_to(state)
    w = Worker(0, Attempt(proc, 1), first, "test", log, strict=True)
    for s in rest:
        w.transition(s, "test")
    assert w.state is state
    return w


def test_every_state_can_be_reached_and_left_or_is_an_end():
    for s in State:
        assert path_to(s)[-1] is s
        outs = {new for (old, new) in states.TRANSITIONS if old is s}
        assert outs, f"no way out of {s}"  # ended states may start again


@pytest.mark.parametrize(("old", "new"), MOVES, ids=[f"{o}->{n}" for o, n in MOVES])
def test_every_allowed_move_changes_the_state_and_records_its_event(old, new, proc, log):
    if old is None:
        w = Worker(3, Attempt(proc, 1), new, "test", log, strict=True, pid=proc.pid)
    else:
        w = worker_in(old, proc, log)
        w.rank = 3
        w.transition(new, "test", pid=proc.pid)
    assert w.state is new
    mine = [e for e in recorded(log) if e["rank"] == 3]
    expected = states.TRANSITIONS[(old, new)]
    if expected is None:
        assert mine == []
    else:
        assert [e["event"] for e in mine] == [expected.value]
        assert mine[0]["pid"] == proc.pid
        if expected is Event.WORKER_EXITED:
            assert mine[0]["state"] == new.value  # the headless line and the TUI read it


def test_a_refused_move_raises_when_strict_and_is_an_internal_alert_otherwise(proc, tmp_path_factory):
    # (its own directory: the autouse check fails a test whose tmp_path holds internal alerts)
    store = RunStore(tmp_path_factory.mktemp("refused"))
    store.create()
    log = EventLog(store)
    assert (State.STARTING, State.STARTING) not in states.TRANSITIONS
    w = Worker(0, Attempt(proc, 1), State.STARTING, "test", log, strict=True)
    with pytest.raises(states.IllegalTransition, match="starting -> starting"):
        w.transition(State.STARTING, "a bug")
    assert w.state is State.STARTING
    w = worker_in(State.EXITED, proc, log)
    w.strict = False
    w.transition(State.PAUSED, "another bug", pid=proc.pid)  # exited -> paused: not in the table
    assert w.state is State.PAUSED  # applied: the run goes on
    events = recorded(log)
    alerts = [e for e in events if e["event"] == "alert"]
    assert [a["kind"] for a in alerts] == ["internal", "internal"]
    assert "starting -> starting" in alerts[0]["message"] and "(a bug)" in alerts[0]["message"]
    assert "exited -> paused" in alerts[1]["message"] and "(another bug)" in alerts[1]["message"]
    assert events[-1]["event"] == Event.PAUSED.value  # the event of entering that state, as always
    assert [a["kind"] for a in log.alerts()] == ["internal", "internal"]
    store.close()


def test_a_worker_that_could_not_start_is_failed_with_its_cause(log):
    cause = "could not start: No such file or directory"
    w = Worker(0, Attempt(None, 1, cause=cause), State.FAILED, "could not start", log, strict=True,
               pid=None, exit_code=None, signal=None, cause=cause, reason=None, stderr_tail=[])
    (e,) = recorded(log)
    assert e["event"] == "worker_exited" and e["state"] == "failed" and e["cause"] == cause
    st = worker_status(w, 0.0, TAIL, None)
    assert st["state"] == "failed" and st["pid"] is None and st["uptime"] is None and st["cause"] == cause


def test_a_worker_row_has_every_key_of_the_schema_and_no_other(proc, log):
    w = worker_in(State.RUNNING, proc, log)
    st = worker_status(w, 0.0, TAIL, None)
    assert set(st) == set(WorkerStatus.__annotations__) - MERGED_WORKER_KEYS - {"rejected"}
    json.dumps(st)
    w.reports.rejected, w.reports.rejected_why = 2, "report loss is not a number"  # present once there are some
    st = worker_status(w, 0.0, TAIL, None)
    assert set(st) == set(WorkerStatus.__annotations__) - MERGED_WORKER_KEYS
    assert st["rejected"] == {"count": 2, "why": "report loss is not a number"}


@pytest.mark.parametrize(("rc", "reason", "tail", "want"), [
    (0, None, [], (State.EXITED, 0, None, "exit 0")),
    (3, None, ["Traceback (most recent call last):", '  File "x.py", line 1', "ValueError: bad"],
     (State.FAILED, 3, None, "exit 3: ValueError: bad")),
    (-9, None, [], (State.FAILED, None, "SIGKILL", "signal SIGKILL")),
    (-15, "kill", [], (State.KILLED, None, "SIGTERM", "kill by mpwatch (SIGTERM)")),
    (0, "stop", [], (State.KILLED, 0, None, "stop by mpwatch (exit 0)")),
    (-200, None, [], (State.FAILED, None, "signal 200", "signal 200")),  # no name: "signal" said once
])
def test_exit_verdicts(rc, reason, tail, want):
    assert tuple(exits.judge(rc, reason, tail)) == want
