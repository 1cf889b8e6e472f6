"""A rank of the run: its state, its current attempt, and what its reports told.

- `Attempt`: one start of the rank's process, made fresh at each start, so nothing of the
  last process (its exit, its kill deadline, its stall, its children's reports) can leak
  into the next one.
- `Reports`: what the rank's reports have told so far; it outlives attempts (the curve
  and the last step carry across a restart).
- `Worker`: rank, state, restart counts, the current attempt and the reports.
  `transition()` is the only place its state changes (the table: supervisor.workers.states).

Fields read by other threads (the channel hub's, the control server's, the sampler) are
changed under the run's lock; see supervisor.core for who holds what.
"""
from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from mpwatch.contract import (
    CudaView,
    Event,
    OomRecord,
    PaceWindow,
    RunAlertKind,
    StallInfo,
    State,
    StepsFrom,
    rates,
)
from mpwatch.probes.procs import ProcInfo
from mpwatch.supervisor.workers import states

HISTORY = 1024  # loss points kept per rank; halved (every other point) when full
TAIL = 32  # recent losses for the sparkline
RATE_WINDOW = 32  # (time, step) samples behind steps/s
OOMS_KEPT = 16  # a process's CUDA OOM records kept (its latest)

RestartKind = Literal["restart", "auto"]  # by request | after a failure (counted against --max-restarts)


class Proc(Protocol):
    """A rank's process as the reaper reads it: a Popen, or a worker the forkserver forked
    (supervisor.preload.forkserver's ForkedProc)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...


class Downlink(Protocol):
    """A rank's channel for requests down (supervisor.ipc.channels' Peer, protocol 2)."""

    pid: int
    version: int  # the channel protocol its hello said (contract.protocol.VERSION)

    def send(self, payload: bytes) -> bool: ...

    def push(self) -> None: ...


class Recorder(Protocol):
    """Where a state change is recorded (supervisor.eventlog's EventLog)."""

    def event(self, name: Event, rank: int | None = None, **fields: Any) -> dict[str, Any]: ...

    def alert(self, kind: RunAlertKind, message: str, rank: int | None = None) -> None: ...


@dataclass(eq=False)
class ChildReport:
    """What a process the worker started (mp.Process, a DataLoader worker) reported itself."""

    pid: int
    ppid: int | None = None
    step: int | None = None
    loss: float | None = None
    last_report: float | None = None  # monotonic


@dataclass(eq=False)
class Attempt:
    """One start of a rank's process (proc is None: it could not start)."""

    proc: Proc | None
    world: int  # WORLD_SIZE it was started with
    started: float = field(default_factory=time.monotonic)
    started_wall: float = field(default_factory=time.time)
    # how it ended
    exit_code: int | None = None
    signal: str | None = None
    cause: str | None = None
    exit_seen: float | None = None  # its process ended; its exit waits for the channel to drain
    pid: int | None = field(init=False)  # proc's (read on every frame: a plain field)
    # its channel (the hub's threads)
    connected: bool = False  # it said hello or reported
    # its own process's connections open (a count: a process may open several, and the frames of each
    # are read before its exit is recorded)
    chan_open: int = 0
    # Its first progress, as the ledger heard it (supervisor.workers.ledger): the stall clock starts
    # there; before it only the start-up limit applies (supervisor.diagnose.stall).
    first_report: float | None = None  # monotonic
    last_report: float | None = None  # monotonic
    dist: bool = False  # torch.distributed is initialised in it: its ranks share a process group
    rate: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=RATE_WINDOW))
    children: dict[int, ChildReport] = field(default_factory=dict)  # pid -> its own reports
    pace: PaceWindow = field(default_factory=PaceWindow)  # its steps' times, from its report events
    proc_info: ProcInfo | None = None  # the sampler's view of its process tree
    # kills (supervisor.workers.groups)
    kill_reason: str | None = None  # kill | restart | resize | stop
    kill_deadline: float | None = None  # SIGKILL then (monotonic)
    hard_killed: float | None = None
    unkillable: list[dict[str, Any]] | None = None
    stop_signal: str | None = None  # the --stop-signal sent to its process ("SIGTERM"), when killed
    stop_sent: float | None = None  # wall clock
    # control: checkpoint requests and tunables (supervisor.live)
    peer: Downlink | None = None  # its own process's channel, once its hello said protocol 2
    polls: bool = False  # its process calls mpwatch.should_checkpoint()
    live_from: int = 0  # the tunables in force at this epoch reached it through its environment
    # pauses and stalls
    resumed: float | None = None
    paused_at: float | None = None  # wall clock of the pause in force (None when not paused)
    stall: StallInfo | None = None
    slow_start: StallInfo | None = None  # no first report within --startup-timeout (said once)
    stall_probed: float = 0.0  # last hang probe while stalled
    # CUDA OOMs its process saw (supervisor.workers.ledger merges a record completing an earlier one)
    ooms: dict[int, OomRecord] = field(default_factory=dict)  # seq -> the record

    def __post_init__(self) -> None:
        self.pid = None if self.proc is None else self.proc.pid

    @property
    def pgid(self) -> int | None:
        """The process group it leads: supervisor.spawn starts it in a session of its own, so its
        group's id is its pid (the name says which of the two a signal goes to)."""
        return self.pid

    def take_oom(self, rec: OomRecord) -> tuple[OomRecord, bool]:
        """The record merged with the one of its OOM (`seq`) already taken: (the merged record,
        whether that OOM is new)."""
        cur = self.ooms.get(rec["seq"])
        if cur is None:
            self.ooms[rec["seq"]] = cur = rec.copy()
            for seq in sorted(self.ooms)[:-OOMS_KEPT]:
                del self.ooms[seq]
            return cur.copy(), True
        for k, v in rec.items():
            if v is not None and k != "ts":
                cur[k] = v  # type: ignore[literal-required]  # a key of OomRecord, from an OomRecord
        return cur.copy(), False

    def last_oom(self) -> OomRecord | None:
        return self.ooms[max(self.ooms)].copy() if self.ooms else None

    def steps_per_second(self, now: float | None = None) -> float | None:
        """Steps over the rate window, oldest to `now` (contract.rates: a worker that stopped
        stepping reads 0 within seconds, never its last rate)."""
        return rates.steps_per_second(list(self.rate), now)


