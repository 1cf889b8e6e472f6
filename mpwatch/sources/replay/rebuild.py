"""A status.Status rebuilt for one moment of a recorded run: the notable events folded up to
it (sources.replay.fold), each rank's last reports before it and the GPU tick at it
(sources.replay.files), over the facts that do not move (run.json, the GPUs' names from final.json).

What the files do not keep is N/A (None), never invented: CPU, RSS and children of the
processes (the sampler's view is not recorded), phases, torch's allocator view (the GPU
timeline keeps its allocated and reserved bytes, which the rank's GPU shows), when a GPU
alert ended (one shows from its start on), the metrics and report counts (the final status
has them at the end). Pure given its inputs; called by sources.replay.source under its lock.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from mpwatch.contract import (
    ALIVE_STATES,
    COUNTERS,
    HISTORY_POINTS,
    Culprit,
    DevKey,
    GpuAlert,
    GpuHistory,
    GpuProcess,
    GpuShare,
    GpuTick,
    GpuTickGpu,
    GpuTickRank,
    GpuView,
    Lag,
    RunInfo,
    RunOptions,
    State,
    Status,
    WorkerGpu,
    WorkerStatus,
    put_input_notes,
    rates,
    reading,
)
from mpwatch.rundir import layout
from mpwatch.sources.replay.files import EventsFile, GpuFile
from mpwatch.sources.replay.fold import RankFold, RunFold
from mpwatch.sources.replay.reports import ReportRow

NO_HELLO_S = 2.0  # a started rank silent this long shows running (supervisor.workers.reaping's rule)
RATE_WINDOW_S = 30.0  # steps/s from the reports of the last this many seconds
TICK_STALE_S = 30.0  # a GPU tick older than this at the cursor is no GPU sample of that moment


@dataclass
class RunFacts:
    """What the replay knows of the run whatever the moment (run.json, final.json)."""

    run_id: str
    dir: Path
    script: str
    args: list[str]
    pid: int
    started: float
    options: RunOptions
    # each GPU's and MIG slice's name, uuid, mem_total (and a slice's mig), from final.json
    gpu_names: dict[DevKey, dict[str, Any]] = field(default_factory=dict)
    gpu_status: str | None = None  # final.json's, when the run had no GPU data


def worker_row(k: RankFold, reps: list[ReportRow], t: float, tail: int,
               gpu: WorkerGpu | None) -> WorkerStatus:
    last = reps[-1] if reps else None
    state = k.state
    heard = last is not None and k.started is not None and last.ts >= k.started
    if state == State.STARTING and (heard or (k.started is not None and t - k.started >= NO_HELLO_S)):
        state = State.RUNNING
    alive = state in ALIVE_STATES
    losses = [r.loss for r in reps if r.loss is not None]
    row = WorkerStatus(
        rank=k.rank, global_rank=k.rank if k.global_rank is None else k.global_rank, pid=k.pid, state=state,
        step=next((r.step for r in reversed(reps) if r.step is not None), None),
        loss=last.loss if last is not None else None,
        steps_per_s=_rate(reps, t, k.started) if state == State.RUNNING else (0.0 if alive else None),
        metrics={},
        heartbeat_age=round(max(0.0, t - last.ts), 2) if heard and last is not None and alive else None,
        heartbeat="ok" if heard else "none", cpu_percent=None, rss_bytes=None, proc_status=None,
        restarts=k.restarts, exit_code=k.exit_code, signal=k.signal, cause=k.cause,
        reports=0, dropped=0, bad_frames=k.bad_frames, phases={},
        pace=None,  # the report events' phase totals are not read back here: the finding's alert is
        cuda=None,
        loss_tail=losses[-tail:] if tail else [], world_size=k.world or 0,
        dist=False,  # the events do not say
        uptime=round(t - k.started, 1) if k.started is not None and alive else None,
        stall=k.stall.copy() if k.stall is not None and state == State.STALLED else None,
        paused_at=k.paused_at if state == State.PAUSED else None,
        slow_start=k.slow_start.copy() if k.slow_start is not None and not heard and alive else None,
        last_dump=k.last_dump, unkillable=k.unkillable, foreign_groups=[], children=[],
        gpu=gpu if alive else None, stop=None,  # the events say when a stop signal went, not its deadline
        polls_checkpoint=False,  # nor whether the rank's loop asks should_checkpoint()
        steps_from=None)  # nor whether its steps were counted by mpwatch.worker.auto
    put_input_notes(row, k.rejected, k.rejected_why, k.bad_inputs, k.bad_input_why, list(k.refused_tunables))
    if k.memory is not None:
        row["memory"] = k.memory.copy()
    return row


def _rate(reps: list[ReportRow], t: float, started: float | None) -> float | None:
    """Steps/s over the window up to t, by the supervisor's rule (contract.rates)."""
    since = max(t - RATE_WINDOW_S, started or 0.0)
    pts = [r for r in reps if r.ts >= since and r.step is not None]
    if (not pts and t - since >= RATE_WINDOW_S
            and any(r.step is not None and r.ts >= (started or 0.0) for r in reps)):
        return 0.0  # it stepped in this attempt, and not once in the whole window
    return rates.steps_per_second([(r.ts, r.step or 0) for r in pts], t)


