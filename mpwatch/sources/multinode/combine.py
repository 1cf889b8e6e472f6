"""Several nodes' statuses as one status.Status (pure; sources.multinode.source's MergedSource calls
it on whichever thread polls). The screens then draw every rank of every node as they draw
one run's, apart from the NODE column, the per-node header and the GPU grouping.

Each worker's `rank` becomes its global rank (WorkerStatus.global_rank, else the node's
base rank plus its local rank), with `node` and `local_rank` kept beside it; every other
rank a status names (a GPU's ranks, its processes, alerts, a worker's GPU neighbours) is
mapped the same way. GPUs get indexes of their own across nodes (node 0's first), keeping
NVML's as `node_index`. The lags and the hang's culprit (contract.culprit, pure)
runs again over the merged ranks, which no single node could do: steps order the ranks, never
the nodes' clocks. The nodes' own hang alerts, each blind to the others, give way to it; so do
their straggler findings, to sources.multinode.merged_straggler's over every rank (the ranks'
speeds against the median rank, too, are measured across the nodes). A node's slowdown finding (its
ranks against their own best, what took its machine) stays its own, named by its node; the run's
pace is the slowest node's against its best.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mpwatch.contract import (
    UNREACHABLE,
    Culprit,
    EventFields,
    GpuAlert,
    GpuMark,
    GpuTick,
    GpuTimelineReply,
    GpuView,
    NodeStatus,
    RunAlert,
    RunInfo,
    RunState,
    Status,
    WorkerGpu,
    WorkerStatus,
    culprit,
    straggler,
)
from mpwatch.sources.multinode import control_merge, merged_straggler

NO_JOB_ID = "none"  # torchrun's rendezvous id when none is given (static): names no job
TICK_SLACK_S = 0.5  # a node's tick this much after another's still belongs to its moment


@dataclass
class NodePart:
    """One node as the merge sees it: its last status (None until first reached) and state."""

    node: int
    host: str
    status: Status | None
    error: str | None = None  # why it cannot be reached now
    down_for: float | None = None
    finished: bool = False


@dataclass
class NodeMap:
    """How one node's numbers map into the merged view."""

    node: int
    base: int  # global rank of its local rank 0 (where workers carry no global_rank)
    ranks: dict[int, int] = field(default_factory=dict)  # local rank -> global rank
    gpu_offset: int = 0  # merged GPU index of its NVML GPU 0

    def rank(self, local: int | None) -> int | None:
        return None if local is None else self.ranks.get(local, self.base + local)


def maps(parts: Sequence[NodePart]) -> dict[int, NodeMap]:
    """Each node's rank and GPU mapping: nodes in node order; a node's base rank is its
    NodeInfo's, else the ranks of the nodes before it; its GPUs follow theirs."""
    out: dict[int, NodeMap] = {}
    next_base = gpu_offset = 0
    for p in sorted(parts, key=lambda p: p.node):
        st = p.status
        info = st["run"].get("node") if st is not None else None
        base = info["base_rank"] if info else next_base
        m = NodeMap(p.node, base, gpu_offset=gpu_offset)
        for w in st["workers"] if st is not None else []:
            m.ranks[w["rank"]] = w.get("global_rank", base + w["rank"]) if info else base + w["rank"]
        out[p.node] = m
        next_base = max([base, *[g + 1 for g in m.ranks.values()]])
        if st is not None:
            gpu_offset += max((g["index"] + 1 for g in st["gpus"]), default=0)
    return out


# ------------------------------------------------------------------ workers ----
def _worker(w: WorkerStatus, m: NodeMap, error: str | None) -> WorkerStatus:
    out = w.copy()
    pace = w.get("pace")  # (a node of an older mpwatch sends none)
    out["pace"] = None if pace is None else {**pace, "relative": {}}  # relative again, across the nodes
    g = m.rank(w["rank"])
    assert g is not None
    out["rank"], out["global_rank"], out["local_rank"], out["node"] = g, g, w["rank"], m.node
    if w["gpu"] is not None:
        out["gpu"] = _worker_gpu(w["gpu"], m)
    if error is not None:
        out["node_error"] = error
    return out


