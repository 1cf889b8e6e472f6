"""The snapshot builder: fills contract.status's `Status` from the run's rooms.

What `ctl status --json` prints, the TUI draws, the headless lines summarise and
final.json keeps. Called on control threads (and by the main thread at the end) under the
run's lock, so it only copies: a worker row never shares a mutable dict with the run.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

from mpwatch.contract import (
    ChildStatus,
    GpuView,
    MemoryRequest,
    Pace,
    RunInfo,
    RunState,
    State,
    Status,
    StopInfo,
    WorkerMemory,
    WorkerStatus,
    culprit,
    newest_written,
    put_input_notes,
    straggler,
)
from mpwatch.probes.procs import ProcInfo
from mpwatch.supervisor import boundary
from mpwatch.supervisor.diagnose import slowness
from mpwatch.supervisor.diagnose.slowdown_watch import SlowdownWatch
from mpwatch.supervisor.eventlog import EventLog
from mpwatch.supervisor.gpu.watch import GpuWatch
from mpwatch.supervisor.live.records import Registry
from mpwatch.supervisor.live.room import LiveRoom
from mpwatch.supervisor.nodes.cluster import Nodes
from mpwatch.supervisor.options import Options
from mpwatch.supervisor.workers.worker import TAIL, Attempt, ChildReport, Worker


class RunView(Protocol):
    """What the snapshot reads of the run (supervisor.core's Run)."""

    lock: threading.RLock
    workers: dict[int, Worker]
    opts: Options
    run_id: str
    run_dir: Path
    started: float  # monotonic
    started_wall: float
    state: RunState
    world: int
    restarts_total: int
    exit_code: int | None
    stopped_why: str | None
    log: EventLog
    gpu: GpuWatch
    live: LiveRoom
    nodes: Nodes | None  # several nodes
    slowdowns: SlowdownWatch  # the run's pace against its own best
    metrics_at: str | None  # where Prometheus scrapes this node (supervisor.metrics), or None

    def refused_connections(self) -> int: ...


def build(run: RunView, tail: int = TAIL) -> Status:
    """The status. Each room's part is built behind the fault boundary (supervisor.boundary): a
    part that fails is left out (a worker's row then is its `bare_row`), never the status."""
    now, b = time.monotonic(), boundary.current()
    with run.lock:
        panel: Mapping[str, Any] = b.call("GPU watcher", run.gpu.snapshot, default=NO_PANEL)
        node = b.call("slowness", _node, run, panel, default=slowness.Node())
        live = b.call("live room", run.live.status, default=Registry().status())
        workers = []
        for rank in sorted(run.workers):
            w = run.workers[rank]
            grank = rank if run.nodes is None else run.nodes.global_rank(rank)
            row = b.call("snapshot", worker_status, w, now, tail, run.gpu, grank, live.memory_snapshots,
                         run.run_dir, node, default=None)
            workers.append(row if row is not None else bare_row(w, now, grank))
        b.call("straggler watch", straggler.fill_relative, workers, default=None)
        st = Status(
            run=_info(run, now, workers), workers=workers,
            gpus=cast(list[GpuView], panel.get("gpus", [])),  # GpuWatch builds them as contract.status says
            gpu_status=panel.get("gpu_status"),
            alerts=run.log.alerts(), events_seq=run.log.seq,
            # lags, and the likely culprit of a hang
            straggler=b.call("hang's culprit", culprit.analyze, workers, default=None),
            tunables=live.tunables, checkpoints=live.checkpoints)
        return live.into(st)  # each action's list (contract.live.LiveView)


NO_PANEL: Mapping[str, Any] = {"gpus": [], "gpu_status": "the GPU watcher failed (see supervisor.log)"}


def _node(run: RunView, panel: Mapping[str, Any]) -> slowness.Node:
    """What slows the node's processes now (short of CPU, a GPU throttled)."""
    return slowness.Node.now({r: w.attempt.proc_info for r, w in run.workers.items()},
                             gpu_reasons(run.gpu, panel.get("gpus", []), run.workers))


def _info(run: RunView, now: float, workers: list[WorkerStatus]) -> RunInfo:
    counts: dict[str, int] = {}
    for w in workers:
        counts[w["state"].value] = counts.get(w["state"].value, 0) + 1
    o = run.opts
    info = RunInfo(
        id=run.run_id, dir=str(run.run_dir), script=o.script, args=list(o.args), state=run.state.value,
        pid=os.getpid(), started=run.started_wall, uptime=round(now - run.started, 1),
        world_size=run.world, nprocs=len(run.workers), counts=counts, restarts=run.restarts_total,
        exit_code=run.exit_code,
        options={"max_restarts": o.max_restarts, "stall_timeout": o.stall_timeout,
                 "startup_timeout": o.startup_timeout, "grace": o.grace, "resize_mode": o.resize_mode,
                 "stop_signal": o.stop_signal, "metrics": run.metrics_at},
        refused_connections=run.refused_connections(),
        node=None if run.nodes is None else run.nodes.info())
    if run.stopped_why is not None:  # how the run ended says it was stopped (text.run_end)
        info["stopped"] = run.stopped_why
    if (pace := run.slowdowns.pace) is not None:  # once the run has a best (contract.slowdown)
        info["pace"] = pace.copy()
    return info


def bare(run: RunView) -> Status:
    """The status from the run's own fields alone (no room's part): final.json's when the whole
    status could not be built, so that a run still ends with its ranks' states and causes."""
    now = time.monotonic()
    workers = [bare_row(run.workers[r], now, r) for r in sorted(run.workers)]
    return Status(run=_info(run, now, workers), workers=workers, gpus=[],
                  gpu_status="the status could not be built whole (see supervisor.log)",
                  alerts=run.log.alerts(), events_seq=run.log.seq, straggler=None, tunables=[],
                  checkpoints=[])


def bare_row(w: Worker, now: float, global_rank: int) -> WorkerStatus:
    """A worker's row from its own fields alone: its state, progress and end (its cause)."""
    a, r = w.attempt, w.reports
    return WorkerStatus(
        rank=w.rank, global_rank=global_rank, pid=a.pid, state=w.state, step=r.step, loss=r.loss,
        steps_per_s=None, metrics={},
        heartbeat_age=None if a.last_report is None else round(now - a.last_report, 2),
        heartbeat="ok" if a.last_report is not None else "none", cpu_percent=None, rss_bytes=None,
        proc_status=None, restarts=w.restarts, exit_code=a.exit_code, signal=a.signal, cause=a.cause,
        reports=r.count, dropped=r.dropped, bad_frames=r.bad_frames, phases={}, pace=None, cuda=None,
        loss_tail=[], world_size=a.world, dist=a.dist, uptime=None, stall=None, paused_at=None,
        slow_start=None, last_dump=w.last_dump, unkillable=a.unkillable,
        foreign_groups=sorted(w.foreign_groups), children=[], gpu=None, stop=None,
        polls_checkpoint=a.polls, steps_from=r.source)


def gpu_reasons(gpu: GpuWatch, views: Sequence[GpuView], workers: Mapping[int, Worker]) -> dict[int, str]:
    """The ranks whose own GPU is throttled (slowness.gpu_reasons), placed as the GPU watcher did."""
    placed = {r: (g["index"] if (g := gpu.worker_gpu(r)) is not None else None)
              for r, w in workers.items() if w.alive}
    return slowness.gpu_reasons(views, placed)


def pace(w: Worker, node: slowness.Node | None = None) -> Pace | None:
    """A stepping rank's pace (contract.pace), with what slows its process (node: what it is
    compared with); None for one that does not step (paused, stalled, ended)."""
    if w.state is not State.RUNNING:
        return None
    p = w.attempt.pace.pace(time.time())
    if p is not None:
        p["why"] = (node or slowness.Node()).why(w.rank, w.attempt.proc_info)
    return p


def worker_status(w: Worker, now: float, tail: int, gpu: GpuWatch | None,
                  global_rank: int | None = None, snapshots: list[MemoryRequest] | None = None,
                  run_dir: Path | None = None, node: slowness.Node | None = None) -> WorkerStatus:
    a, r = w.attempt, w.reports
    alive = w.alive
    info = a.proc_info if alive else None
    children = [child_status(c, a.children.get(c["pid"]), now)
                for c in (info.get("children", []) if info else [])]
    row = WorkerStatus(
        rank=w.rank, global_rank=w.rank if global_rank is None else global_rank,  # RANK: on one node, rank
        pid=a.pid, state=w.state, step=r.step, loss=r.loss,
        # A paused, stalled or ended worker makes no progress, whatever its last window says.
        steps_per_s=(a.steps_per_second(now) if w.state in (State.RUNNING, State.STARTING)
                     else (0.0 if alive else None)),
        metrics=dict(r.metrics),
        heartbeat_age=None if a.last_report is None else round(now - a.last_report, 2),
        heartbeat="ok" if a.last_report is not None else ("waiting" if a.connected else "none"),
        cpu_percent=None if info is None else info["cpu_percent"],
        rss_bytes=None if info is None else info["rss_bytes"],
        proc_status=None if info is None else info["status"],
        restarts=w.restarts, exit_code=a.exit_code, signal=a.signal, cause=a.cause,
        reports=r.count, dropped=r.dropped, bad_frames=r.bad_frames,
        phases=dict(r.phases), pace=pace(w, node), cuda=r.cuda, loss_tail=r.trend.points(tail),
        world_size=a.world, dist=a.dist, uptime=round(now - a.started, 1) if a.proc is not None else None,
        stall=None if a.stall is None else a.stall.copy(),  # a copy: dump threads update it
        paused_at=a.paused_at if w.state is State.PAUSED else None,
        slow_start=None if a.slow_start is None else a.slow_start.copy(),
        last_dump=w.last_dump, unkillable=a.unkillable,
        foreign_groups=sorted(w.foreign_groups),
        children=children,
        gpu=gpu.worker_gpu(w.rank) if gpu is not None and alive else None,
        stop=stop_info(a, now) if alive else None, polls_checkpoint=a.polls, steps_from=r.source)
    put_input_notes(row, r.rejected, r.rejected_why, r.bad_inputs, r.bad_input_why, list(r.refused_tunables))
    memory = _memory(w, gpu, snapshots or [], run_dir)
    if memory is not None:
        row["memory"] = memory
    return row


def _memory(w: Worker, gpu: GpuWatch | None, snapshots: list[MemoryRequest],
            run_dir: Path | None) -> WorkerMemory | None:
    """Its process's OOM (the finding's note) and its newest allocator snapshot: the one written
    at that OOM, or one asked since (`ctl memory`), whichever is later."""
    oom = gpu.memory(w.rank, w.attempt.pid) if gpu is not None else None
    asked = newest_written(snapshots, w.rank, w.attempt.started_wall)
    if asked is not None and run_dir is not None and (oom is None or asked[0] > oom[1]):
        return {"oom": oom[0]["oom"] if oom is not None else None, "snapshot": str(run_dir / asked[1])}
    return oom[0] if oom is not None else None


def stop_info(a: Attempt, now: float) -> StopInfo | None:
    """The stop signal sent to the attempt's process, and how long until SIGKILL."""
    if a.stop_signal is None or a.stop_sent is None:
        return None
    kill_in = 0.0 if a.hard_killed is not None else (
        None if a.kill_deadline is None else round(max(0.0, a.kill_deadline - now), 1))
    return StopInfo(signal=a.stop_signal, sent=a.stop_sent, kill_in=kill_in)


def child_status(c: ProcInfo, rep: ChildReport | None, now: float) -> ChildStatus:
    """A descendant as the process probe saw it, with what it reported itself (if it did)."""
    last = None if rep is None else rep.last_report
    return ChildStatus(
        pid=c["pid"], pgid=c["pgid"], cpu_percent=c["cpu_percent"], rss_bytes=c["rss_bytes"],
        status=c["status"], name=c["name"], cmd=c.get("cmd", c["name"]), ppid=c.get("ppid"),
        reporting=last is not None, step=None if rep is None else rep.step,
        loss=None if rep is None else rep.loss,
        heartbeat_age=None if last is None else round(now - last, 2))

