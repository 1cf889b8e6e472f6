"""The run as its notable events tell it, up to a moment: each rank's state, pid, attempt,
restarts, exit, stall (with where its dump found it stuck) and last dump; the run's state,
alerts and GPU alerts. Pure: a fold over status.EventFields records in the order the
supervisor wrote them (supervisor.workers.states's transitions are what each event records).
Report events are not folded here: steps and losses come from sources.replay.files at the cursor.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from mpwatch.contract import (
    Event,
    EventFields,
    GpuAlert,
    RunAlert,
    RunState,
    StallInfo,
    State,
    WorkerMemory,
    alert_kind,
    as_float,
    as_int,
    as_str,
    keep_refused,
    slowdown,
    straggler,
)
from mpwatch.rundir import live_events
from mpwatch.text import eventtext

ALERTS_KEPT = 50  # as the supervisor's status keeps (supervisor.eventlog)


@dataclass
class RankFold:
    rank: int
    pid: int | None = None
    global_rank: int | None = None  # RANK, from worker_started (several nodes: not rank)
    state: State = State.STARTING
    started: float | None = None  # this attempt's start (wall clock)
    world: int | None = None
    restarts: int = 0
    exit_code: int | None = None
    signal: str | None = None
    cause: str | None = None
    stall: StallInfo | None = None
    slow_start: StallInfo | None = None  # this attempt's slow start (shown until its first report)
    paused_at: float | None = None  # wall clock of the pause in force
    last_dump: str | None = None
    bad_frames: int = 0
    rejected: int = 0  # reports refused by the supervisor (reports_rejected), and the latest why
    rejected_why: str | None = None
    bad_inputs: int = 0  # its inputs that tripped the supervisor (bad_input), and the latest why
    bad_input_why: str | None = None
    refused_tunables: list[str] = field(default_factory=list)  # "NAME: why", as the status lists them
    unkillable: list[dict[str, Any]] | None = None
    memory: WorkerMemory | None = None  # this attempt's OOM finding's note and snapshot (gpu_alert oom)


@dataclass
class RunFold:
    state: str = RunState.RUNNING
    exit_code: int | None = None
    stopped: str | None = None  # why the run was stopped, once it was (stopping's `why`)
    restarts: int = 0
    world: int | None = None
    ranks: dict[int, RankFold] = field(default_factory=dict)
    alerts: list[RunAlert] = field(default_factory=list)
    gpu_alerts: dict[str, GpuAlert] = field(default_factory=dict)  # key -> the alert, as it started last
    hang: EventFields | None = None  # the last culprit finding (an `alert` of kind hang)
    # tunables and checkpoint requests
    live: live_events.LiveFold = field(default_factory=live_events.LiveFold)


def restarting_exits(events: Sequence[EventFields]) -> set[int]:
    """Positions of failures followed by a start of the same rank: live, the rank showed
    `restarting` from its exit until then (the supervisor records no event for that move)."""
    out: set[int] = set()
    failed: dict[int, int] = {}  # rank -> position of its last failure with no start since
    for i, e in enumerate(events):
        r = e["rank"]
        if e["event"] in (Event.STOPPING, Event.RESIZED):
            failed.clear()
        elif r is None:
            continue
        elif e["event"] == Event.WORKER_EXITED:
            if eventtext.exit_state(e) == State.FAILED:
                failed[r] = i
            else:
                failed.pop(r, None)
        elif e["event"] == Event.WORKER_STARTED and r in failed:
            out.add(failed.pop(r))
    return out


def fold(events: Sequence[EventFields], upto: int, run_dir: Path, restarting: set[int]) -> RunFold:
    """The run after events[0..upto] (inclusive)."""
    run = RunFold()
    for i in range(min(upto + 1, len(events))):
        e = events[i]
        r = e["rank"]
        name = e["event"]
        if name in live_events.LIVE_EVENTS:
            live_events.apply(run.live, e)
            if name == Event.MEMORY_WRITTEN and r is not None and r in run.ranks:
                _snapshot(run.ranks[r], e, run_dir)
        elif r is not None and name != Event.GPU_ALERT and name != Event.ALERT:
            _rank_event(run, run.ranks.setdefault(r, RankFold(r)), e, i in restarting, run_dir)
        elif name in (Event.ALERT, Event.GPU_ALERT) or r is None:
            _run_event(run, e)
        if name == Event.ALERT and r is not None and e.get("kind") == "unkillable" and r in run.ranks:
            run.ranks[r].unkillable = [p for p in (cast(Any, e).get("processes") or [])
                                       if isinstance(p, dict)]
    return run


def _snapshot(k: RankFold, e: EventFields, run_dir: Path) -> None:
    """A snapshot the rank wrote when asked (ctl memory): its newest, beside its OOM's note."""
    path = as_str(cast(dict[str, Any], e).get("path"))
    if path is not None:
        k.memory = {"oom": k.memory["oom"] if k.memory is not None else None, "snapshot": str(run_dir / path)}