def _worker_gpu(wg: WorkerGpu, m: NodeMap) -> WorkerGpu:
    out = wg.copy()
    if wg["index"] is not None:
        out["index"] = wg["index"] + m.gpu_offset
    out["gpus"] = [{**s, "index": s["index"] + m.gpu_offset} for s in wg["gpus"]]
    out["shared_with"] = [m.rank(r) or 0 for r in wg["shared_with"]]
    return out


# --------------------------------------------------------------------- GPUs ----
def _gpu(gpu: GpuView, m: NodeMap) -> GpuView:
    out = gpu.copy()
    out["index"], out["node"], out["node_index"] = gpu["index"] + m.gpu_offset, m.node, gpu["index"]
    procs = []
    for p in gpu["processes"]:
        q = p.copy()
        q["rank"], q["child_of"] = m.rank(p["rank"]), m.rank(p["child_of"])
        procs.append(q)
    out["processes"] = procs
    out["alerts"] = [_gpu_alert(a, m) for a in gpu["alerts"]]
    if "ranks" in gpu:
        out["ranks"] = [m.rank(r) or 0 for r in gpu["ranks"]]
    if "slices" in gpu:  # a GPU in MIG mode: its slices are numbered with it
        out["slices"] = [_gpu(s, m) for s in gpu["slices"]]
    return out


def _whose(m: NodeMap) -> str:
    """The prefix of a node's alert text, which names that node's own GPUs and ranks."""
    return (f"node {m.node}" if m.base == 0 and not m.gpu_offset
            else f"node {m.node} (its own GPU and rank numbers)")


def _gpu_alert(a: GpuAlert, m: NodeMap) -> GpuAlert:
    out = a.copy()
    out["rank"] = m.rank(a["rank"])
    if a["gpu"] is not None:
        out["gpu"] = a["gpu"] + m.gpu_offset
    if "ranks" in a:
        out["ranks"] = [m.rank(r) or 0 for r in a["ranks"]]
    out["message"] = f"{_whose(m)}: {a['message']}"
    out["key"] = f"node{m.node}:{a['key']}"
    return out


def _run_alert(a: RunAlert, m: NodeMap) -> RunAlert:
    out = a.copy()
    out["rank"] = m.rank(a["rank"])
    out["message"] = f"{_whose(m)}: {a['message']}"
    if "culprits" in a:
        out["culprits"] = [m.rank(r) or 0 for r in a["culprits"]]
    if "waiting" in a:
        out["waiting"] = [m.rank(r) or 0 for r in a["waiting"]]
    if "slowdown" in a:  # the node's own finding (its ranks are global already): it names the node
        out["slowdown"] = {**a["slowdown"], "node": m.node}
    return out


# --------------------------------------------------------------- the hang ----
def _ranks(rs: Iterable[int]) -> str:
    rs = sorted(rs)
    return f"rank {rs[0]}" if len(rs) == 1 else "ranks " + ",".join(map(str, rs))


def _where(rs: Sequence[int], node_of: dict[int, int]) -> str:
    nodes = sorted({node_of[r] for r in rs})
    return f"node {nodes[0]}" if len(nodes) == 1 else "nodes " + ",".join(map(str, nodes))


def analyze(workers: Sequence[WorkerStatus]) -> Culprit | None:
    """contract.culprit's analysis with each rank's node named, and the waiting ranks as
    'the 15 others' when every other rank waits: 'the 15 others wait in all_reduce at step 119
    for rank 13 on node 1, which is at step 118'."""
    node_of = {w["rank"]: w.get("node", 0) for w in workers}
    def label(rs: Sequence[int]) -> str:
        return f"{_ranks(rs)} on {_where(rs, node_of)}"
    s = culprit.analyze(workers, label)
    if s is None or not s["culprits"] or s["text"] is None:
        return s
    waiting, others = s["waiting"], len(workers) - len(s["culprits"])
    if len(waiting) == others and others > 1 and s["text"].startswith(label(waiting)):
        s["text"] = f"the {others} others" + s["text"][len(label(waiting)):]
    return s


