"""The names of the run's states and events, and the fields of an events.jsonl record: part of
the status contract (readers import every name from mpwatch.contract)."""
from __future__ import annotations

from enum import Enum
from typing import Any, TypedDict, TypeVar

_N = TypeVar("_N", bound="_Name")


class _Name(str, Enum):
    """A name that is its own string in JSON, comparisons and f-strings."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:  # f"{State.RUNNING:>9}" is "  running" on every Python
        return format(str(self.value), spec)

    @classmethod
    def of(cls: type[_N], value: object) -> _N | None:
        """The member a value read back from JSON names; None for anything else."""
        try:
            return cls(value) if isinstance(value, str) else None
        except ValueError:
            return None


# ---------------------------------------------------------------------- states ----
class State(_Name):
    """A worker's state. The values are the strings written to events.jsonl and the status."""

    STARTING = "starting"  # started, not yet heard from (shown running after NO_HELLO_S)
    RUNNING = "running"
    STALLED = "stalled"  # reported before, then silent for --stall-timeout (never before its first report)
    PAUSED = "paused"  # SIGSTOPped by the user
    RESTARTING = "restarting"  # ended with a failure; started again once its group is gone
    EXITED = "exited"  # ended by itself with exit 0
    FAILED = "failed"  # ended by itself with a non-zero exit or a signal, or could not start
    KILLED = "killed"  # ended by mpwatch (kill, restart, resize, stop)


ALIVE_STATES = frozenset({State.STARTING, State.RUNNING, State.STALLED, State.PAUSED})
ENDED_STATES = frozenset({State.EXITED, State.FAILED, State.KILLED})
# In a merged run's counts (run.counts), the ranks of nodes that cannot be reached: their
# last known states are old news. No worker's state is ever this.
UNREACHABLE = "unreachable"


class RunState(_Name):
    RUNNING = "running"
    RESIZING = "resizing"
    STOPPING = "stopping"
    FINISHED = "finished"


