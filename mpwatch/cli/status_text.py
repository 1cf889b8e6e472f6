"""`mpwatch ctl status`: a live run's status (status.Status) as plain text lines, workers
first, then the hang diagnosis, the GPUs and the run's alerts. Pure; the caller prints."""
from __future__ import annotations

from mpwatch.contract import (
    BY_KEY,
    SHOWN,
    WORK_METRIC,
    GpuProcess,
    GpuView,
    RunPace,
    State,
    Status,
    WorkerStatus,
    in_force,
    pending_changes,
    reading,
    shown,
    slowed_by,
)
from mpwatch.text import eventtext, fmt, gpu_values, memory_text, profile_text, slowdown_text
from mpwatch.text.children import child_note
from mpwatch.text.gpu_names import ON_MIG, na_notes, slice_text
from mpwatch.text.input_notes import input_notes

UTIL, UTIL_MEM = BY_KEY["util_gpu"], BY_KEY["util_mem"]
SM, SM_MAX = BY_KEY["sm_clock_mhz"], BY_KEY["sm_clock_max_mhz"]


def _v(v: object, unit: str = "") -> str:
    """A cell: '-' for unknown, numbers to 4 significant digits."""
    return "-" if v is None else fmt.num(v) + unit


def _mem(g: GpuView) -> str:
    used, total = g["mem_used"], g["mem_total"]
    pct = f" ({used / total:.0%})" if used is not None and total else ""
    return f"mem {fmt.size(used, fmt.NA)}/{fmt.size(total, fmt.NA)}{pct}"


def gpu_line(g: GpuView) -> str:
    """One GPU: N/A where NVML could not tell."""
    sm = reading(g, SM)
    held = [r.replace("_", " ") for r in slowed_by(g.get("throttle_reasons"))]
    clocks = "" if sm is None else f" · SM {gpu_values.number(sm)}/{gpu_values.of(g, SM_MAX)}"
    clocks += f" (held: {', '.join(held)})" if held and clocks else ""
    mig = f" · MIG, {len(g.get('slices', []))} slices" if "slices" in g else ""
    plain = "".join(f" · {gpu_values.of(g, c)}" for c in SHOWN)
    return (f"GPU {g['index']}: {g['name'] or fmt.NA}"
            f" · {_mem(g)}"
            f" · {gpu_values.of(g, UTIL)} ({gpu_values.of(g, UTIL_MEM)})"
            f"{plain}{clocks}{mig}")


def slice_line(s: GpuView) -> str:
    """A MIG slice of the GPU above: its own memory and the ranks whose own it is."""
    mig = s.get("mig")
    ranks = f" · {fmt.ranks(s['ranks'])}" if s["ranks"] else ""
    return f"  {slice_text(mig) if mig else 'MIG'}: {_mem(s)}{ranks} · {s['uuid'] or fmt.NA}"


def _device_lines(g: GpuView, skip: frozenset[str]) -> list[str]:
    """A GPU's (or slice's) notes of what is N/A and why, its processes and its alerts."""
    out = [f"    {note}" for note in na_notes(g["errors"], skip)]
    for p in g["processes"]:
        out.append(f"    pid {p['pid']:>7} {fmt.size(p['mem_bytes'], fmt.NA):>9}  {gpu_owner(p)}")
    for a in g["alerts"]:
        out.append(f"  ! {a['message']}")
        if a.get("hint"):
            out.append(f"    what to do: {a.get('hint')}")
    return out


def gpu_owner(p: GpuProcess) -> str:
    if p["rank"] is not None:
        return f"rank {p['rank']}"
    if p["child_of"] is not None:
        return f"child of rank {p['child_of']}: {p['cmd'] or ''}"[:80]
    if not p["visible"]:
        return "not visible (another PID namespace)"
    return f"outside: {p['user'] or '?'}: {p['cmd'] or ''}"[:80]