def _rank_event(run: RunFold, k: RankFold, e: EventFields, restarting: bool, run_dir: Path) -> None:
    name = e["event"]
    if name == Event.WORKER_STARTED:
        k.pid, k.state, k.started = as_int(e.get("pid")), State.STARTING, e["ts"]
        k.global_rank = as_int(e.get("global_rank"))
        k.exit_code = k.signal = k.cause = None
        k.stall, k.slow_start, k.unkillable, k.memory = None, None, None, None
        k.world = as_int(e.get("world_size")) or k.world
        run.world = k.world or run.world
    elif name == Event.WORKER_EXITED:
        k.state = State.RESTARTING if restarting else eventtext.exit_state(e)
        k.exit_code, k.signal, k.cause = (as_int(e.get("exit_code")), as_str(e.get("signal")),
                                          as_str(e.get("cause")))
        k.pid = as_int(e.get("pid")) or k.pid
        k.stall = None
    elif name == Event.STALLED:
        k.state = State.STALLED
        silent = as_float(e.get("silent_for")) or 0.0
        k.stall = StallInfo(since=e["ts"] - silent, step=as_int(e.get("step")),
                            kind=as_str(e.get("kind")) or "", detail=as_str(e.get("detail")),
                            wchan=as_str(e.get("wchan")), gpu=e.get("gpu") is True)
    elif name == Event.SLOW_START:
        k.slow_start = StallInfo(since=k.started if k.started is not None else e["ts"], step=None,
                                 kind=as_str(e.get("kind")) or "", detail=as_str(e.get("detail")),
                                 wchan=as_str(e.get("wchan")), gpu=e.get("gpu") is True)
        limit = as_float(e.get("limit"))
        if limit is not None:
            k.slow_start["limit"] = limit
    elif name in (Event.RECOVERED, Event.RESUMED):
        k.state, k.stall, k.paused_at = State.RUNNING, None, None
    elif name == Event.PAUSED:
        k.state, k.paused_at = State.PAUSED, e["ts"]
    elif name == Event.RESTARTED:
        k.restarts += 1
        run.restarts += 1
    elif name == Event.DUMP:
        _dump(k, e, run_dir)
    elif name == Event.BAD_FRAME:
        k.bad_frames = as_int(e.get("count")) or k.bad_frames + 1
    elif name == Event.REPORTS_REJECTED:
        k.rejected = as_int(e.get("count")) or k.rejected + 1
        k.rejected_why = as_str(e.get("why")) or k.rejected_why
    elif name == Event.BAD_INPUT:
        k.bad_inputs = as_int(e.get("count")) or k.bad_inputs + 1
        what, why = as_str(e.get("what")), as_str(e.get("why"))
        k.bad_input_why = f"{what}: {why}" if what and why else why or k.bad_input_why
    elif name == Event.TUNABLE_REFUSED:
        keep_refused(k.refused_tunables, f"{as_str(e.get('tunable')) or '?'}: {as_str(e.get('why')) or '?'}")


def _dump(k: RankFold, e: EventFields, run_dir: Path) -> None:
    """A rank's stack dump: its file, and what it says of the stall or slow start it was for."""
    path = as_str(e.get("path"))
    if path:
        k.last_dump = str(run_dir / path)
    info = k.stall if e.get("reason") == "stall" and k.state == State.STALLED else \
        k.slow_start if e.get("reason") == "slow start" else None
    if info is not None:
        info["where"], info["innermost"] = as_str(e.get("where")), as_str(e.get("innermost"))
        info["collective"] = as_str(e.get("collective"))
        if path:
            info["dump"] = path


