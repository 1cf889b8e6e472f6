"""Which GPU is a rank's own, and what it holds there: pure functions over the GPU views
the watcher builds each tick and the ranks' own CUDA views. Run on the GPU poller thread.

A rank's own GPU is the one its CUDA view names by UUID (torch's device index is useless
here: CUDA_VISIBLE_DEVICES and NVML's order can differ); without a UUID that NVML knows,
the GPU where its processes (children included) hold the most memory. Memory a rank holds
on any other GPU is a stray context. On a GPU in MIG mode a rank's own "GPU" is its MIG
slice (a `MIG-…` UUID names one): the functions here take the leaves (contract.gpu_view.leaves)
and key them by DevKey, so two ranks on two slices of one GPU never share.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from mpwatch.contract import (
    CudaView,
    DevKey,
    GpuProcess,
    GpuShare,
    GpuView,
    MemoryBreakdown,
    WorkerGpu,
    dev_key,
    numtext,
)


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
    key: DevKey  # its GPU, or the MIG slice of one
    uuid: str | None
    mapped_by: Literal["uuid", "pid"]


def owner(p: GpuProcess) -> int | None:
    """The rank a GPU process belongs to (itself or as a child), or None for outsiders."""
    return p["rank"] if p["rank"] is not None else p["child_of"]


def held(views: Sequence[GpuView]) -> dict[int, dict[DevKey, int]]:
    """{rank: {device: bytes}}: every leaf where a rank's processes are listed (a process whose
    memory the driver cannot tell counts 0 bytes, but is there)."""
    out: dict[int, dict[DevKey, int]] = {}
    for v in views:
        key = dev_key(v)
        for p in v["processes"]:
            r = owner(p)
            if r is not None:
                per = out.setdefault(r, {})
                per[key] = per.get(key, 0) + (p["mem_bytes"] or 0)
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


def place(infos: Sequence[RankInfo], holdings: Mapping[int, Mapping[DevKey, int]],
          uuid_keys: Mapping[str, DevKey], uuids: Mapping[DevKey, str | None]) -> dict[int, Placement]:
    """{rank: its own GPU or slice}; ranks neither named by UUID nor seen on one are left out.
    `uuids`: the leaves' own UUIDs (a UUID naming a GPU in MIG mode, not a leaf, places the
    rank on the slice of that GPU where it holds the most)."""
    out: dict[int, Placement] = {}
    for info in infos:
        uuid = info.cuda.get("uuid") if info.cuda else None
        key = uuid_keys.get(uuid) if uuid else None
        if key is not None and key in uuids:
            out[info.rank] = Placement(key, uuids[key], "uuid")
            continue
        per = {k: b for k, b in holdings.get(info.rank, {}).items() if key is None or k[0] == key[0]}
        if per:
            best = max(per, key=lambda k: (per[k], -k[0], -(k[1] or 0), -(k[2] or 0)))
            out[info.rank] = Placement(best, uuids.get(best), "pid")
    return out


def ranks_by_gpu(placement: Mapping[int, Placement]) -> dict[DevKey, list[int]]:
    """{device: sorted ranks whose own GPU (or slice) it is}."""
    out: dict[DevKey, list[int]] = {}
    for rank in sorted(placement):
        out.setdefault(placement[rank].key, []).append(rank)
    return out


def _sum_or_none(values: list[int | None]) -> int | None:
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


def worker_gpu(info: RankInfo, where: Placement | None, views: Mapping[DevKey, GpuView],
               holdings: Mapping[int, Mapping[DevKey, int]],
               mates: Mapping[DevKey, list[int]]) -> WorkerGpu | None:
    """A rank's GPU as the status shows it; None when it has neither a GPU nor a CUDA view."""
    cuda = info.cuda
    if where is None and cuda is None:
        return None
    view = views.get(where.key) if where is not None else None
    mine = [p for p in (view["processes"] if view is not None else ()) if owner(p) == info.rank]
    mem = _sum_or_none([p["mem_bytes"] for p in mine])
    sm = _sum_or_none([p.get("sm_util") for p in mine])
    allocated = cuda["allocated"] if cuda else None
    reserved = cuda["reserved"] if cuda else None
    per = holdings.get(info.rank, {})
    out: WorkerGpu = {
        "index": where.key[0] if where is not None else None,
        "uuid": where.uuid if where is not None else None,
        "mapped_by": where.mapped_by if where is not None else "pid",
        "mem_bytes": mem,
        "gpus": [share(k, per[k]) for k in sorted(per, key=_order)],
        "allocated": allocated, "reserved": reserved, "peak": cuda["max_allocated"] if cuda else None,
        # NVML counts the CUDA context and non-torch allocations (NCCL, cuBLAS workspaces) too.
        "other_bytes": max(0, mem - reserved) if mem is not None and reserved is not None else None,
        "fragmentation": (max(0, reserved - allocated)
                          if reserved is not None and allocated is not None else None),
        "alloc_retries": cuda.get("alloc_retries") if cuda else None,
        "ooms": cuda.get("num_ooms") if cuda else None,
        "sm_util": min(sm, 100) if sm is not None else None,
        "shared_with": [r for r in mates.get(where.key, ()) if r != info.rank] if where is not None else [],
    }
    if view is not None and "mig" in view:
        out["mig"] = view["mig"]
    return out


