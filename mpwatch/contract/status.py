"""The status a supervisor publishes, and the names of states and events: the one contract
between the supervisor (the producer) and every reader (`ctl status`, the headless lines,
the TUI, the replay of a finished run).

The status travels as JSON (control socket, final.json), so it is described with
TypedDicts: a reader indexes plain dicts, and the type checker (mypy, run by `make test`)
refuses a key the schema lacks. A key marked NotRequired is one that only some statuses
carry (an alert kind's own fields, a stall's frame once its dump is read, a merged view's
node keys); every other key the supervisor always sends, its value possibly None ("N/A":
unknown, never zero). A final.json written by an older mpwatch may lack keys added since:
readers of finished runs read those with `.get`.

Rules of the house:
- The supervisor builds these dicts (supervisor.snapshot) and nothing else invents a key.
- A reader never spells a status key that is not declared here.
- Tests of the readers are fed statuses recorded from real runs (tests/data/statuses/),
  never dictionaries written by hand; tests/test_recordings.py checks them against this
  schema and against the shape of a status the supervisor sends now.
- Adding a key is fine; renaming or removing one breaks `ctl status --json` users.
"""
from __future__ import annotations

import sys
from typing import Any, Literal, TypedDict, get_args

if sys.version_info >= (3, 11):
    from typing import NotRequired
else:  # pragma: no cover - Python 3.10
    from typing_extensions import NotRequired

# The names of states and events live in contract.names, the GPU timeline's records (gpu.jsonl,
# the gpu_timeline reply) in contract.gpu_records, the status's GPU view (Status.gpus) in
# contract.gpu_view, a worker's CUDA view in contract.cuda_view; readers import every record of
# the contract from the package, mpwatch.contract (its one face).
from mpwatch.contract.actions import CheckpointRequest, MemoryRequest, ProfileRequest
from mpwatch.contract.cuda_view import CudaView
from mpwatch.contract.gpu_view import GpuView, MigSlice
from mpwatch.contract.live import TunableStatus
from mpwatch.contract.names import State

# --------------------------------------------------------------------- workers ----
StepsFrom = Literal["auto", "report"]  # where a worker's steps come from (WorkerStatus.steps_from)


class StopInfo(TypedDict):
    """The stop signal mpwatch sent a rank's process (--stop-signal), while it has not ended."""

    signal: str  # "SIGTERM", "SIGUSR2", ...
    sent: float  # wall clock
    kill_in: float | None  # seconds until SIGKILL to everything of the rank, at the status's moment


class ChildStatus(TypedDict):
    """A live descendant of a worker (a DataLoader worker, an mp.Process, a shell...)."""

    pid: int
    pgid: int | None
    cpu_percent: float | None
    rss_bytes: int | None
    status: str  # psutil's process status: running, sleeping, stopped, zombie, disk-sleep
    name: str
    cmd: str
    ppid: int | None
    reporting: bool  # it called mpwatch.report() itself
    step: int | None
    loss: float | None
    heartbeat_age: float | None


class StallInfo(TypedDict):
    """Why a stalled worker is stalled (or a slow start has not reported yet): what it does
    (from /proc) and where (from its dump)."""

    since: float  # wall clock
    step: int | None
    limit: NotRequired[float]  # a slow start: the --startup-timeout it went past
    kind: str  # busy | blocked | stopped | zombie | uninterruptible | gone
    detail: str | None
    wchan: str | None
    gpu: bool
    where: NotRequired[str | None]  # the innermost frame of the user's own code
    innermost: NotRequired[str | None]
    collective: NotRequired[str | None]
    dump: NotRequired[str]  # relative to the run directory


class GpuShare(TypedDict):
    index: int
    mem_bytes: int  # NVML's used memory of the worker's processes on that GPU
    gi: NotRequired[int]  # on a MIG slice of it: the slice's GPU and compute instance
    ci: NotRequired[int]


class WorkerGpu(TypedDict):
    """A worker's GPU, as the supervisor resolved it: its own GPU (torch's device UUID, else
    the GPU where its processes hold the most memory), NVML's memory of its processes,
    torch's view, and the other ranks on the same GPU."""

    index: int | None  # NVML's index of its own GPU
    uuid: str | None
    mapped_by: Literal["uuid", "pid"]  # how `index` was found
    mem_bytes: int | None  # NVML: its processes (children included) on its own GPU
    gpus: list[GpuShare]  # every GPU where its processes hold memory (stray contexts too)
    allocated: int | None  # torch (None when the worker sent no CUDA view)
    reserved: int | None
    peak: int | None
    other_bytes: int | None  # NVML minus torch's reserved: CUDA context and non-torch memory
    fragmentation: int | None  # reserved but not allocated
    alloc_retries: int | None
    ooms: int | None
    sm_util: int | None  # % of SM time of its processes (NVML process samples); None: N/A
    shared_with: list[int]  # other ranks whose own GPU is the same one (a collision)
    mig: NotRequired[MigSlice]  # its own GPU is this MIG slice of GPU `index` (`uuid`: the slice's)


