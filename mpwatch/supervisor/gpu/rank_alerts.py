"""GPU alert decisions about one rank: stray contexts, allocator retries, fragmentation and
CUDA out of memory. Pure functions over the rank's WorkerGpu and the GPU views the watcher
builds each tick (supervisor.gpu.alerts has the per-GPU ones and the shared helpers). Called on
the GPU poller thread, and on the main thread for a worker's exit (OOM).
"""
from __future__ import annotations

from collections.abc import Iterable

from mpwatch.contract import DevKey, GpuAlert, GpuView, WorkerGpu
from mpwatch.supervisor.gpu.alerts import SET_DEVICE, AlertConfig, alert, key_text, on, usable
from mpwatch.supervisor.gpu.ranks import own_key, share_key
from mpwatch.text import fmt
from mpwatch.text.gpu_names import device_name, view_name

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
    used, total = view["mem_used"], usable(view)  # the GPU above memory_high's threshold
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


# The bare count's hint (no finding: a worker whose torch has no OOM observer): what was held is unknown,
# so fragmentation is never said here (supervisor.gpu.oom_story says it when it is the story).
OOM_HINT = "lower the batch size, or free memory held elsewhere on the GPU"


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
