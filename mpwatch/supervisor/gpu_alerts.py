"""GPU alert decisions: pure functions over GPU views, tested without processes.

A GPU view is the dict the GPU watcher builds each tick (the same one `ctl status --json`
shows under gpus[]): index, mem_used, mem_total, util_gpu, ... and processes, each
{pid, rank, child_of, user, cmd, mem_bytes, visible}; rank is set for a worker of this
run, child_of for a worker's descendant, both None for a process outside the run.

Each decision returns alert dicts {kind, key, gpu, rank, message, ...}; `key` names the
condition, so the watcher can tell an alert that starts from one that goes on.
Thresholds live in AlertConfig; the memory threshold and the low-use window can be set
with MPWATCH_GPU_MEM_ALERT (a fraction, 0.9, or a percentage, 90) and MPWATCH_GPU_IDLE_S.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_TRIED = re.compile(r"Tried to allocate ([0-9.]+ ?[KMGTP]?i?B)")
OOM_MARKERS = ("cuda out of memory", "outofmemoryerror", "cuda error: out of memory")


@dataclass(frozen=True)
class AlertConfig:
    mem_high: float = 0.90  # fraction of a GPU's memory that counts as nearly full
    idle_s: float = 60.0  # low memory and utilization this long -> "the batch could grow"
    idle_mem: float = 0.40  # "low memory": below this fraction of the GPU's memory
    idle_util: float = 30.0  # "low utilization": below this percentage
    growth_window_s: float = 60.0  # memory growth is measured over this much history
    cooldown_s: float = 60.0  # an alert that ends and starts again is not re-announced sooner

    @classmethod
    def from_env(cls, env) -> AlertConfig:
        kw = {}
        mem = _number(env.get("MPWATCH_GPU_MEM_ALERT"))
        if mem is not None and 0 < mem <= 100:
            kw["mem_high"] = mem / 100.0 if mem > 1 else mem
        idle = _number(env.get("MPWATCH_GPU_IDLE_S"))
        if idle is not None and idle > 0:
            kw["idle_s"] = idle
        return cls(**kw)


def _number(text):
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if v == v else None


def fmt_bytes(n) -> str:
    if n is None:
        return "N/A"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def owner(p: dict):
    """The rank a GPU process belongs to (itself or as a child), or None for outsiders."""
    return p.get("rank") if p.get("rank") is not None else p.get("child_of")


def ranks_on(gpu: dict) -> dict:
    """{rank: bytes} for this run's ranks with a process on the GPU (children included)."""
    out: dict = {}
    for p in gpu.get("processes") or ():
        r = owner(p)
        if r is not None:
            out[r] = out.get(r, 0) + (p.get("mem_bytes") or 0)
    return out


def describe_process(p: dict) -> str:
    if not p.get("visible", True):
        return f"pid {p['pid']} (not visible: another PID namespace or container)"
    who = ": ".join(x for x in (p.get("user"), (p.get("cmd") or "")[:60]) if x)
    return f"pid {p['pid']}" + (f" ({who})" if who else "")


def _ranks_text(ranks) -> str:
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"


# ---------------------------------------------------------------- decisions ----
def contention(gpu: dict) -> dict | None:
    """Two or more ranks of this run hold memory on one GPU."""
    held = ranks_on(gpu)
    if len(held) < 2:
        return None
    ranks = sorted(held)
    each = ", ".join(f"rank {r} {fmt_bytes(held[r])}" for r in ranks)
    return {"kind": "contention", "key": f"contention:{gpu['index']}:{','.join(map(str, ranks))}",
            "gpu": gpu["index"], "rank": None, "ranks": ranks,
            "message": f"GPU {gpu['index']}: {_ranks_text(ranks)} share this GPU ({each}); "
                       f"check torch.cuda.set_device(LOCAL_RANK) / the device each rank uses"}


def outsiders(gpu: dict) -> list[dict]:
    """Processes outside this run holding memory on a GPU that a worker uses."""
    held = ranks_on(gpu)
    if not held:
        return []
    out = []
    for p in gpu.get("processes") or ():
        if owner(p) is not None:
            continue
        mem = p.get("mem_bytes")
        out.append({"kind": "outside", "key": f"outside:{gpu['index']}:{p['pid']}", "gpu": gpu["index"],
                    "rank": None, "ranks": sorted(held), "pid": p["pid"], "user": p.get("user"),
                    "mem_bytes": mem,
                    "message": f"GPU {gpu['index']}: {describe_process(p)} outside this run holds "
                               f"{fmt_bytes(mem)}, next to {_ranks_text(held)}"})
    return out


def growth_rates(history: dict, now: float, window: float) -> dict:
    """{rank: bytes per second} from {rank: [(t, bytes), ...]} over the last `window` seconds."""
    out = {}
    for rank, points in history.items():
        pts = [(t, b) for t, b in points if now - t <= window and b is not None]
        if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
            continue
        out[rank] = (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])
    return out


def is_memory_high(gpu: dict, cfg: AlertConfig) -> bool:
    used, total = gpu.get("mem_used"), gpu.get("mem_total")
    return bool(used and total and used / total > cfg.mem_high)