class WorkerMemory(TypedDict):
    """A rank's CUDA memory beyond its counters: its OOM and its allocator snapshots."""

    oom: str | None  # its latest OOM finding's note (supervisor.gpu.oom_story), this process's
    snapshot: str | None  # the latest allocator snapshot it wrote (at an OOM, or asked for)


class RejectedReports(TypedDict):
    """A rank's reports refused by the supervisor (contract.protocol's bounds), each alone."""

    count: int
    why: str  # the latest reason


class Pace(TypedDict):
    """A rank's time a step and in each phase of it over its latest stretches of steps (the
    medians, contract.pace: one slow stretch, a checkpoint save, is no pace), and each phase's
    speed against the other ranks' (contract.straggler)."""

    window_s: float  # the time its stretches cover
    steps: int  # the steps in them
    step_s: float  # seconds a step
    phases: dict[str, float]  # seconds a step in each phase; "other": the step's time in none of them
    # each phase's speed against the median rank's: 1.0 as fast, 0.05 twenty times slower ({} alone)
    relative: dict[str, float]
    # what the supervisor sees slowing its process (short of CPU, its GPU throttled); None: nothing
    why: str | None
    # the work a step holds, where the script reports it (the `work` metric): its median over the same
    # stretches (a step longer by design is judged by its time a unit of work: contract.slowdown)
    work: NotRequired[float]


class WorkerStatus(TypedDict):
    rank: int  # the supervisor's own key for the worker: its local rank on this node
    global_rank: int  # RANK in the worker's environment (multi-node: differs from rank)
    pid: int | None
    state: State  # JSON carries its value; a str of it compares, hashes and formats as the member
    step: int | None
    loss: float | None
    steps_per_s: float | None
    metrics: dict[str, Any]
    heartbeat_age: float | None
    heartbeat: Literal["ok", "waiting", "none"]
    cpu_percent: float | None
    rss_bytes: int | None
    proc_status: str | None
    restarts: int
    exit_code: int | None
    signal: str | None
    cause: str | None
    reports: int
    dropped: int
    bad_frames: int
    rejected: NotRequired[RejectedReports]  # present once a report of the rank was rejected
    # present once an input of the rank (a frame, its stderr, a file) tripped the supervisor's handler of
    # it (supervisor.boundary): how many, and the latest why
    bad_inputs: NotRequired[RejectedReports]
    memory: NotRequired[WorkerMemory]  # present once its process ran out of CUDA memory or wrote a snapshot
    # its tunable declarations the supervisor refused ("NAME: why": a default that is not finite),
    # the first few; present once one was (the tunables declared beside it are kept)
    refused_tunables: NotRequired[list[str]]
    phases: dict[str, float]  # seconds in each phase since its process started (the worker's totals)
    pace: Pace | None  # None until it has stepped for a while, and while it does not step
    cuda: CudaView | None
    # the run's loss smoothed: its mean over stretches of reports, oldest first (TREND)
    loss_tail: list[float]
    world_size: int
    # torch.distributed is initialised in its process (the worker side tells, with its reports):
    # its ranks share a process group, and restarting one alone fails the others' collectives
    dist: bool
    uptime: float | None
    stall: StallInfo | None
    paused_at: float | None  # wall clock of the pause in force (paused by the user); else None
    # No first report within --startup-timeout (it said hello, it has not reported): what it
    # does and where, as a stall's; None once it reports. Never a stall: the state stays.
    slow_start: StallInfo | None
    last_dump: str | None
    unkillable: list[dict[str, Any]] | None
    foreign_groups: list[int]
    children: list[ChildStatus]
    gpu: WorkerGpu | None
    stop: StopInfo | None  # the stop signal mpwatch sent it (--stop-signal), until it ends
    polls_checkpoint: bool  # its process calls mpwatch.should_checkpoint()
    # Where its steps come from: "auto" (its optimizer steps, counted by mpwatch.worker.auto), "report"
    # (mpwatch.report() in the script); None before its first report.
    steps_from: StepsFrom | None
    # A merged view of several nodes (sources.multinode.source) sets these three; `rank` is then the
    # global rank.
    node: NotRequired[int]  # the node rank of the worker's node
    local_rank: NotRequired[int]  # its rank on that node (that supervisor's `rank`)
    node_error: NotRequired[str]  # its node cannot be reached now, and why: the row is its last known


