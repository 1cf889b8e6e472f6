"""The actions a control request asks of ranks at one step, and each rank's answer: one
mechanism for "checkpoint now" (mpwatch.should_checkpoint() is True once) and for the actions a
rank runs itself at a step boundary, with an outcome that comes later (a profile: torch.profiler
for N steps, its trace written into rank-N/profiles/; a CUDA memory snapshot: torch's allocator
snapshot pickled into rank-N/memory/, as pytorch.org/memory_viz opens it).

`ACTIONS` is the table: for each action, its events (asked, started, written, failed, missed),
the least channel protocol a worker must speak to run it, whether it has an outcome, the folder
of the rank's files it writes, and its list in the status. The status records are here too
(ActionRequest, and a rank's outcome, FileResult; `record` makes one, the same for the live
desk, the replay's fold and a merged view), with the rules every reader shares: the arguments a
request may carry, a worker's result bounded, a rank's state in a request.

Adding an action (as the memory snapshot was): its Events (contract.names) and its row
here (its folder, its files' suffix and tool, its status list's key and the arguments its record
carries; the arguments checked in `check_args`); its frame name in contract.protocol
(STEP_ACTIONS, and TORCH_ACTIONS when it needs torch); its runner in
mpwatch.worker.actions.RUNNERS (a module whose `begin` answers and writes through
rundir.rank_files); its list's key in contract.status.Status, which the schema and its readers
check (with a typed record like ProfileRequest, a LiveView accessor and postmortem's Summary
key for the readers that name it); a ctl subcommand (Source.ask(NAME, ...)) and a key. Asking,
sending, resending after a reconnect, the answers and outcomes, their events and the missed
ones, the status's lists (the registry's, the replay's fold, the merged view's join) are this
mechanism's. Pure; any thread.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypedDict, cast

from mpwatch.contract import protocol
from mpwatch.contract.names import Event

PROFILE_STEPS = 5  # `ctl profile` without --steps
PROFILE_STEPS_MAX = 50  # a trace of more steps is seldom read and may be gigabytes
TOP_OPS = 10  # operators a profile's answer lists (by self time)
OP_NAME_MAX = 160
WHY_MAX = 300
PATH_MAX = 4096


class RankAnswer(TypedDict):
    """A rank's answer to a request: the step it took effect at (None: the process had
    reported no step), and whether that was past the step asked for."""

    rank: int
    step: int | None
    late: bool


class TopOp(TypedDict):
    """One operator of a profile, by its self time over the steps profiled."""

    name: str  # aten::mm, Optimizer.step#SGD.step, ...
    self_cpu_us: float
    self_device_us: float | None  # its self time on the GPU; None where the rank used none
    calls: int


class FileResult(TypedDict):
    """What a rank's action left: a file written (its path and size), or why none was."""

    rank: int
    state: Literal["written", "failed"]
    tool: str  # what made it: torch.profiler, py-spy, torch.cuda.memory
    path: str | None  # relative to the run directory (written; else where it was to go)
    bytes: int | None
    why: str | None  # failed: why; written: a note (cut short, ...) or None
    steps: int | None  # a profile: the steps it holds (fewer than asked when cut short)
    top: list[TopOp]  # a profile: its top operators by self time (none from py-spy)
    held_ms: float | None  # a profile: how long the training loop waited for the profiler's start and stop


class ActionRequest(TypedDict):
    """A request of an action at one step, and what each rank asked did."""

    id: int
    ts: float  # wall clock of the request
    by: str  # who asked: "ctl", "tui", with the user and host
    step: int | None  # the step it is taken at on every rank; None: at each rank's next call
    ranks: list[int]  # the ranks asked
    answers: list[RankAnswer]  # the ranks it started on (or was taken by, a checkpoint)
    waiting: list[int]  # ranks asked that have not answered (nor ended first)
    missed: list[int]  # ranks whose process ended before they answered


class CheckpointRequest(ActionRequest):
    """A "checkpoint now" (`mpwatch ctl checkpoint`, the TUI's `c`)."""


