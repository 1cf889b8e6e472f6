"""GPU alert decisions about one rank: stray contexts, allocator retries, fragmentation and
CUDA out of memory. Pure functions over the rank's WorkerGpu and the GPU views the watcher
builds each tick (supervisor.gpu.alerts has the per-GPU ones and the shared helpers). Called on
the GPU poller thread, and on the main thread for a worker's exit (OOM).
"""
from __future__ import annotations

import re
from collections.abc import Iterable

from mpwatch.contract.status import DevKey, GpuAlert, GpuView, WorkerGpu
from mpwatch.supervisor.gpu.alerts import SET_DEVICE, AlertConfig, alert, describe_process, key_text, on
from mpwatch.supervisor.gpu.ranks import own_key, owner, share_key
from mpwatch.text import fmt
from mpwatch.text.gpu_names import device_name, view_name

_TRIED = re.compile(r"Tried to allocate ([0-9.]+ ?[KMGTP]?i?B)")
OOM_MARKERS = ("cuda out of memory", "outofmemoryerror", "cuda error: out of memory")
EXPANDABLE = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"


def stray_contexts(rank: int, wg: WorkerGpu) -> list[GpuAlert]:
    """Memory a rank holds on a GPU that is not its own: typically a CUDA context made on
    GPU 0 before set_device (or by a library call without a device), on every rank. A
    share at least half of what it holds on its own GPU is work, not a stray (a rank whose
    spawned trainers each use a GPU)."""
    own = own_key(wg)
    if own is None:
        return []
    mine = next((s["mem_bytes"] for s in wg["gpus"] if share_key(s) == own), 0)
    out = []
    for share in wg["gpus"]:
        key = share_key(share)
        if key == own or (mine and share["mem_bytes"] >= mine / 2):
            continue
        a = alert("stray_context", f"stray_context:{rank}:{key_text(key)}", key[0], rank,
                  f"rank {rank} holds {fmt.size_long(share['mem_bytes'])} on {_name(key)}, which is not its "
                  f"own ({device_name(wg['index'], wg.get('mig'))}): a CUDA context made before the device "
                  "was set",
                  "warning", f"call {SET_DEVICE} before any CUDA call (and give DDP device_ids=[LOCAL_RANK])",
                  f"stray rank {rank}")
        a["mem_bytes"] = share["mem_bytes"]
        out.append(on(a, key))
    return out


def _name(key: DevKey) -> str:
    return device_name(key[0], None if key[1] is None else {"gi": key[1], "ci": key[2], "profile": None})


def alloc_retries(rank: int, wg: WorkerGpu, rise: int, window_s: float, cfg: AlertConfig) -> GpuAlert | None:
    """The caching allocator retried (freed its cache to fit an allocation) `rise` times
    within the window: the rank works at the edge of its memory and an OOM is near."""
    if rise < max(1, cfg.retries):
        return None
    where = f" on {device_name(wg['index'], wg.get('mig'))}" if wg["index"] is not None else ""
    a = alert("alloc_retries", f"alloc_retries:{rank}", wg["index"], rank,
              f"rank {rank}'s CUDA allocator retried {rise} time{'s' if rise != 1 else ''} in the last "
              f"{fmt.age(window_s)}{where} ({wg['alloc_retries']} in all): it flushes its cache to fit, "
              "an OOM is near",
              "warning", f"lower the batch size, or set {EXPANDABLE} if much memory is cached",
              f"retries rank {rank}")
    return on(a, own_key(wg))