# a merged view's only: no supervisor sets them
MERGED_WORKER_KEYS = frozenset({"node", "local_rank", "node_error"})


# --------------------------------------------------------------------- the run ----
def put_input_notes(row: WorkerStatus, rejected: int, rejected_why: str | None, bad: int, bad_why: str | None,
                    refused: list[str]) -> None:
    """The row's notes of what its rank sent that was refused, where there is any (the live
    status and the replay's rebuilt one alike)."""
    if rejected:
        row["rejected"] = {"count": rejected, "why": rejected_why or "?"}
    if bad:
        row["bad_inputs"] = {"count": bad, "why": bad_why or "?"}
    if refused:
        row["refused_tunables"] = list(refused)


class RunOptions(TypedDict):
    max_restarts: int
    stall_timeout: float
    startup_timeout: float  # no first report this long after a start: a slow start
    grace: float
    resize_mode: str
    stop_signal: str  # --stop-signal: what a rank's process gets first ("SIGTERM")
    metrics: str | None  # --metrics-port: where Prometheus scrapes this node ("127.0.0.1:9400")


class RunInfo(TypedDict):
    id: str
    dir: str
    script: str
    args: list[str]
    state: str  # a RunState value
    pid: int
    started: float  # wall clock
    uptime: float
    world_size: int
    nprocs: int
    counts: dict[str, int]  # State value -> workers in it
    restarts: int
    exit_code: int | None
    stopped: NotRequired[str]  # why it was stopped (a stop asked, a signal), once it was: text.run_end
    options: RunOptions
    refused_connections: int
    node: NodeInfo | None  # a multi-node run: this node and its peers; None on one node
    # the run's pace against its own best (contract.slowdown), present once it has held a pace long
    # enough to have a best (a minute or so of steps past its start)
    pace: NotRequired[RunPace]


class RunPace(TypedDict):
    """The run's steps a second now and at its best sustained pace (contract.slowdown: the median
    stepping rank's pace, pauses aside), and their ratio (a unit of work against a unit of work
    where the script reports its steps' `work`)."""

    steps_per_s: float
    best_steps_per_s: float
    ratio: float  # now against the best: 0.61 is 0.61x as fast; 1.0 at its best
    best_at: float  # wall clock: when the run held its best
    work: NotRequired[float]  # the work a step holds now, and at the best (the `work` metric)
    best_work: NotRequired[float]


class NodePeer(TypedDict):
    """Where another node's supervisor of the same run lives (for `attach` to find it)."""

    node_rank: int
    host: str  # how ssh reaches that machine (its hostname, or --local-addr)
    run_id: str  # its own run id on that machine
    run_dir: str
    pid: int  # its supervisor's pid
    nprocs: NotRequired[int]  # its workers
    base_rank: NotRequired[int]  # global rank of its local rank 0 (its workers: base_rank + local rank)
    state: NotRequired[str]  # up | round (between rounds) | done (its workers ended) | lost (no beat)


class NodeInfo(TypedDict):
    """This node's place in a multi-node run (one supervisor per node, torch's rendezvous)."""

    node_rank: int  # torch's group rank
    nnodes: int
    host: str
    job_id: str  # the rendezvous id (--rdzv-id, or Slurm's job id)
    rdzv_backend: str  # static | c10d
    round: int  # the rendezvous round: c10d restarts every node's workers in a new round
    base_rank: int  # global rank of this node's local rank 0
    world_size: int  # every node's workers together
    peers: list[NodePeer]  # every node of the run, this one included
    # starting (loading torch) | joining (in torch's rendezvous; round -1 before the first) | running |
    # new_round (stopping its workers to join the next) | finishing (its workers ended; waiting for
    # the others)
    state: str
    slurm: str | None  # "job 123 step 0, node 1" when Slurm said where it runs


class StragglerInfo(TypedDict):
    """The straggler finding's numbers (an alert of kind `straggler`, contract.straggler)."""

    rank: int  # its global rank (RunAlert.rank is a node's local one)
    phase: str  # where it loses its time
    own_s: float  # seconds a step in that phase, on it
    others_s: float  # the same on the others (their median)
    wait_phase: str | None  # where the others wait for it
    cost_s: float  # each step is this much slower for it
    lost_s: float  # what it has cost the run since the finding began (cost_s over the steps since)
    reason: str | None  # why, where mpwatch sees it: short of CPU, its GPU throttled, its DataLoader
    node: NotRequired[int]  # a merged view's: the node it runs on