class ProfileRequest(ActionRequest):
    """A profile (`mpwatch ctl profile`, the TUI's `o`): from the step after `step` for `steps` steps."""

    steps: int
    results: list[FileResult]  # each rank's outcome, once it has one


class MemoryRequest(ActionRequest):
    """A CUDA memory snapshot (`mpwatch ctl memory`, the TUI's `M`): torch.cuda.memory._snapshot()
    at the step boundary after `step`, pickled into rank-N/memory/."""

    results: list[FileResult]  # each rank's outcome, once it has one


RankState = Literal["asked", "running", "written", "failed", "missed"]


@dataclass(frozen=True)
class Action:
    name: str  # the request's frame type, its ctl command and its status list's kind
    requested: Event
    started: Event  # a rank answered: it took it (a checkpoint) or started (a profile)
    missed: Event  # a rank's process ended before it answered
    written: Event | None = None  # the outcome, for an action that has one
    failed: Event | None = None
    version: int = protocol.DOWN_VERSION  # the least channel protocol of a worker that runs it
    folder: str | None = None  # where in rank-N/ its files go (rundir.layout: PROFILES, MEMORY)
    suffix: str = ".json.gz"  # its files' (rundir.layout: a profile's trace, a snapshot's pickle)
    tool: str = ""  # what writes its file in the rank (an outcome's `tool` unless it says another)
    key: str = ""  # its list in the status (Status.checkpoints, .profiles, .memory_snapshots)
    fields: tuple[str, ...] = ()  # the arguments (ints) its status record carries: a profile's steps
    always: bool = False  # its list is in every status; else once one was asked (no recording drifts)

    @property
    def has_outcome(self) -> bool:
        return self.written is not None

    @property
    def events(self) -> tuple[Event, ...]:
        return tuple(e for e in (self.requested, self.started, self.missed, self.written, self.failed)
                     if e is not None)


CHECKPOINT = Action(protocol.CHECKPOINT, Event.CHECKPOINT_REQUESTED, Event.CHECKPOINT_TAKEN,
                    Event.CHECKPOINT_MISSED, key="checkpoints", always=True)
PROFILE = Action(protocol.PROFILE, Event.PROFILE_REQUESTED, Event.PROFILE_STARTED, Event.PROFILE_MISSED,
                 Event.PROFILE_WRITTEN, Event.PROFILE_FAILED, protocol.ACT_VERSION, folder="profiles",
                 suffix=".json.gz", tool="torch.profiler", key="profiles", fields=("steps",))
MEMORY = Action(protocol.MEMORY, Event.MEMORY_REQUESTED, Event.MEMORY_STARTED, Event.MEMORY_MISSED,
                Event.MEMORY_WRITTEN, Event.MEMORY_FAILED, protocol.ACT_VERSION, folder="memory",
                suffix=".pickle", tool="torch.cuda.memory", key="memory_snapshots")
ACTIONS: dict[str, Action] = {a.name: a for a in (CHECKPOINT, PROFILE, MEMORY)}
KEPT = 8  # requests of each action a status keeps (the newest)


def check_args(name: str, raw: dict[str, Any]) -> dict[str, Any]:
    """The arguments a request of action `name` carries (from a control request), checked;
    ValueError says why not, in words for one line."""
    if name == protocol.PROFILE:
        steps = raw.get("steps", PROFILE_STEPS)
        if type(steps) is not int or not 1 <= steps <= PROFILE_STEPS_MAX:
            raise ValueError(f"a profile is of 1 to {PROFILE_STEPS_MAX} steps, not {str(steps)[:20]}")
        return {"steps": steps}
    return {}


def _text(v: object, limit: int) -> str | None:
    return v[:limit] if isinstance(v, str) else None


def _count(v: object) -> int | None:
    return v if type(v) is int and 0 <= v < 1 << 62 else None


def _us(v: object) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e15:  # also NaN
        return round(float(v), 1)
    return None