class LossHistory:
    """(step, loss) points of a whole run, decimated instead of truncated: when full, every
    other point goes and only every second new one is kept, so the curve keeps its shape."""

    def __init__(self, limit: int = HISTORY):
        self.limit = limit
        self.points: list[tuple[int, float]] = []
        self._stride = 1
        self._skip = 0

    def add(self, step: int, loss: float) -> None:
        self._skip += 1
        if self._skip < self._stride:
            return
        self._skip = 0
        self.points.append((step, loss))
        if len(self.points) >= self.limit:
            self.points = self.points[::2]
            self._stride *= 2


class LossTrend:
    """The whole run's loss in at most 2*TAIL points, each the mean of a stretch of reports,
    oldest first: what the TREND sparkline draws (a falling loss reads falling, whatever the
    noise of single batches). O(1) a report: when full, neighbours merge and stretches double."""

    def __init__(self, limit: int = 2 * TAIL):
        self.limit = limit
        self.stride = 1  # reports a closed stretch stands for
        self.means: list[float] = []  # closed stretches
        self._sum = 0.0
        self._n = 0  # finite losses in the open stretch
        self._seen = 0  # reports in the open stretch

    def add(self, loss: float) -> None:
        self._seen += 1
        if math.isfinite(loss):
            self._sum += loss
            self._n += 1
        if self._seen < self.stride:
            return
        if self._n:
            self.means.append(self._sum / self._n)
        self._sum, self._n, self._seen = 0.0, 0, 0
        if len(self.means) >= self.limit:
            self.means = [(a + b) / 2 for a, b in zip(self.means[::2], self.means[1::2], strict=False)]
            self.stride *= 2

    def points(self, n: int) -> list[float]:
        """n points over the whole run (fewer while it has fewer): each the mean of its share
        of the stretches, in order; the open stretch last."""
        pts = self.means + ([self._sum / self._n] if self._n else [])
        if n <= 0:
            return []
        k = len(pts)
        if k <= n:
            return pts
        return [sum(part) / len(part) for i in range(n) if (part := pts[i * k // n:(i + 1) * k // n])]


@dataclass(eq=False)
class PendingReport:
    """The report event not yet written (supervisor.workers.ledger's rate limit)."""

    ts: float
    step: int | None
    loss: float | None
    metrics: dict[str, Any]
    n: int  # report() calls it stands for
    dropped: int
    phases: dict[str, float] | None = None  # its process's phase totals as of its batch


@dataclass(eq=False)
class Reports:
    """What a rank's reports told, across its attempts."""

    step: int | None = None
    loss: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    count: int = 0  # report() calls
    dropped: int = 0  # declared lost by the worker's buffer
    bad_frames: int = 0
    rejected: int = 0  # reports refused alone (supervisor.workers.batch_check)
    rejected_why: str | None = None  # the latest reason
    bad_inputs: int = 0  # its inputs that tripped a handler (supervisor.boundary), counted
    bad_input_why: str | None = None  # the latest: what, and the exception in one line
    # tunable declarations refused alone ("NAME: why", contract.live.validate_live), the first few
    refused_tunables: list[str] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)
    phase_names: set[str] = field(default_factory=set)  # every phase it declared, within its bounds (ledger)
    source: StepsFrom | None = None  # where its latest steps came from (the worker's batch says)
    cuda: CudaView | None = None
    curve: LossHistory = field(default_factory=LossHistory)
    tail: deque[float] = field(default_factory=lambda: deque(maxlen=TAIL))  # the latest losses, as sent
    trend: LossTrend = field(default_factory=LossTrend)  # the run's loss, smoothed (the TREND sparkline)
    pending: PendingReport | None = None
    next_event: float = 0.0  # monotonic time the next report event may be written


class Worker:
    """One rank. Born with its first attempt in its first state (starting, or failed when
    its process could not start); every later state through `transition()`."""

    # Moves of every worker so far (a state change, a first report): what the stall watch looks
    # for before it looks at each worker (supervisor.diagnose.stall_watch). Only ever grows.
    moves = 0

    def __init__(self, rank: int, attempt: Attempt, first: State, why: str, recorder: Recorder, /,
                 strict: bool = False, **fields: Any):
        self.rank = rank
        self.attempt = attempt
        self.reports = Reports()
        self.restarts = 0  # every restart, shown to the user
        self.auto_restarts = 0  # restarts after a failure, counted against --max-restarts
        self.pending_restart: RestartKind | None = None
        self.last_dump: str | None = None
        # Process groups of descendants that left the worker's group (setsid, setpgid):
        # the group kill would miss them, so they are tracked and killed on their own.
        self.foreign_groups: set[int] = set()
        self._recorder = recorder
        self.strict = strict  # raise on a move the table lacks (settings.Settings.strict_states)
        self._state = first
        self._move(None, first, why, fields)

    @property
    def state(self) -> State:
        return self._state

    @property
    def pid(self) -> int | None:
        return self.attempt.pid

    @property
    def pgid(self) -> int | None:
        return self.attempt.pgid

    # What the GPU watcher reads of a worker (supervisor.gpu.watch's for_run), besides rank, pid, state.
    @property
    def proc_info(self) -> Mapping[str, object]:
        return self.attempt.proc_info or {}

    @property
    def cuda(self) -> CudaView | None:
        return self.reports.cuda

    @property
    def alive(self) -> bool:
        """Its process runs, or has ended and its exit is not recorded yet."""
        proc = self.attempt.proc
        return proc is not None and (proc.returncode is None or self.attempt.exit_seen is not None)

    def transition(self, new: State, why: str, /, **fields: Any) -> None:
        """Change state, checked against the table, and record the move's event with `fields`
        (worker_exited always carries the state it moved to)."""
        self._move(self._state, new, why, fields)

    def begin(self, attempt: Attempt, state: State, why: str, /, **fields: Any) -> None:
        """A new start: the attempt replaces the last one whole, then the state moves."""
        self.attempt = attempt
        self.reports.cuda = None  # torch's view was the last process's: the GPU watcher must not place it
        self.pending_restart = None
        self.transition(state, why, **fields)

    def _move(self, old: State | None, new: State, why: str, fields: dict[str, Any]) -> None:
        Worker.moves += 1
        try:
            event = states.check(old, new)
        except states.IllegalTransition as exc:
            message = f"internal error, please report: rank {self.rank}: {exc} ({why})"
            self._recorder.alert("internal", message, rank=self.rank)
            if self.strict:
                raise states.IllegalTransition(message) from None
            event = states.ENTRY_EVENTS.get(new)
        self._state = new
        if event is Event.WORKER_EXITED:
            fields["state"] = new.value  # whatever the caller passed: the state it moved to
        if event is not None:
            self._recorder.event(event, self.rank, **fields)