# ---------------------------------------------------------------------- events ----
class Event(_Name):
    """The `event` of each line of events.jsonl (and of the control socket's `events`)."""

    RUN_STARTED = "run_started"
    WORKER_STARTED = "worker_started"
    WORKER_EXITED = "worker_exited"
    PAUSED = "paused"
    RESUMED = "resumed"
    RESTARTED = "restarted"
    RESIZED = "resized"
    STALLED = "stalled"
    RECOVERED = "recovered"
    # said hello, no first report within --startup-timeout (not a state: it still runs)
    SLOW_START = "slow_start"
    DUMP = "dump"
    REPORT = "report"
    ALERT = "alert"  # a run alert: disk, hang (culprit), unkillable
    GPU_ALERT = "gpu_alert"  # a GPU alert that starts (one event per start, not per tick)
    BAD_FRAME = "bad_frame"
    REPORTS_REJECTED = "reports_rejected"  # a worker's reports refused alone (past the protocol's bounds)
    # what a rank said (a frame, a hello, its stderr, a file of its folder) tripped a handler: a note on
    # the rank, counted (supervisor.boundary); the 1st, 10th, 100th and 1000th get an event
    BAD_INPUT = "bad_input"
    # a room of the supervisor (the stall watch, the GPU watcher, ...) failed: said once a run, the run
    # goes on (its traceback is in supervisor.log: supervisor.boundary)
    ROOM_FAILED = "room_failed"
    # a channel whose hello names a rank or pid it is not (the process that connected is another, or no
    # process of that rank) was refused: the run's first 10, then every 100th (supervisor.ipc.identity)
    CHANNEL_REFUSED = "channel_refused"
    STOPPING = "stopping"
    RUN_FINISHED = "run_finished"
    ROUND = "round"  # several nodes: this node joined a rendezvous round (its workers start in it)
    NODE_LOST = "node_lost"  # several nodes: another node's supervisor stopped answering
    THINNED = "thinned"  # a note: older report events were thinned to keep events.jsonl under its cap
    # control (supervisor.live): a request, then each rank's answer
    CHECKPOINT_REQUESTED = "checkpoint_requested"  # `ctl checkpoint`, `c`: the ranks asked and the step
    CHECKPOINT_TAKEN = "checkpoint_taken"  # a rank's should_checkpoint() returned True (late: past the step)
    CHECKPOINT_MISSED = "checkpoint_missed"  # a rank's process ended before it answered
    PROFILE_REQUESTED = "profile_requested"  # `ctl profile`, `o`: the ranks asked, the step, the steps
    PROFILE_STARTED = "profile_started"  # a rank's profiler started (py-spy: its recording began)
    PROFILE_WRITTEN = "profile_written"  # a rank's trace is written: its path, size, top operators
    PROFILE_FAILED = "profile_failed"  # a rank could not be profiled, or its trace not written: why
    PROFILE_MISSED = "profile_missed"  # a rank's process ended before its profile started
    MEMORY_REQUESTED = "memory_requested"  # `ctl memory`, `M`: the ranks asked for a snapshot, the step
    MEMORY_STARTED = "memory_started"  # a rank took its snapshot, at its step boundary
    MEMORY_WRITTEN = "memory_written"  # a rank's snapshot is written: its path and size
    MEMORY_FAILED = "memory_failed"  # a rank could not take or write one: why (no CUDA in it...)
    MEMORY_MISSED = "memory_missed"  # a rank's process ended before it took it
    TUNABLE_DECLARED = "tunable_declared"  # the first mpwatch.tunable() call of a name in the run
    TUNABLE_SET = "tunable_set"  # `ctl set`, `t`: the new value and the step it takes effect at
    TUNABLE_APPLIED = "tunable_applied"  # a rank took the new value (late: past the step)
    # a rank's tunable declaration refused alone (a default that is not finite): the first few a rank
    TUNABLE_REFUSED = "tunable_refused"
    STOP_SIGNAL = "stop_signal"  # --stop-signal sent to a rank's process (kill, restart, resize, stop)
    # torch imported once (supervisor.preload): the forkserver is ready (its pid, modules, seconds), or
    # workers start by exec after all (why), said once a run
    PRELOADED = "preloaded"
    PRELOAD_FALLBACK = "preload_fallback"


class EventRecord(TypedDict):
    """One line of events.jsonl: these three keys, then the event's own fields (see the
    producer's call for each). Events from the control socket also carry `seq`."""

    ts: float
    event: str
    rank: int | None