# -------------------------------------------------------------------- GPUs ----
def _key(index: int | None, rec: Mapping[str, object]) -> DevKey | None:
    """The GPU or MIG slice a tick's entry names (a slice has gi and ci)."""
    gi, ci = rec.get("gi"), rec.get("ci")
    if index is None:
        return None
    return (index, gi, ci) if isinstance(gi, int) and isinstance(ci, int) else (index, None, None)


def _worker_gpu(tr: GpuTickRank, on_gpu: dict[DevKey | None, list[int]], facts: RunFacts) -> WorkerGpu:
    nvml, alloc, res = tr.get("nvml"), tr.get("allocated"), tr.get("reserved")
    key = _key(tr.get("gpu"), tr)
    share: list[GpuShare] = []
    if key is not None and nvml is not None:
        share = [{"index": key[0], "mem_bytes": nvml}]
        if key[1] is not None and key[2] is not None:
            share[0]["gi"], share[0]["ci"] = key[1], key[2]
    out = WorkerGpu(
        index=tr.get("gpu"), uuid=None, mapped_by="pid", mem_bytes=nvml, gpus=share,
        allocated=alloc, reserved=res, peak=None,
        other_bytes=nvml - res if nvml is not None and res is not None else None,
        fragmentation=res - alloc if res is not None and alloc is not None else None,
        alloc_retries=None, ooms=None, sm_util=None,
        shared_with=[r for r in on_gpu.get(key, []) if r != tr["rank"]] if key is not None else [])
    mig = facts.gpu_names.get(key, {}).get("mig") if key is not None and key[1] is not None else None
    if isinstance(mig, dict) and key is not None and key[1] is not None and key[2] is not None:
        out["mig"] = {"gi": key[1], "ci": key[2], "profile": mig.get("profile")}
    return out


def _sum(values: list[int | None]) -> int | None:
    return None if not values or any(v is None for v in values) else sum(v for v in values if v is not None)


def _gpu_view(g: GpuTickGpu, tick: GpuTick, facts: RunFacts, ranks: list[GpuTickRank],
              pids: dict[int, int | None], alerts: list[GpuAlert], history: GpuHistory) -> GpuView:
    i = g["index"]
    key = _key(i, g)
    mine = [tr for tr in ranks if _key(tr.get("gpu"), tr) == key]
    nvml = [tr.get("nvml") for tr in mine]
    alloc = [tr.get("allocated") for tr in mine]
    res = [tr.get("reserved") for tr in mine]
    a, rv, n = _sum(alloc), _sum(res), _sum(nvml)
    names = facts.gpu_names.get(key, {}) if key is not None else {}
    procs = [GpuProcess(pid=pid, rank=tr["rank"], child_of=None, user=None, cmd=None,
                        mem_bytes=tr.get("nvml"), visible=True, sm_util=None)
             for tr in mine if (pid := pids.get(tr["rank"])) is not None]
    view = cast(GpuView, {
        "index": i, "name": names.get("name"), "uuid": names.get("uuid"), "mem_used": g.get("mem_used"),
        "mem_total": g.get("mem_total") or names.get("mem_total"), **_counters(g),
        "processes": procs, "errors": {}, "ts": tick["ts"], "processes_ts": tick["ts"],
        "alerts": [x for x in alerts if x["gpu"] is not None and _key(x["gpu"], x) == key],
        "ranks": sorted(tr["rank"] for tr in mine),
        "breakdown": {"allocated": a, "cached": rv - a if rv is not None and a is not None else None,
                      "other": n - rv if n is not None and rv is not None else None,
                      "outside": g.get("outside")},
        "history": history})
    if key is not None and key[1] is not None and key[2] is not None:
        mig = names.get("mig")
        profile = mig.get("profile") if isinstance(mig, dict) else None
        view["mig"] = {"gi": key[1], "ci": key[2], "profile": profile}
    return view


def _counters(g: GpuTickGpu) -> dict[str, float | None]:
    """The counters a tick keeps (utilization), and N/A for those every view has but gpu.jsonl
    does not keep; the others are left out, as a view of a MIG slice leaves them."""
    return {c.key: reading(g, c) for c in COUNTERS if c.required or c.key in g}


def _history(gpu: GpuFile, i: int) -> dict[DevKey, GpuHistory]:
    out: dict[DevKey, GpuHistory] = {}
    for j in range(max(0, i - HISTORY_POINTS + 1), i + 1):
        for key, mem, util in gpu.samples(j):
            h = out.setdefault(key, {"mem_used": [], "util_gpu": []})
            h["mem_used"].append(mem)
            h["util_gpu"].append(util)
    return out