def hang(workers: Sequence[WorkerStatus]) -> tuple[Culprit | None, RunAlert | None]:
    """The merged lags and culprit, over the ranks of the nodes that can be reached (an
    unreachable node's rows are old: never evidence of a hang), and its alert."""
    live = [w for w in workers if "node_error" not in w]
    s = analyze(live)
    if s is None:
        return None, None
    if not s["culprits"] or s["text"] is None:
        return s, None
    return s, RunAlert(ts=time.time(), kind="hang", message=s["text"], rank=s["culprits"][0],
                       culprits=s["culprits"], waiting=s["waiting"])


# ------------------------------------------------------------------ the run ----
def _run(parts: Sequence[NodePart], statuses: Sequence[Status]) -> RunInfo:
    first = statuses[0]["run"]
    run = first.copy()
    info = first.get("node")
    ids = [s["run"]["id"] for s in statuses]
    if info and info["job_id"] not in ("", NO_JOB_ID):  # the job's own name: the same on every node
        run["id"] = info["job_id"]
    else:
        run["id"] = ids[0] + (f" +{len(ids) - 1}" if len(ids) > 1 else "")
    run["nprocs"] = sum(s["run"]["nprocs"] for s in statuses)
    run["world_size"] = info["world_size"] if info else sum(s["run"]["world_size"] for s in statuses)
    counts: dict[str, int] = {}
    for p in parts:  # an unreachable node's ranks count as that: their states are old news
        for k, n in (p.status["run"]["counts"] if p.status is not None else {}).items():
            key = UNREACHABLE if p.error is not None else k
            counts[key] = counts.get(key, 0) + n
    run["counts"] = counts
    run["restarts"] = sum(s["run"]["restarts"] for s in statuses)
    run["uptime"] = max(s["run"]["uptime"] for s in statuses)
    run["refused_connections"] = sum(s["run"]["refused_connections"] for s in statuses)
    states = {s["run"]["state"] for s in statuses}
    done = all(p.finished for p in parts)
    run["state"] = (RunState.FINISHED if done else RunState.STOPPING if RunState.STOPPING in states
                    else RunState.RESIZING if RunState.RESIZING in states else RunState.RUNNING)
    codes = [s["run"]["exit_code"] for s in statuses]
    run["exit_code"] = next((c for c in codes if c), codes[0]) if done else None
    run["node"] = None
    run.pop("pace", None)  # the slowest node's against its own best: every rank of the run steps with it
    paces = [pace for s in statuses if (pace := s["run"].get("pace")) is not None]
    if paces:
        run["pace"] = min(paces, key=lambda x: x["ratio"]).copy()
    return run


def node_status(p: NodePart, m: NodeMap) -> NodeStatus:
    st = p.status
    return NodeStatus(node=p.node, host=p.host, run_id=st["run"]["id"] if st else None,
                      reachable=p.error is None, error=p.error, down_for=p.down_for, finished=p.finished,
                      base_rank=m.base, workers=len(st["workers"]) if st else 0,
                      counts=dict(st["run"]["counts"]) if st else {})