def memory_high(gpu: dict, growth: dict, cfg: AlertConfig) -> dict | None:
    """A GPU above cfg.mem_high of its memory; names the rank that grows fastest."""
    if not is_memory_high(gpu, cfg):
        return None
    used, total = gpu["mem_used"], gpu["mem_total"]
    frac = used / total
    held = ranks_on(gpu)
    growing = {r: g for r, g in growth.items() if r in held and g > 0}
    rank, detail = None, ""
    if growing:
        rank = max(growing, key=growing.get)
        detail = f"; rank {rank} grows fastest (+{fmt_bytes(growing[rank])}/s, holds {fmt_bytes(held[rank])})"
    elif held:
        rank = max(held, key=held.get)
        detail = f"; rank {rank} holds the most ({fmt_bytes(held[rank])})"
    return {"kind": "memory_high", "key": f"memory_high:{gpu['index']}", "gpu": gpu["index"], "rank": rank,
            "fraction": round(frac, 3), "growth_bytes_per_s": growing.get(rank) if rank is not None else None,
            "message": f"GPU {gpu['index']} memory at {frac:.0%} ({fmt_bytes(used)} of {fmt_bytes(total)})"
                       + detail}


def is_low_use(gpu: dict, cfg: AlertConfig) -> bool:
    used, total, util = gpu.get("mem_used"), gpu.get("mem_total"), gpu.get("util_gpu")
    if used is None or not total or util is None:
        return False  # unknown is not low
    return used / total < cfg.idle_mem and util < cfg.idle_util


def low_use_since(prev: float | None, now: float, gpu: dict, running_ranks, cfg: AlertConfig):
    """When the current stretch of low use with running workers on the GPU began, or None."""
    on = set(ranks_on(gpu)) & set(running_ranks)
    if not on or not is_low_use(gpu, cfg):
        return None
    return now if prev is None else prev


def idle_hint(gpu: dict, since: float | None, now: float, cfg: AlertConfig) -> dict | None:
    if since is None or now - since < cfg.idle_s:
        return None
    held = ranks_on(gpu)
    frac = gpu["mem_used"] / gpu["mem_total"]
    return {"kind": "idle", "key": f"idle:{gpu['index']}", "gpu": gpu["index"], "rank": None,
            "ranks": sorted(held),
            "message": f"GPU {gpu['index']}: memory at {frac:.0%} and utilization at {gpu['util_gpu']}% "
                       f"for {now - since:.0f}s while {_ranks_text(held)} {'runs' if len(held) == 1 else 'run'} on it: "
                       f"the batch size "
                       f"could probably grow"}


def evaluate(gpu: dict, growth: dict, since: float | None, now: float, cfg: AlertConfig) -> list[dict]:
    """Every standing alert for one GPU view."""
    out = []
    c = contention(gpu)
    if c:
        out.append(c)
    out.extend(outsiders(gpu))
    m = memory_high(gpu, growth, cfg)
    if m:
        out.append(m)
    i = idle_hint(gpu, since, now, cfg)
    if i:
        out.append(i)
    return out


# ---------------------------------------------------------------------- OOM ----
def oom_line(tail) -> str | None:
    """The stderr line that says CUDA ran out of memory, if any (last one wins)."""
    for line in reversed(list(tail or ())):
        low = line.lower()
        if any(m in low for m in OOM_MARKERS):
            return line.strip()
    return None


def oom_alert(rank: int, gpu_index, view: dict | None, line: str, age_s: float | None = None) -> dict:
    """A worker died of CUDA OOM: on which GPU and what else was there at the last sample."""
    if gpu_index is None:
        where = "on an unknown GPU (no sample showed it on one)"
    else:
        where = f"on GPU {gpu_index}"
    msg = f"rank {rank} died of CUDA out of memory {where}"
    others = []
    if view is not None:
        when = "at the last sample" + (f" ({age_s:.0f}s before)" if age_s is not None and age_s >= 1 else "")
        used, total = view.get("mem_used"), view.get("mem_total")
        parts = []
        for p in sorted(view.get("processes") or (), key=lambda p: -(p.get("mem_bytes") or 0)):
            r = owner(p)
            if r == rank:
                continue
            label = f"rank {r}" if p.get("rank") is not None else (
                f"a child of rank {r} (pid {p['pid']})" if r is not None else describe_process(p))
            parts.append(f"{label} {fmt_bytes(p.get('mem_bytes'))}")
            others.append({"pid": p["pid"], "rank": r, "mem_bytes": p.get("mem_bytes")})
        msg += f"; {when} GPU {gpu_index} had {fmt_bytes(used)} of {fmt_bytes(total)} used"
        msg += (": also there " + ", ".join(parts)) if parts else ", nothing else of note on it"
    tried = _TRIED.search(line)
    if tried:
        msg += f" (it tried to allocate {tried.group(1)})"
    return {"kind": "oom", "key": f"oom:{rank}:{gpu_index}", "gpu": gpu_index, "rank": rank,
            "others": others, "line": line[:300], "message": msg}