def _order(k: DevKey) -> tuple[int, int, int]:
    return k[0], -1 if k[1] is None else k[1], -1 if k[2] is None else k[2]


def share(key: DevKey, mem: int) -> GpuShare:
    out: GpuShare = {"index": key[0], "mem_bytes": mem}
    if key[1] is not None and key[2] is not None:
        out["gi"], out["ci"] = key[1], key[2]
    return out


def own_key(wg: WorkerGpu) -> DevKey | None:
    """The device a rank's GPU names: its GPU, or its MIG slice."""
    if wg["index"] is None:
        return None
    mig = wg.get("mig")
    return (wg["index"], None, None) if mig is None else (wg["index"], mig["gi"], mig["ci"])


def share_key(s: GpuShare) -> DevKey:
    return s["index"], s.get("gi"), s.get("ci")


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
    # Unknown when the driver keeps an outsider's memory from us (MIG, for a user): never 0.
    outside = _sum_or_none([p["mem_bytes"] for p in view["processes"] if owner(p) is None] or [0])
    other = max(0, ours - (allocated or 0) - (cached or 0))
    return {"allocated": allocated, "cached": cached, "other": other, "outside": outside}


def sum_breakdowns(parts: Sequence[MemoryBreakdown]) -> MemoryBreakdown:
    """A GPU in MIG mode's breakdown: its slices' added up (unknown where one's is)."""
    return {"allocated": _sum_or_none([p["allocated"] for p in parts]),
            "cached": _sum_or_none([p["cached"] for p in parts]),
            "other": _sum_or_none([p["other"] for p in parts]),
            "outside": _sum_or_none([p["outside"] for p in parts])}


def visible_keys(env: Mapping[str, str], uuid_keys: Mapping[str, DevKey],
                 leaves_of: Mapping[int, list[DevKey]]) -> set[DevKey] | None:
    """The leaves the workers may use, from CUDA_VISIBLE_DEVICES (indices or UUIDs, which CUDA
    also takes by unique prefix; a `MIG-…` UUID names one slice, a GPU in MIG mode all of
    its); None when it is not set (all of them). `leaves_of`: each GPU's leaves."""
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return None
    out: set[DevKey] = set()
    for entry in (e.strip() for e in cvd.split(",")):
        if (index := numtext.int_of(entry, 4)) is not None:  # ASCII digits: "²" is no GPU's index
            out.update(leaves_of.get(index, ()))
        elif entry:
            hits = {k for u, k in uuid_keys.items() if u.startswith(entry) or u.startswith(f"GPU-{entry}")}
            if len(hits) == 1:
                (key,) = hits
                out.update([key] if key[1] is not None else leaves_of.get(key[0], ()))
    return out
