"""GPU alert decisions about one GPU: pure functions over the views the GPU watcher builds
each tick (the same dicts `ctl status --json` shows under gpus[]), tested without
processes. The rank-level ones (stray contexts, allocator retries, fragmentation, OOM)
are in supervisor.gpu.rank_alerts. Called on the GPU poller thread.

Each decision runs on one leaf (a GPU, or a MIG slice: contract.gpu_view.leaves) and returns
GpuAlert dicts, which name a slice by `gi`/`ci` beside its GPU's `gpu`; `key` names the
condition, so the watcher can tell an alert that starts from one that goes on, and stamps
`since`. Every alert says what to do (`hint`), how bad it is (`severity`) and a few words for
the GPU row (`short`).
Thresholds live in AlertConfig: settings.GpuThresholds, read with the other switches
(docs/gpu-alerts.md says where each default comes from).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from mpwatch.contract import AlertKind, DevKey, GpuAlert, GpuProcess, GpuView, dev_key
from mpwatch.settings import GpuThresholds
from mpwatch.supervisor.gpu.ranks import owner
from mpwatch.text import fmt
from mpwatch.text.gpu_names import view_name

Severity = Literal["error", "warning", "info"]
SET_DEVICE = "torch.cuda.set_device(int(os.environ['LOCAL_RANK']))"
MIN_SLOPE_S = 3.0  # a GPU's memory slope needs this much history to predict when it is full
AlertConfig = GpuThresholds  # the thresholds: MPWATCH_GPU_* (settings)


def alert(kind: AlertKind, key: str, gpu: int | None, rank: int | None, message: str, severity: Severity,
          hint: str, short: str) -> GpuAlert:
    """A GpuAlert; the watcher stamps `since` when it starts."""
    return {"kind": kind, "key": key, "gpu": gpu, "rank": rank, "message": message, "since": 0.0,
            "severity": severity, "hint": hint, "short": short}


def key_text(key: DevKey) -> str:
    """A GPU's or a slice's part of an alert key: "0", "0/1/0"."""
    return str(key[0]) if key[1] is None else f"{key[0]}/{key[1]}/{key[2]}"


def on(a: GpuAlert, key: DevKey | None) -> GpuAlert:
    """The alert placed on a MIG slice (gi, ci beside its GPU's index) when key names one."""
    if key is not None and key[1] is not None and key[2] is not None:
        a["gi"], a["ci"] = key[1], key[2]
    return a


def alert_key(a: GpuAlert) -> DevKey | None:
    """The device an alert is about (None: no GPU)."""
    return None if a["gpu"] is None else (a["gpu"], a.get("gi"), a.get("ci"))


def usable(view: GpuView) -> int | None:
    """The memory the ranks may use: the total less the driver's own reserve where the driver
    tells it apart (MemoryInfo_v2's `reserved`, never in `mem_used`); an older driver's
    total counts it in, as its `mem_used` does. None (or 0) when the total is unknown."""
    total = view["mem_total"]
    if not total:
        return total
    return max(total - (view.get("mem_reserved") or 0), 0)


def reserve_text(view: GpuView) -> str:
    """'; the driver keeps 1.0 GiB' where a reserve is told apart, else ''."""
    reserved = view.get("mem_reserved")
    return f"; the driver keeps {fmt.size_long(reserved)}" if reserved else ""


def ranks_on(view: GpuView) -> dict[int, int]:
    """{rank: bytes} for this run's ranks with a process on the GPU (children included)."""
    out: dict[int, int] = {}
    for p in view["processes"]:
        r = owner(p)
        if r is not None:
            out[r] = out.get(r, 0) + (p["mem_bytes"] or 0)
    return out


def describe_process(p: GpuProcess) -> str:
    if not p["visible"]:
        return f"pid {p['pid']} (not visible: another PID namespace or container)"
    who = ": ".join(x for x in (p["user"], (p["cmd"] or "")[:60]) if x)
    return f"pid {p['pid']}" + (f" ({who})" if who else "")


def ranks_text(ranks: Sequence[int]) -> str:
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"


# ---------------------------------------------------------------- decisions ----
def contention(view: GpuView, forced: bool) -> GpuAlert | None:
    """Two or more ranks whose own GPU is this one: a mistake (error), or a warning when
    `forced` (the run has more ranks than GPUs to give them)."""
    ranks = sorted(view.get("ranks", []))
    if len(ranks) < 2:
        return None
    held = ranks_on(view)
    each = ", ".join(f"rank {r} {fmt.size_long(held[r])}" for r in ranks if r in held)
    key = dev_key(view)
    util = f" at {view['util_gpu']}% utilization" if view["util_gpu"] is not None else ""
    what, hint = (("MIG slice", "give each rank its own slice: set each rank's CUDA_VISIBLE_DEVICES to a "
                   "MIG-… UUID of its own (nvidia-smi -L lists them)") if "mig" in view else
                  ("GPU", f"give each rank its own GPU: {SET_DEVICE} before any CUDA call, "
                   "and check CUDA_VISIBLE_DEVICES"))
    a = alert("contention", f"contention:{key_text(key)}:{','.join(map(str, ranks))}", key[0], None,
              f"{view_name(view)}: {ranks_text(ranks)} share this {what}{util}"
              + (f" ({each})" if each else ""),
              "warning" if forced else "error", hint, f"{len(ranks)} ranks share")
    a["ranks"] = ranks
    return on(a, key)


def outsiders(view: GpuView, cfg: AlertConfig) -> list[GpuAlert]:
    """Processes outside this run holding at least cfg.outside of a GPU the run uses."""
    held = ranks_on(view)
    mine = sorted(set(held) | set(view.get("ranks", [])))
    total = view["mem_total"]
    if not mine or not total:
        return []
    out = []
    for p in view["processes"]:
        mem = p["mem_bytes"]
        if owner(p) is not None or mem is None or mem < cfg.outside * total:
            continue
        key = dev_key(view)
        a = alert("outside", f"outside:{key_text(key)}:{p['pid']}", key[0], None,
                  f"{view_name(view)}: {describe_process(p)} outside this run holds {fmt.size_long(mem)} "
                  f"({mem / total:.0%}), next to {ranks_text(mine)}",
                  "warning",
                  "another job shares this GPU: ask its owner, or run on free GPUs (CUDA_VISIBLE_DEVICES)",
                  f"outside {fmt.size(mem)}")
        a.update({"ranks": mine, "pid": p["pid"], "user": p["user"], "mem_bytes": mem,
                  "fraction": round(mem / total, 3)})
        out.append(on(a, key))
    return out


def slope(points: Sequence[tuple[float, int]], min_span: float = MIN_SLOPE_S) -> float | None:
    """Bytes per second from the first to the last (t, bytes) point; None over too short a span."""
    if len(points) < 2 or points[-1][0] - points[0][0] < min_span:
        return None
    return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])