def _nest(views: list[GpuView]) -> list[GpuView]:
    """Each MIG slice's view under its GPU's (a tick lists a slice after its GPU)."""
    out: list[GpuView] = []
    for v in views:
        if "mig" in v and out and out[-1]["index"] == v["index"]:
            out[-1].setdefault("slices", []).append(v)
        elif "mig" not in v:
            out.append(v)
    return out


def gpus_at(gpu: GpuFile, t: float, facts: RunFacts,
            run: RunFold) -> tuple[list[GpuView], dict[int, WorkerGpu], str | None]:
    """The GPU views, each rank's GPU, and the GPU status line, at t."""
    if not gpu.present:
        if facts.gpu_status:  # the run's own words, of the machine it ran on
            return [], {}, f"no GPU data recorded ({facts.gpu_status})"
        return [], {}, f"no GPU data recorded (no {layout.GPU_JSONL} in the run directory)"
    i = gpu.at(t)
    tick = gpu.tick(i) if i >= 0 else None
    if tick is None or t - tick["ts"] > TICK_STALE_S:
        return [], {}, "no GPU sample at this moment"
    ranks = [tr for tr in tick["ranks"] if isinstance(tr, dict) and isinstance(tr.get("rank"), int)]
    on_gpu: dict[DevKey | None, list[int]] = {}
    for tr in ranks:
        on_gpu.setdefault(_key(tr.get("gpu"), tr), []).append(tr["rank"])
    alerts = [a.copy() for a in run.gpu_alerts.values()]  # placed below: the fold's own stay as they are
    first = min((g["index"] for g in tick["gpus"]), default=None)
    for a in alerts:
        if a["gpu"] is None:
            a["gpu"] = first  # a run-wide GPU alert: shown with the first GPU
    hist = _history(gpu, i)
    pids = {r: k.pid for r, k in run.ranks.items()}
    views = [_gpu_view(g, tick, facts, ranks, pids, alerts,
                       hist.get((g["index"], g.get("gi"), g.get("ci")), {"mem_used": [], "util_gpu": []}))
             for g in tick["gpus"] if isinstance(g, dict) and isinstance(g.get("index"), int)]
    return _nest(views), {tr["rank"]: _worker_gpu(tr, on_gpu, facts) for tr in ranks}, None


# --------------------------------------------------------------------- run ----
def straggler(workers: list[WorkerStatus], run: RunFold) -> Culprit | None:
    """Lags from the steps at this moment; the culprit as the supervisor named it last
    (its `hang` alert), while a rank is stalled."""
    ws = [w for w in workers if w["step"] is not None]
    if len(ws) < 2:
        return None
    lead = max(w["step"] or 0 for w in ws)
    out = Culprit(leader_step=lead,
                    lags=[Lag(rank=w["rank"], step=w["step"] or 0, lag=lead - (w["step"] or 0)) for w in ws],
                    culprits=[], waiting=[], text=None)
    if run.hang is not None and any(w["state"] == State.STALLED for w in workers):
        culprits, waiting, msg = (run.hang.get("culprits"), run.hang.get("waiting"),
                                  run.hang.get("message") or "")
        out["culprits"] = [x for x in culprits if isinstance(x, int)] if isinstance(culprits, list) else []
        out["waiting"] = [x for x in waiting if isinstance(x, int)] if isinstance(waiting, list) else []
        out["text"] = msg.removeprefix("likely culprit: ")
    return out


def status_at(events: EventsFile, gpu: GpuFile, facts: RunFacts, run: RunFold, pos: int, t: float,
              tail: int) -> Status:
    """The status at the moment of events[pos] (t: its time; pos past the last: the end)."""
    ranks = sorted(run.ranks)
    reps = events.reports_at(pos, t, ranks, max(tail, 8))
    views, wgpu, gpu_status = gpus_at(gpu, t, facts, run)
    workers = [worker_row(run.ranks[r], reps.get(r, []), t, tail, wgpu.get(r)) for r in ranks]
    counts: dict[str, int] = {}
    for w in workers:
        counts[w["state"]] = counts.get(w["state"], 0) + 1
    info = RunInfo(id=facts.run_id, dir=str(facts.dir), script=facts.script, args=list(facts.args),
                   state=run.state, pid=facts.pid, started=facts.started,
                   uptime=round(max(0.0, t - facts.started), 1), world_size=run.world or len(workers),
                   nprocs=len(workers), counts=counts, restarts=run.restarts, exit_code=run.exit_code,
                   options=facts.options, refused_connections=0, node=None)
    if run.stopped is not None:
        info["stopped"] = run.stopped
    live = run.live.status()
    st = Status(run=info, workers=workers, gpus=views, gpu_status=gpu_status, alerts=list(run.alerts),
                events_seq=min(pos + 1, len(events.events)), straggler=straggler(workers, run),
                tunables=live.tunables, checkpoints=live.checkpoints)
    return live.into(st)  # each action's list, as the live status has them