def merge(parts: Sequence[NodePart], events_seq: int = 0, ms: dict[int, NodeMap] | None = None,
          standing: straggler.Standing | None = None) -> Status | None:
    """The merged status, None until some node has been reached (ms: maps(parts), when the
    caller has them already; standing: the straggler finding across nodes, kept by the caller
    from one merge to the next, or none)."""
    parts = sorted(parts, key=lambda p: p.node)
    have = [p for p in parts if p.status is not None]
    if not have:
        return None
    ms = maps(parts) if ms is None else ms
    workers: list[WorkerStatus] = []
    gpus: list[GpuView] = []
    alerts: list[RunAlert] = []
    notes = []
    for p in have:
        st, m = p.status, ms[p.node]
        assert st is not None
        workers += [_worker(w, m, p.error) for w in st["workers"]]
        gpus += [_gpu(g, m) for g in st["gpus"]]
        alerts += [_run_alert(a, m) for a in st["alerts"] if a["kind"] not in ("hang", "straggler")]
        if st["gpu_status"]:
            notes.append(f"node {p.node}: {st['gpu_status']}")
    workers.sort(key=lambda w: w["rank"])
    straggler.fill_relative(workers)
    s, hang_alert = hang(workers)
    if hang_alert is not None:
        alerts.insert(0, hang_alert)
    if standing is not None:
        alerts += merged_straggler.alerts(workers, standing, time.time())
    control = control_merge.view([(p.status, ms[p.node].rank) for p in have if p.status is not None])
    merged = Status(run=_run(parts, [p.status for p in have if p.status is not None]), workers=workers,
                    gpus=gpus, gpu_status="; ".join(notes) or None, alerts=alerts, events_seq=events_seq,
                    straggler=s, nodes=[node_status(p, ms[p.node]) for p in parts],
                    tunables=control.tunables, checkpoints=control.checkpoints)
    return control.into(merged)


# ---------------------------------------------------------- events, timeline ----
def event(rec: EventFields, m: NodeMap) -> EventFields:
    out = rec.copy()
    out["rank"], out["node"] = m.rank(rec["rank"]), m.node
    return out


def _shifted(m: NodeMap, tl: GpuTimelineReply, now: float) -> tuple[list[GpuTick], list[GpuMark]]:
    shift = now - tl["ticks"][-1]["ts"]
    ticks = [GpuTick(ts=t["ts"] + shift,
                     gpus=[{**g, "index": g["index"] + m.gpu_offset} for g in t["gpus"]],
                     ranks=[{**r, "rank": m.rank(r["rank"]) or 0,
                             "gpu": None if r["gpu"] is None else r["gpu"] + m.gpu_offset}
                            for r in t["ranks"]])
             for t in tl["ticks"]]
    marks = []
    for k in tl["marks"]:
        mk = k.copy()
        mk["ts"] = k["ts"] + shift
        mk["gpu"] = None if k["gpu"] is None else k["gpu"] + m.gpu_offset
        mk["rank"] = m.rank(k["rank"])
        marks.append(mk)
    return ticks, marks


def timeline(parts: Sequence[tuple[NodeMap, GpuTimelineReply]], now: float) -> GpuTimelineReply:
    """The nodes' GPU timelines as one: GPUs and ranks mapped, each node's times shifted so
    that its latest tick is `now` (charts place ticks by time, and the nodes' clocks may
    disagree by more than a tick), and at each tick time of the node with the most ticks,
    every node's latest tick up to then (a chart column shows every node's GPUs)."""
    series: list[list[GpuTick]] = []
    marks: list[GpuMark] = []
    for m, tl in parts:
        if tl["ticks"]:
            ticks, mk = _shifted(m, tl, now)
            series.append(ticks)
            marks += mk
    if not series:
        return {"ticks": [], "marks": []}
    base = max(series, key=len)
    at = [0] * len(series)
    out: list[GpuTick] = []
    for t in base:
        tick = GpuTick(ts=t["ts"], gpus=[], ranks=[])
        for i, ticks in enumerate(series):
            while at[i] + 1 < len(ticks) and ticks[at[i] + 1]["ts"] <= t["ts"] + TICK_SLACK_S:
                at[i] += 1
            mine = ticks[at[i]]
            if mine["ts"] <= t["ts"] + TICK_SLACK_S:
                tick["gpus"] += mine["gpus"]
                tick["ranks"] += mine["ranks"]
        out.append(tick)
    marks.sort(key=lambda k: k["ts"])
    return {"ticks": out, "marks": marks}