def memory_high(view: GpuView, growth: Mapping[int, float], rate: float | None,
                cfg: AlertConfig) -> GpuAlert | None:
    """Above cfg.mem_high of the memory the ranks may use (`usable`: the driver's reserve is
    not theirs), or filling it within cfg.fill_s at the current slope (`rate`, bytes/s); names
    the rank that grows fastest (`growth`: rank -> bytes/s)."""
    used, total, index = view["mem_used"], usable(view), view["index"]
    if used is None or not total:
        return None
    frac = used / total
    ttf = (total - used) / rate if rate is not None and rate > 0 else None
    soon = ttf is not None and ttf <= cfg.fill_s
    if frac <= cfg.mem_high and not (soon and frac > 0.5):
        return None
    held = ranks_on(view)
    growing = {r: g for r, g in growth.items() if r in held and g > 0}
    rank, detail = None, ""
    if growing:
        rank = max(growing, key=lambda r: growing[r])
        detail = (f"; rank {rank} grows fastest (+{fmt.size_long(growing[rank])}/s, "
                  f"holds {fmt.size_long(held[rank])})")
    elif held:
        rank = max(held, key=lambda r: held[r])
        detail = f"; rank {rank} holds the most ({fmt.size_long(held[rank])})"
    when = (f", full in ~{fmt.age(ttf)} at +{fmt.size_long(rate)}/s"
            if ttf is not None and rate is not None else "")
    hint = ("memory keeps growing: look for tensors kept across steps (a loss summed without .item(), "
            "growing lists or caches), else lower the batch size" if soon else
            "little room is left: lower the batch size, use activation checkpointing or mixed precision")
    key = dev_key(view)
    a = alert("memory_high", f"memory_high:{key_text(key)}", index, rank,
              f"{view_name(view)} memory at {frac:.0%} ({fmt.size_long(used)} of {fmt.size_long(total)}"
              f"{reserve_text(view)}){when}{detail}",
              "error" if soon else "warning", hint,
              f"full in {fmt.age(ttf)}" if soon and ttf is not None else f"mem {frac:.0%}")
    a.update({"fraction": round(frac, 3),
              "growth_bytes_per_s": growing.get(rank) if rank is not None else None,
              "time_to_full_s": round(ttf, 1) if ttf is not None else None})
    return on(a, key)