class EventFields(EventRecord, total=False):
    """The event-specific fields that readers word (text.eventtext); each event
    carries the ones its producer passes (supervisor.core, supervisor.gpu.watch)."""

    seq: int  # events from the control socket: their order
    pid: int | None  # worker_started, worker_exited, paused, resumed, restarted, dump, stalled;
    # preloaded: the forkserver's
    attempt: int  # worker_started, restarted: how many restarts so far
    state: str  # worker_exited: the State it ended in
    cause: str | None  # worker_exited: "exit 1: <last stderr line>", "signal SIGKILL"
    exit_code: int | None  # worker_exited, run_finished
    stderr_tail: list[str]  # worker_exited: the last lines of its stderr
    why: str  # restarted, stopping, bad_frame, reports_rejected, profile_failed, tunable_refused, bad_input,
    # room_failed (the exception, in one line); preload_fallback: why workers start by exec;
    # profile_written: a note
    stopped: str  # run_finished of a run that was stopped: why (stopping's `why`: a stop asked, a signal)
    frm: int  # resized: workers before
    to: int  # resized: workers after
    mode: str  # resized: independent | restart
    silent_for: float  # stalled: seconds without a report; slow_start: seconds since its start
    step: int | None  # stalled, recovered, report; checkpoint_*, tunable_*: the step asked for, or taken at
    kind: str | None  # stalled, slow_start: what the process does; alert, gpu_alert: the alert's kind
    detail: str | None  # stalled, slow_start: the kind's detail (kernel wait)
    limit: float  # slow_start: the --startup-timeout it went past
    path: str  # dump: the stack file; profile_*: the trace; relative to the run directory
    where: str | None  # dump: the innermost frame of the user's code
    message: str  # alert, gpu_alert
    severity: str  # gpu_alert: error | warning | info
    script: str  # run_started
    nprocs: int  # run_started
    run_dir: str  # run_started
    count: int  # bad_frame: bad frames of the worker so far; reports_rejected: its rejected reports so far;
    # bad_input: its bad inputs so far
    what: str  # bad_input: what of the rank's tripped the supervisor ("a frame", "its stderr's cause", ...)
    room: str  # room_failed: the room ("stall watch", "GPU watcher", ...)
    claimed_pid: int  # channel_refused: the pid its hello named (its `pid`: the process that connected)
    global_rank: int  # worker_started: RANK (on several nodes it differs from rank)
    round: int  # round: the rendezvous round
    node_rank: int  # round: this node's rank in it; node_lost: the lost node's
    nnodes: int  # round
    base_rank: int  # round: the global rank of this node's local rank 0
    world_size: int  # round: every node's workers
    host: str  # node_lost
    node: int  # a merged view of several nodes: the node the event comes from (rank is then global)
    loss: float | None  # report
    metrics: dict[str, Any]  # report: every metric reported since the last report event
    n: int  # report: the report() calls it stands for
    dropped: int  # report: reports the worker's buffer declared lost
    child_of: int  # report: sent by a process the worker started (this is the worker's pid)
    reason: str | None  # worker_exited: why mpwatch killed it (kill, restart, resize, stop);
    # dump: stall | slow start | request
    innermost: str | None  # dump: the innermost frame
    collective: str | None  # dump: the collective the main thread waits in
    wchan: str | None  # stalled: the kernel wait
    culprits: list[int]  # alert (hang): the ranks the others wait for
    waiting: list[int]  # alert (hang)
    key: str  # alert (hang): the finding; an alert of the same key replaces it in the status
    update: bool  # alert: it replaces the standing alert of its key (the finding learnt more)
    ended: bool  # alert: the condition of its key is over; the alert leaves the status
    gpu: int | None  # gpu_alert: the GPU
    id: int  # checkpoint_*, profile_*, tunable_set, tunable_applied: the request
    at: int | None  # checkpoint_taken, profile_started, tunable_applied: the step asked (None: the next call)
    late: bool  # checkpoint_taken, profile_started, tunable_applied: it took effect past `at`
    ranks: list[int]  # checkpoint_requested, profile_requested, tunable_set: the ranks asked
    by: str  # checkpoint_requested, profile_requested, tunable_set: who asked
    steps: int | None  # profile_requested: the steps asked; profile_written: the steps the trace holds
    tool: str  # profile_started, profile_written, profile_failed: torch.profiler | py-spy
    bytes: int | None  # profile_written: the file's size
    top: list[list[Any]]  # profile_written: its top operators [name, self cpu us, self device us, calls]
    held_ms: float | None  # profile_written: how long the training loop waited for the profiler
    tunable: str  # tunable_*: its name (tunable_refused: "?" for a name that is not one)
    value: Any  # tunable_set, tunable_applied: the new value; tunable_declared: its default
    old: Any  # tunable_set: the value before
    type: str  # tunable_declared: int | float | str | bool
    signal: str  # stop_signal: SIGTERM, SIGUSR2, ...
    grace: float  # stop_signal: seconds before SIGKILL
    thinned_from: float  # thinned: report events between these wall times...
    thinned_to: float
    reports_before: int  # ...went from reports_before to reports_after
    reports_after: int
    modules: list[str]  # preloaded: what the forkserver imported
    seconds: float  # preloaded: how long its imports took
    tasks: int  # preloaded: the forkserver's threads as it forks (torch's native ones; never Python's)
