"""The worker state machine: every move of the table, walked on a real Worker whose events
go to a real run store, and a move the table refuses. Also the pure exit verdicts."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import deque

import pytest

from mpwatch.contract import MERGED_WORKER_KEYS, Event, State, WorkerStatus
from mpwatch.rundir.writer import RunStore
from mpwatch.settings import Settings
from mpwatch.supervisor.eventlog import EventLog
from mpwatch.supervisor.snapshot import worker_status
from mpwatch.supervisor.workers import exits, states
from mpwatch.supervisor.workers.worker import TAIL, Attempt, Worker
from tests.helpers import internal_errors

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
    store = RunStore(tmp_path, Settings())
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
    folder = tmp_path_factory.mktemp("refused")
    store = RunStore(folder, Settings())
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
    found = internal_errors(folder)  # what the autouse check would have failed a test for
    assert len(found) == 2 and "starting -> starting" in found[0] and "exited -> paused" in found[1], found


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
    # present only once there are some: reports rejected, bad inputs, tunables refused, an OOM or a memory snapshot
    assert set(st) == set(WorkerStatus.__annotations__) - MERGED_WORKER_KEYS - {"rejected", "bad_inputs",
                                                                                "refused_tunables", "memory"}
    json.dumps(st)
    w.reports.rejected, w.reports.rejected_why = 2, "report loss is not a number"  # present once there are some
    w.reports.bad_inputs, w.reports.bad_input_why = 1, "its hello: pid 7 is no process of rank 0"
    w.reports.refused_tunables = ["x: a float tunable's default must be finite, not inf"]
    st = worker_status(w, 0.0, TAIL, None)
    assert set(st) == set(WorkerStatus.__annotations__) - MERGED_WORKER_KEYS - {"memory"}
    assert st["rejected"] == {"count": 2, "why": "report loss is not a number"}
    assert st["bad_inputs"] == {"count": 1, "why": "its hello: pid 7 is no process of rank 0"}


@pytest.mark.parametrize(("rc", "reason", "tail", "want"), [
    (0, None, [], (State.EXITED, 0, None, "exit 0")),
    (3, None, ["Traceback (most recent call last):", '  File "x.py", line 1', "ValueError: bad"],
     (State.FAILED, 3, None, "exit 3: ValueError: bad")),
    (-9, None, [], (State.FAILED, None, "SIGKILL", "signal SIGKILL: sent from outside mpwatch (a user, a scheduler, "
                                                   "or the kernel's out-of-memory killer)")),
    (-11, None, ["step 3", "--- mpwatch: rank 0 restarted at 17:35:20 ---"], (State.FAILED, None, "SIGSEGV",
                                                                               "signal SIGSEGV")),
    (-15, "kill", [], (State.KILLED, None, "SIGTERM", "killed on request (SIGTERM)")),
    (0, "stop", [], (State.KILLED, 0, None, "stopped with the run (exit 0)")),
    (-200, None, [], (State.FAILED, None, "signal 200", "signal 200")),  # no name: "signal" said once
])
def test_exit_verdicts(rc, reason, tail, want):
    assert tuple(exits.judge(rc, reason, tail)) == want


@pytest.mark.parametrize(("reason", "why"), [("stop", "the run was stopped"), ("kill", "a kill asked for"),
                                             ("restart", "to restart"), ("resize", "for a resize")])
def test_a_rank_that_exits_0_on_its_stop_signal_stopped_cleanly(reason, why):
    """Issue 31, item 7: `killed` was shown for a rank that saved and exited 0 on --stop-signal."""
    end = exits.judge(0, reason, [], stop_signal="SIGUSR2")
    assert tuple(end) == (State.EXITED, 0, None, f"stopped cleanly on SIGUSR2 ({why}), exit 0")
    assert exits.judge(-9, reason, [], stop_signal="SIGUSR2").state is State.KILLED  # the grace ran out
    assert exits.judge(3, reason, [], stop_signal="SIGUSR2").state is State.KILLED


def test_the_loss_tail_is_the_whole_run_smoothed(proc, log):
    # 31 losses with a tail of 32: every one (it once got only the last); 1000: the run in at most
    # 32 means of its stretches, oldest first, and a narrower tail merges neighbours
    w = worker_in(State.RUNNING, proc, log)
    for x in range(31):
        w.reports.trend.add(float(x))
    assert worker_status(w, 0.0, TAIL, None)["loss_tail"] == [float(x) for x in range(31)]
    for x in range(31, 1000):
        w.reports.trend.add(float(x))
    tail = worker_status(w, 0.0, TAIL, None)["loss_tail"]
    assert len(tail) <= TAIL and tail == sorted(tail) and tail[0] < 40 and tail[-1] > 960
    assert len(worker_status(w, 0.0, 8, None)["loss_tail"]) <= 8
    w.reports.trend.add(float("nan"))  # a NaN loss is shown as such in LOSS, never averaged into the trend
    assert all(x == x for x in worker_status(w, 0.0, TAIL, None)["loss_tail"])


def test_a_syntax_errors_cause_says_its_file_and_line():
    tail = ['  File "/home/ana/train.py", line 12', "    def f(:", "          ^", "SyntaxError: invalid syntax"]
    assert exits.judge(1, None, tail).cause == "exit 1: SyntaxError: invalid syntax (train.py:12)"
    tail = ["Traceback (most recent call last):", '  File "/x/main.py", line 3, in <module>', "    import m",
            '  File "/x/m.py", line 7', "    if x", "        ^", "IndentationError: expected an indented block"]
    assert exits.judge(1, None, tail).cause == "exit 1: IndentationError: expected an indented block (m.py:7)"


def test_a_cause_never_quotes_mpwatchs_own_markers():
    # After a resize, a rank that wrote nothing of its own before it ended: the marker is no cause,
    # nor is the last attempt's error before it.
    tail = ["ValueError: the last attempt's", "", "--- mpwatch: rank 0 resized at 17:35:20 ---"]
    assert exits.judge(75, None, tail).cause == "exit 75"
    assert exits.judge(1, None, tail + ["OSError: mine"]).cause == "exit 1: OSError: mine"


def test_a_rank_whose_peer_ended_first_says_its_collectives_failed():
    gloo = ("[rank1]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:545] Read "
            "error [127.0.0.1]:46721: Connection reset by peer. This is typically caused by a remote worker hanging "
            "or bugs in the application. Check the logs of the remote worker before reporting an error. GLHF!")
    peer = exits.PeerEnd(2, "was killed", 1.5)
    end = exits.judge(1, None, ["Traceback (most recent call last):", gloo], peer, dist=True)
    assert end.cause == ("exit 1: its collectives failed after rank 2 was killed "
                         "(RuntimeError: Read error [127.0.0.1]:46721: Connection reset by peer)")
    # no process group, an error of its own, or a peer that ended long before: its own cause
    assert exits.judge(1, None, [gloo], peer, dist=False).cause.startswith("exit 1: RuntimeError: Read error")
    assert exits.judge(1, None, ["ValueError: bad"], peer, dist=True).cause == "exit 1: ValueError: bad"
    late = exits.PeerEnd(2, "was killed", 3600.0)
    assert exits.judge(1, None, [gloo], late, dist=True).cause.startswith("exit 1: RuntimeError: Read error")
    assert exits.ended_how(State.KILLED, "kill", "SIGTERM") == "was killed"
    assert exits.ended_how(State.FAILED, None, "SIGSEGV") == "died of SIGSEGV"


def test_nccls_watchdog_line_is_said_in_words():
    # torch's ProcessGroupNCCL watchdog, as it writes it before it aborts the process
    tail = ["[rank1]:[E1203 17:45:20.1 ProcessGroupNCCL.cpp:685] [Rank 1] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
            "600027 milliseconds before timing out.",
            "terminate called after throwing an instance of 'c10::DistBackendError'",
            "Fatal Python error: Aborted"]
    assert exits.judge(-6, None, tail).cause == "signal SIGABRT: NCCL timeout in ALLREDUCE #5 after 600 s"
    peer = exits.PeerEnd(0, "died of SIGKILL", 601.0)
    assert exits.judge(-6, None, tail, peer, dist=True).cause == (
        "signal SIGABRT: its collectives failed after rank 0 died of SIGKILL (NCCL timeout in ALLREDUCE #5 after 600 s)")