def _run_event(run: RunFold, e: EventFields) -> None:
    name = e["event"]
    if name == Event.STOPPING:
        run.state = RunState.STOPPING
        run.stopped = run.stopped or as_str(e.get("why")) or "?"
    elif name == Event.RUN_FINISHED:
        run.state, run.exit_code = RunState.FINISHED, as_int(e.get("exit_code"))
    elif name == Event.RESIZED:
        to = as_int(e.get("to"))
        if to is not None:
            run.world = to
            for r in [r for r in run.ranks if r >= to]:
                del run.ranks[r]
    elif name == Event.ALERT:
        _alert(run, e)
    elif name == Event.GPU_ALERT:
        _gpu_alert(run, e)


def _alert(run: RunFold, e: EventFields) -> None:
    """A run alert as the supervisor kept it (supervisor.eventlog): one of a standing key
    replaces it in place; an `ended` one takes it away."""
    key = as_str(e.get("key"))
    at = next((i for i, a in enumerate(run.alerts) if key is not None and a.get("key") == key), None)
    if e.get("ended"):
        if at is not None:
            del run.alerts[at]
        if key is not None and run.hang is not None and run.hang.get("key") == key:
            run.hang = None
        return
    a = RunAlert(ts=e["ts"], kind=as_str(e.get("kind")) or "?", message=as_str(e.get("message")) or "",
                 rank=e["rank"])
    if key is not None:
        a["key"] = key
    culprits, waiting = e.get("culprits"), e.get("waiting")
    if isinstance(culprits, list):
        a["culprits"] = [x for x in culprits if isinstance(x, int)]
    if isinstance(waiting, list):
        a["waiting"] = [x for x in waiting if isinstance(x, int)]
    found = straggler.read_info(e.get("straggler"))
    if found is not None:  # a straggler's numbers: what it had cost the run by then
        a["straggler"] = found
    slower = slowdown.read_info(e.get("slowdown"))
    if slower is not None:  # a slowdown's: since when, and what it had cost the run by then
        a["slowdown"] = slower
    if at is None:
        run.alerts = (run.alerts + [a])[-ALERTS_KEPT:]
    else:
        a["ts"] = run.alerts[at]["ts"]
        run.alerts[at] = a
    if a["kind"] == "hang":
        run.hang = e


def _gpu_alert(run: RunFold, e: EventFields) -> None:
    raw = cast(dict[str, Any], e)
    kind = alert_kind(raw.get("kind"))
    if kind is None:  # not a kind this mpwatch knows (a garbled line): nothing to show it by
        return
    gpu, gi, ci = as_int(raw.get("gpu")), as_int(raw.get("gi")), as_int(raw.get("ci"))
    key = f"{kind}:{gpu}:{e['rank']}" + (f":{gi}/{ci}" if gi is not None else "")
    before = run.gpu_alerts.get(key) if raw.get("update") else None  # the same finding, completed
    a = GpuAlert(kind=kind, key=key, gpu=gpu, rank=e["rank"], message=as_str(raw.get("message")) or "",
                 since=before["since"] if before is not None else e["ts"])
    if gi is not None and ci is not None:  # about a MIG slice of that GPU
        a["gi"], a["ci"] = gi, ci
    sev = raw.get("severity")
    if sev in ("error", "warning", "info"):
        a["severity"] = sev
    hint, short, line = as_str(raw.get("hint")), as_str(raw.get("short")), as_str(raw.get("line"))
    if hint is not None:
        a["hint"] = hint
    if short is not None:
        a["short"] = short
    if line is not None:
        a["line"] = line
    if isinstance(raw.get("ranks"), list):
        a["ranks"] = [x for x in raw["ranks"] if isinstance(x, int)]
    run.gpu_alerts[key] = a
    detail = raw.get("oom")
    r = e["rank"]
    if kind == "oom" and isinstance(detail, dict) and r is not None and r in run.ranks:
        note, snap = as_str(detail.get("note")), as_str(detail.get("snapshot"))
        run.ranks[r].memory = {"oom": note, "snapshot": snap}  # the table's words (supervisor.gpu.oom_story)