def fragmentation(rank: int, wg: WorkerGpu, view: GpuView | None, inactive_split: int | None,
                  cfg: AlertConfig) -> GpuAlert | None:
    """Much of a rank's reserved memory is not allocated while its GPU is nearly full: the
    cache holds blocks too fragmented to reuse for the sizes asked."""
    cached, reserved = wg["fragmentation"], wg["reserved"]
    if view is None or cached is None or not reserved:
        return None
    used, total = view["mem_used"], view["mem_total"]
    if used is None or not total or used / total <= cfg.mem_high:
        return None
    if cached < cfg.frag * reserved or cached < cfg.frag_min:
        return None
    split = f", {fmt.size_long(inactive_split)} of it in split blocks" if inactive_split else ""
    a = alert("fragmentation", f"fragmentation:{rank}", view["index"], rank,
              f"rank {rank} reserves {fmt.size_long(reserved)} on {view_name(view)} but allocates only "
              f"{fmt.size_long(wg['allocated'])}: {fmt.size_long(cached)} cached unused{split}, "
              f"with {fmt.size_long(total - used)} free on the GPU",
              "warning",
              f"set {EXPANDABLE} (fewer, growable segments), or torch.cuda.empty_cache() between phases",
              f"frag rank {rank}")
    a["fraction"] = round(cached / reserved, 3)
    return on(a, own_key(wg))


# ---------------------------------------------------------------------- OOM ----
def oom_line(tail: Iterable[str] | None) -> str | None:
    """The stderr line that says CUDA ran out of memory, if any (last one wins)."""
    for line in reversed(list(tail or ())):
        low = line.lower()
        if any(m in low for m in OOM_MARKERS):
            return line.strip()
    return None


OOM_HINT = (f"lower the batch size, or free memory held elsewhere on the GPU; {EXPANDABLE} "
            "helps when much memory is cached")


def oom_caught(rank: int, wg: WorkerGpu, rise: int) -> GpuAlert | None:
    """A live rank's num_ooms rose: it hit CUDA out of memory and caught it."""
    if rise <= 0:
        return None
    key = own_key(wg)
    where = f" on {device_name(wg['index'], wg.get('mig'))}" if key is not None else ""
    a = alert("oom", f"oom:{rank}:{key_text(key) if key is not None else None}", wg["index"], rank,
              f"rank {rank} hit CUDA out of memory{where} and went on ({wg['ooms']} in all)",
              "error", OOM_HINT, f"OOM rank {rank}")
    return on(a, key)


def oom_alert(rank: int, key: DevKey | None, view: GpuView | None, line: str,
              age_s: float | None = None) -> GpuAlert:
    """A worker died of CUDA OOM: on which GPU (or MIG slice) and what else was there at the
    last sample."""
    gpu_index = None if key is None else key[0]
    name = view_name(view) if view is not None else _name(key) if key is not None else ""
    where = "on an unknown GPU (no sample showed it on one)" if key is None else f"on {name}"
    msg = f"rank {rank} died of CUDA out of memory {where}"
    others = []
    if view is not None:
        when = "at the last sample" + (f" ({age_s:.0f}s before)" if age_s is not None and age_s >= 1 else "")
        parts = []
        for p in sorted(view["processes"], key=lambda p: -(p["mem_bytes"] or 0)):
            r = owner(p)
            if r == rank:
                continue
            label = f"rank {r}" if p["rank"] is not None else (
                f"a child of rank {r} (pid {p['pid']})" if r is not None else describe_process(p))
            parts.append(f"{label} {fmt.size_long(p['mem_bytes'])}")
            others.append({"pid": p["pid"], "rank": r, "mem_bytes": p["mem_bytes"]})
        msg += (f"; {when} {name} had {fmt.size_long(view['mem_used'])} of "
                f"{fmt.size_long(view['mem_total'])} used")
        msg += (": also there " + ", ".join(parts)) if parts else ", nothing else of note on it"
    tried = _TRIED.search(line)
    if tried:
        msg += f" (it tried to allocate {tried.group(1)})"
    a = alert("oom", f"oom:{rank}:{key_text(key) if key is not None else None}", gpu_index, rank, msg,
              "error", OOM_HINT, f"OOM rank {rank}")
    a.update({"others": others, "line": line[:300]})
    return on(a, key)
