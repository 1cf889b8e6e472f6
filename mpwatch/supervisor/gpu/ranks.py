"""Which GPU is a rank's own, and what it holds there: pure functions over the GPU views
the watcher builds each tick and the ranks' own CUDA views. Run on the GPU poller thread.

A rank's own GPU is the one its CUDA view names by UUID (torch's device index is useless
here: CUDA_VISIBLE_DEVICES and NVML's order can differ); without a UUID that NVML knows,
the GPU where its processes (children included) hold the most memory. Memory a rank holds
on any other GPU is a stray context.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from mpwatch.contract.status import CudaView, GpuProcess, GpuShare, GpuView, MemoryBreakdown, WorkerGpu


@dataclass
class RankInfo:
    """What the watcher needs of one live worker, copied under the run's lock."""

    rank: int
    pid: int
    running: bool  # state running (not paused, stalled or starting)
    alive: bool = True  # False: ended (its pid still labels its processes until NVML drops them)
    children: list[int] = field(default_factory=list)
    cuda: CudaView | None = None


@dataclass
class Placement:
    index: int | None
    uuid: str | None
    mapped_by: Literal["uuid", "pid"]


def owner(p: GpuProcess) -> int | None:
    """The rank a GPU process belongs to (itself or as a child), or None for outsiders."""
    return p["rank"] if p["rank"] is not None else p["child_of"]


def held(views: Sequence[GpuView]) -> dict[int, dict[int, int]]:
    """{rank: {gpu: bytes}}: every GPU where a rank's processes are listed (a process whose
    memory the driver cannot tell counts 0 bytes, but is there)."""
    out: dict[int, dict[int, int]] = {}
    for v in views:
        for p in v["processes"]:
            r = owner(p)
            if r is not None:
                per = out.setdefault(r, {})
                per[v["index"]] = per.get(v["index"], 0) + (p["mem_bytes"] or 0)
    return out


HIDDEN_PIDS = "GPU pids not visible from this container: ranks placed by their CUDA view"


def pids_hidden(views: Sequence[GpuView], infos: Sequence[RankInfo]) -> bool:
    """NVML lists processes on the GPUs, none of them ours, while the ranks' own CUDA views
    say they hold memory: NVML speaks of the host's pids, and this supervisor runs in a PID
    namespace (a container) where none of them is a rank. Its memory per process tells
    nothing then: not ours, not outsiders'."""
    listed = any(v["processes"] for v in views)
    ours = any(owner(p) is not None for v in views for p in v["processes"])
    holding = any(i.cuda is not None and i.cuda["reserved"] > 0 for i in infos)
    return listed and holding and not ours


def place(infos: Sequence[RankInfo], holdings: Mapping[int, Mapping[int, int]],
          uuid_index: Mapping[str, int], uuids: Mapping[int, str | None]) -> dict[int, Placement]:
    """{rank: its own GPU}; ranks neither named by UUID nor seen on a GPU are left out."""
    out: dict[int, Placement] = {}
    for info in infos:
        uuid = info.cuda.get("uuid") if info.cuda else None
        if uuid and uuid in uuid_index:
            index = uuid_index[uuid]
            out[info.rank] = Placement(index, uuids.get(index), "uuid")
            continue
        per = holdings.get(info.rank)
        if per:
            index = max(per, key=lambda g: (per[g], -g))
            out[info.rank] = Placement(index, uuids.get(index), "pid")
    return out


def ranks_by_gpu(placement: Mapping[int, Placement]) -> dict[int, list[int]]:
    """{gpu: sorted ranks whose own GPU it is}."""
    out: dict[int, list[int]] = {}
    for rank in sorted(placement):
        index = placement[rank].index
        if index is not None:
            out.setdefault(index, []).append(rank)
    return out


def _sum_or_none(values: list[int | None]) -> int | None:
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


def worker_gpu(info: RankInfo, where: Placement | None, views: Mapping[int, GpuView],
               holdings: Mapping[int, Mapping[int, int]], mates: Mapping[int, list[int]]) -> WorkerGpu | None:
    """A rank's GPU as the status shows it; None when it has neither a GPU nor a CUDA view."""
    cuda = info.cuda
    if where is None and cuda is None:
        return None
    index = where.index if where is not None else None
    view = views.get(index) if index is not None else None
    mine = [p for p in (view["processes"] if view is not None else ()) if owner(p) == info.rank]
    mem = _sum_or_none([p["mem_bytes"] for p in mine])
    sm = _sum_or_none([p.get("sm_util") for p in mine])
    allocated = cuda["allocated"] if cuda else None
    reserved = cuda["reserved"] if cuda else None
    per = holdings.get(info.rank, {})
    return {
        "index": index, "uuid": where.uuid if where is not None else None,
        "mapped_by": where.mapped_by if where is not None else "pid",
        "mem_bytes": mem,
        "gpus": [GpuShare(index=g, mem_bytes=per[g]) for g in sorted(per)],
        "allocated": allocated, "reserved": reserved, "peak": cuda["max_allocated"] if cuda else None,
        # NVML counts the CUDA context and non-torch allocations (NCCL, cuBLAS workspaces) too.
        "other_bytes": max(0, mem - reserved) if mem is not None and reserved is not None else None,
        "fragmentation": (max(0, reserved - allocated)
                          if reserved is not None and allocated is not None else None),
        "alloc_retries": cuda.get("alloc_retries") if cuda else None,
        "ooms": cuda.get("num_ooms") if cuda else None,
        "sm_util": min(sm, 100) if sm is not None else None,
        "shared_with": [r for r in mates.get(index, ()) if r != info.rank] if index is not None else [],
    }


def breakdown(view: GpuView, own: Sequence[RankInfo], procs_known: bool) -> MemoryBreakdown:
    """Where a GPU's used memory goes. allocated/cached: torch's view of the ranks whose own
    GPU this is (None when one of them sent no CUDA view); other: the rest of the memory of
    the run's processes there (contexts, NCCL, strays of other ranks); outside: the others'."""
    allocated = cached = None
    if all(i.cuda is not None for i in own):
        allocated = sum(i.cuda["allocated"] for i in own if i.cuda is not None)
        cached = sum(max(0, i.cuda["reserved"] - i.cuda["allocated"]) for i in own if i.cuda is not None)
    if not procs_known:
        return {"allocated": allocated, "cached": cached, "other": None, "outside": None}
    ours = sum(p["mem_bytes"] or 0 for p in view["processes"] if owner(p) is not None)
    outside = sum(p["mem_bytes"] or 0 for p in view["processes"] if owner(p) is None)
    other = max(0, ours - (allocated or 0) - (cached or 0))
    return {"allocated": allocated, "cached": cached, "other": other, "outside": outside}


def visible_gpu_indices(env: Mapping[str, str], uuid_index: Mapping[str, int], count: int) -> set[int] | None:
    """NVML indices of the GPUs the workers may use, from CUDA_VISIBLE_DEVICES (indices or
    UUIDs, which CUDA also takes by unique prefix); None when it is not set (all of them)."""
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return None
    out: set[int] = set()
    for entry in (e.strip() for e in cvd.split(",")):
        if entry.isdigit():
            if int(entry) < count:
                out.add(int(entry))
        elif entry:
            hits = {i for u, i in uuid_index.items() if u.startswith(entry) or u.startswith(f"GPU-{entry}")}
            if len(hits) == 1:
                out |= hits
    return out