def top_ops(raw: object) -> list[TopOp]:
    """A result's `top`: rows [name, self cpu us, self device us | None, calls], bounded."""
    out: list[TopOp] = []
    for row in raw[:TOP_OPS] if isinstance(raw, list) else []:
        if not isinstance(row, list) or len(row) != 4:
            continue
        name, cpu, dev, calls = _text(row[0], OP_NAME_MAX), _us(row[1]), _us(row[2]), _count(row[3])
        if name is not None and cpu is not None and calls is not None:
            out.append(TopOp(name=name, self_cpu_us=cpu, self_device_us=dev, calls=calls))
    return out


def read_result(rank: int, fields: dict[str, Any], tool: str, path: str | None) -> FileResult:
    """A worker's result entry (protocol.LIVE_RESULT), bounded: the path is the one the
    supervisor chose, never the worker's word."""
    state: Literal["written", "failed"] = "written" if fields.get("state") == "written" else "failed"
    why = _text(fields.get("why"), WHY_MAX)
    if state == "failed" and not why:
        why = "no reason given"
    return FileResult(rank=rank, state=state, tool=_text(fields.get("tool"), 40) or tool,
                      path=path, bytes=_count(fields.get("bytes")) if state == "written" else None,
                      why=why, steps=_count(fields.get("steps")), top=top_ops(fields.get("top")),
                      held_ms=_us(fields.get("held_ms")))


def record(action: Action, base: ActionRequest, args: Mapping[str, object],
           results: list[FileResult]) -> ActionRequest:
    """A request's status record: its own fields (`base`), the arguments its row names (0 when
    one is missing) and, for an action with an outcome, each rank's. CheckpointRequest,
    ProfileRequest and MemoryRequest are its typed views."""
    out: dict[str, Any] = {**base}
    for k in action.fields:
        v = args.get(k)
        out[k] = v if type(v) is int else 0
    if action.has_outcome:
        out["results"] = results
    return cast(ActionRequest, out)


def rank_state(req: ActionRequest, rank: int, results: list[FileResult] | None = None) -> RankState | None:
    """Where a request stands on one rank: asked (not started), running (started, no outcome
    yet), written, failed, missed (its process ended first); None: not asked of it. `results`:
    the outcomes of an action that has them (a ProfileRequest's)."""
    if rank in req["missed"]:
        return "missed"
    for r in results or []:
        if r["rank"] == rank:
            return "written" if r["state"] == "written" else "failed"
    if any(a["rank"] == rank for a in req["answers"]):
        return "running"
    return "asked" if rank in req["ranks"] else None


def rank_states(req: ActionRequest, results: list[FileResult] | None = None) -> dict[int, RankState]:
    """rank_state of every rank asked, in one pass over the request's lists (a request of 60,000
    ranks: rank_state for each would be quadratic)."""
    out: dict[int, RankState] = dict.fromkeys(req["ranks"], "asked")
    for a in req["answers"]:
        out[a["rank"]] = "running"
    for r in results or []:
        out[r["rank"]] = "written" if r["state"] == "written" else "failed"
    for rank in req["missed"]:
        out[rank] = "missed"
    return out


def newest_written(reqs: list[MemoryRequest], rank: int, since: float) -> tuple[float, str] | None:
    """(its request's time, its path) of the newest file a rank wrote for requests made from `since`
    on (its current process's), or None."""
    best: tuple[float, str] | None = None
    for req in reqs:
        r = next((r for r in req["results"] if r["rank"] == rank and r["state"] == "written"), None)
        if r is not None and r["path"] and req["ts"] >= since and (best is None or req["ts"] > best[0]):
            best = (req["ts"], r["path"])
    return best


def profile_span(req: ProfileRequest, rank: int) -> tuple[int, int] | None:
    """The steps a rank's profile holds (first, last), from the step it started at: it starts
    once that step is reported, so the first step it holds is the next one."""
    a = next((a for a in req["answers"] if a["rank"] == rank), None)
    start = a["step"] if a is not None and a["step"] is not None else req["step"]
    if start is None:
        return None
    r = next((r for r in req["results"] if r["rank"] == rank), None)
    n = r["steps"] if r is not None and r["steps"] is not None else req["steps"]
    return start + 1, start + max(n, 1)