class Outsider(TypedDict):
    """A process outside the run taking the node's CPU (supervisor.diagnose.slowdown_watch)."""

    pid: int
    user: str | None
    name: str
    cmd: str
    cpu: float  # its CPU share over the last look: 1.0 is one CPU


class SlowdownInfo(TypedDict):
    """The slowdown finding's numbers (an alert of kind `slowdown`, contract.slowdown): the run
    slower than its own best sustained pace, since when, what it cost, and what took the machine."""

    since: float  # wall clock: the pace fell under the margin then
    steps_per_s: float  # now
    best_steps_per_s: float
    ratio: float  # now against its best (a unit of work against a unit of work, where reported)
    lost_steps: float  # the steps it cost: those the run would have made at its best pace meanwhile
    lost_s: float  # the seconds it cost: each step since, its time beyond the best
    phase: str | None  # the phase that grew the most, on every rank or on `ranks`
    phase_ratio: float | None  # its time against the rank's own best (the median rank's)
    ranks: list[int]  # the ranks whose `phase` grew (global ranks); all of them: every rank
    causes: list[str]  # what took the machine, as far as mpwatch sees, in words (text.slowdown_text)
    outsiders: list[Outsider]  # the processes outside the run taking the most CPU, the top first
    node: NotRequired[int]  # a merged view's: the node it was seen on


# The run's own alerts (supervisor.eventlog's alert): every kind, so that a reader can list each one at 0
# while it is not there (the metrics do, as they do the GPU alerts' ALERT_KINDS)
RunAlertKind = Literal["disk", "hang", "straggler", "slowdown", "unkillable", "internal", "node_lost",
                       "rendezvous"]
RUN_ALERT_KINDS = frozenset(get_args(RunAlertKind))


class RunAlert(TypedDict):
    ts: float
    kind: str  # a RunAlertKind (a str: a run of another mpwatch may have others)
    message: str
    rank: int | None
    key: NotRequired[str]  # names the condition: a later alert with the same key replaces this one
    culprits: NotRequired[list[int]]
    waiting: NotRequired[list[int]]
    processes: NotRequired[list[dict[str, Any]]]
    straggler: NotRequired[StragglerInfo]  # a straggler finding's numbers
    slowdown: NotRequired[SlowdownInfo]  # a slowdown finding's numbers


class Lag(TypedDict):
    rank: int
    step: int
    lag: int


class Culprit(TypedDict):
    """Each rank's lag behind the leading step and, while ranks are stalled, the likely culprit
    of a collective hang (contract.culprit). Not the straggler finding: a rank that is slow at
    every step is an alert of kind `straggler` (contract.straggler)."""

    leader_step: int
    lags: list[Lag]
    culprits: list[int]
    waiting: list[int]
    text: str | None  # None while nothing is stalled


class Status(TypedDict):
    """What `ctl status --json` prints, the TUI draws and final.json keeps."""

    run: RunInfo
    workers: list[WorkerStatus]
    gpus: list[GpuView]
    gpu_status: str | None  # one line when there is no GPU data, or only part of it
    alerts: list[RunAlert]
    events_seq: int
    # lags and the hang's culprit (contract.culprit); the key kept its first name for `ctl status
    # --json` users, and the straggler finding is an alert of kind `straggler`
    straggler: Culprit | None
    tunables: list[TunableStatus]  # mpwatch.tunable()'s values, by name (contract.live)
    checkpoints: list[CheckpointRequest]  # the last "checkpoint now" requests
    # the last profiles asked (contract.actions) and each rank's trace; present once one was asked
    profiles: NotRequired[list[ProfileRequest]]
    # the last CUDA memory snapshots asked and each rank's file; present once one was asked
    memory_snapshots: NotRequired[list[MemoryRequest]]
    # a merged view of several nodes (sources.multinode.source): each one's state
    nodes: NotRequired[list[NodeStatus]]


class NodeStatus(TypedDict):
    """One node of a merged view, as the viewer sees it (its reachability is the viewer's)."""

    node: int  # its node rank (NodeInfo.node_rank), else its place among the runs attached to
    host: str  # how ssh reaches it; "" for this machine
    run_id: str | None  # its supervisor's run id there (None until first reached)
    reachable: bool
    error: str | None  # why it cannot be reached now (ssh's words), or None
    down_for: float | None  # seconds it has been unreachable (the viewer's clock)
    finished: bool  # its run has ended there
    base_rank: int  # global rank of its local rank 0
    workers: int
    counts: dict[str, int]  # State value -> its workers in it (the last known)