# ---------------------------------------------------------------------- idle ----
IdleKind = Literal["batch", "unused"]


def idle_kind(view: GpuView, running: set[int], busy: Sequence[GpuView], visible: bool,
              cfg: AlertConfig) -> IdleKind | None:
    """"batch": the GPU's own running ranks leave memory and compute mostly unused (the
    batch could grow); "unused": a GPU the run may use does nothing while another of its
    GPUs works (ranks piled up elsewhere). None otherwise; unknown is never idle."""
    used, total, util = view["mem_used"], view["mem_total"], view["util_gpu"]
    if util is None or util >= cfg.idle_util:
        return None
    mine = set(view.get("ranks", [])) | set(ranks_on(view))
    if mine:
        if mine & running and used is not None and total and used / total < cfg.idle_mem:
            return "batch"
        return None
    if visible and any(b["index"] != view["index"] for b in busy):
        return "unused"
    return None


def idle(view: GpuView, kind: IdleKind | None, since: float | None, now: float, busy: Sequence[GpuView],
         cfg: AlertConfig) -> GpuAlert | None:
    if kind is None or since is None or now - since < cfg.idle_s:
        return None
    index, dur = view["index"], fmt.age(now - since)
    if kind == "batch":
        held = sorted(set(view.get("ranks", [])) | set(ranks_on(view)))
        frac = (view["mem_used"] or 0) / (view["mem_total"] or 1)
        a = alert("idle", f"idle:{index}", index, None,
                  f"GPU {index}: memory at {frac:.0%} and utilization at {view['util_gpu']}% for {dur} while "
                  f"{ranks_text(held)} {'runs' if len(held) == 1 else 'run'} on it: "
                  "the batch size could probably grow",
                  "info", "raise the batch size (or the DataLoader's num_workers if the ranks wait for data)",
                  f"idle {view['util_gpu']}%")
        a["ranks"] = held
        return a
    others = sorted(busy, key=lambda b: b["index"])
    names = ", ".join(f"GPU {b['index']} at {b['util_gpu']}%"
                      + (f" ({ranks_text(b['ranks'])})" if b.get("ranks") else "") for b in others)
    piled = any(len(b.get("ranks", [])) > 1 for b in others)
    return alert("idle", f"idle:{index}", index, None,
                 f"GPU {index} idle ({view['util_gpu']}% for {dur}) while {names} works",
                 "warning",
                 f"ranks share GPUs while this one idles: {SET_DEVICE}" if piled else
                 "the run does not use this GPU: start one rank per GPU, "
                 "or hide it with CUDA_VISIBLE_DEVICES",
                 "idle")


def evaluate(view: GpuView, forced: bool, growth: Mapping[int, float], rate: float | None,
             idle_alert: GpuAlert | None, cfg: AlertConfig, pids_hidden: bool = False) -> list[GpuAlert]:
    """Every standing alert about one GPU (the idle one decided with its clock, above). With
    `pids_hidden` (a container: NVML's pids are the host's) nobody is called an outsider."""
    out: list[GpuAlert] = []
    c = contention(view, forced)
    if c:
        out.append(c)
    if not pids_hidden:
        out.extend(outsiders(view, cfg))
    m = memory_high(view, growth, rate, cfg)
    if m:
        out.append(m)
    if idle_alert:
        out.append(idle_alert)
    return out