def _worker_lines(w: WorkerStatus, st: Status) -> list[str]:
    hb = "none" if w["heartbeat"] == "none" else _v(w["heartbeat_age"], "s")
    out = [f"{w['rank']:>4} {_v(w['pid']):>7} {w['state']:10} {_v(w['step']):>8} {_v(w['loss']):>10} "
           f"{hb:>6} {_v(w['cpu_percent']):>6} {fmt.size(w['rss_bytes'], '-'):>6} {w['restarts']:>8}  "
           f"{w['cause'] or ''}"]
    for c in w["children"]:
        out.append(f"{'':>4} {c['pid']:>7} {'└ ' + c['status']:10} {_v(c['step']):>8} "
                   f"{_v(c['loss']):>10} {'':>6} {_v(c['cpu_percent']):>6} {fmt.size(c['rss_bytes'], '-'):>6}"
                   f"           {child_note(c, w['rank'])}")
    mem = w.get("memory")  # its CUDA OOM (the finding's words) and its allocator snapshot
    if mem is not None:
        said = [mem["oom"], f"snapshot {mem['snapshot']}" if mem["snapshot"] else None]
        out.append(f"{'':>4} memory: " + "; ".join(x for x in said if x))
    stl = w["stall"] if w["state"] == State.STALLED else None
    slow = w.get("slow_start")
    if stl:  # the hang diagnosis: what it does, where it is stuck, the dump to read
        r = st["run"]
        since = r["started"] + r["uptime"] - stl["since"]  # both wall clock
        out.append(f"{'':>4} stalled {_v(round(max(0.0, since), 1), 's')}: "
                   f"{stl.get('detail') or stl.get('kind') or ''}")
    elif slow:
        out.append(f"{'':>4} {eventtext.slow_start_text(slow.get('limit'))}: "
                   f"{slow.get('detail') or slow.get('kind') or ''}")
    info = stl or slow
    where = info and (info.get("where") or info.get("innermost"))
    if info and where:
        coll = info.get("collective")
        out.append(f"{'':>4} {'stuck in' if stl else 'in'} {where}"
                   + (f", waiting in {coll}" if coll else ""))
    if w["last_dump"]:
        out.append(f"{'':>4} last dump: {w['last_dump']}")
    stop = w.get("stop")
    if stop and w["state"] in (State.RUNNING, State.STALLED, State.PAUSED, State.STARTING):
        out.append(f"{'':>4} {stop['signal']} sent, SIGKILL in {_v(stop['kill_in'], 's')}")
    out += [f"{'':>4} {note}" for note in input_notes(w)]
    for refused in w.get("refused_tunables", []):
        name, _, why = refused.partition(": ")
        out.append(f"{'':>4} tunable {name} refused: {why}")
    return out


def control_lines(st: Status) -> list[str]:
    """The tunables' values in force (and who changed them), each change still pending (its
    value, its step, how many ranks took it), the checkpoint requests still waiting, and the
    newest profile and CUDA memory snapshot asked."""
    out = []
    for t in st.get("tunables") or []:
        c = in_force(t)
        how = f" (set by {c['by']}" + (f" from step {c['step']}" if c["step"] is not None else "") \
            + (f"; waiting: {fmt.ranks(c['waiting'])}" if c["waiting"] else "") + ")" if c else ""
        out.append(f"tunable {t['name']} = {shown(t['value'])} ({t['type']}){how}")
        for p in pending_changes(t):
            out.append(f"  then {shown(p['value'])} from step {p['step']} (set by {p['by']}; "
                       f"{len(p['answers'])}/{len(p['answers']) + len(p['waiting'])} ranks took it)")
    for r in st.get("checkpoints") or []:
        if r["waiting"]:
            out.append(f"checkpoint asked of {fmt.ranks(r['ranks'])}"
                       + (f" at step {r['step']}" if r["step"] is not None else "")
                       + f": waiting for {fmt.ranks(r['waiting'])}")
    profiles = st.get("profiles") or []
    if profiles:  # the newest: where it stands on each rank
        out.append(f"{profile_text.request_text(profiles[-1])}: {profile_text.outcome_text(profiles[-1])}")
    snapshots = st.get("memory_snapshots") or []
    if snapshots:  # the newest: written where, or why not (no CUDA)
        out.append(memory_text.said(snapshots[-1]))
    return out


def pace_line(p: RunPace) -> str:
    """'pace: 4.8 steps/s, 0.61x its best (7.9 steps/s, held at 05:03:10)' (contract.slowdown)."""
    work = f" of {WORK_METRIC} {fmt.num(p['work'])}" if "work" in p else ""
    best_work = f" of {WORK_METRIC} {fmt.num(p['best_work'])}" if "best_work" in p else ""
    return (f"pace: {p['steps_per_s']:.1f} steps/s{work}, {p['ratio']:.2f}x its best "
            f"({p['best_steps_per_s']:.1f} steps/s{best_work}, held at {slowdown_text.clock(p['best_at'])})")


def status_lines(st: Status) -> list[str]:
    r = st["run"]
    counts = ", ".join(f"{n} {s}" for s, n in sorted(r["counts"].items()))
    out = [f"run {r['id']} ({r['state']}) · {r['script']} · up {r['uptime']:.0f}s · {counts} · "
           f"restarts {r['restarts']}",
           f"{'RANK':>4} {'PID':>7} {'STATE':10} {'STEP':>8} {'LOSS':>10} {'HB':>6} {'CPU%':>6} {'RSS':>6} "
           f"{'RESTARTS':>8}  CAUSE"]
    for w in st["workers"]:
        out += _worker_lines(w, st)
    sg = st["straggler"]
    if sg and sg["text"]:
        out.append("hang: " + sg["text"])
    pace = r.get("pace")
    if pace is not None:
        out.append(pace_line(pace))
    if st["gpu_status"]:
        out.append(f"GPU: {st['gpu_status']}")
    for g in st["gpus"]:
        out.append(gpu_line(g))
        out += _device_lines(g, frozenset())
        for s in g.get("slices", []):  # "n/a on MIG": said once, by its GPU
            out.append(slice_line(s))
            out += _device_lines(s, frozenset({ON_MIG}))
    out += control_lines(st)
    for ra in st["alerts"][-5:]:
        out.append(f"alert: {ra['message']}")
    return out
