"""The GPU screen's tables (pure: a Status in, Lines out; the UI thread draws them): each
GPU's heading (and each MIG slice's under it), the ranks with torch's and NVML's view of their
memory, the processes outside the run, and every alert with its full text and what to do
about it. Unknown values read N/A, never 0, and why is said once per reason (text.gpu_names).
Ages are taken against the status's own sample time, so a recorded status always draws the
same screen.
"""
from __future__ import annotations

from mpwatch.contract import (
    BY_KEY,
    SHOWN,
    GpuProcess,
    GpuView,
    Status,
    WorkerGpu,
    WorkerStatus,
    devices,
    reading,
    slowed_by,
)
from mpwatch.text import fmt, gpu_values, slowdown_text
from mpwatch.text.gpu_names import ON_MIG, label, na_notes, slice_text
from mpwatch.tui.render import segs
from mpwatch.tui.render.glyphs import Glyphs
from mpwatch.tui.render.gpu_rows import (
    MEM_BANDS,
    SEVERITY_ORDER,
    SEVERITY_STYLE,
    UTIL_BANDS,
    band,
    mem_pct,
    run_severity,
    severity,
)
from mpwatch.tui.render.segs import Line, Part, line

NA = fmt.NA
NOT_VISIBLE_HINT = ("not visible: the pid is in another PID namespace (a container); run mpwatch with the "
                    "host's PID namespace (e.g. docker run --pid=host) to see who it is")
HEAD = "bold"
UTIL, SM, SM_MAX = BY_KEY["util_gpu"], BY_KEY["sm_clock_mhz"], BY_KEY["sm_clock_max_mhz"]


def now_of(status: Status) -> float:
    """The status's own time: its newest GPU sample, else the run's clock."""
    ts = [g["ts"] for g in status["gpus"]]
    return max(ts) if ts else status["run"]["started"] + status["run"]["uptime"]


def gpu_heading(gpu: GpuView, g: Glyphs) -> Line:
    """A GPU's line: memory, utilization, the plain counters (temperature, power), name, UUID
    (`gpu_notes`: the lines under it)."""
    pct = mem_pct(gpu)
    uuid = gpu.get("uuid")
    node = f" (node {gpu['node']} GPU {gpu.get('node_index')})" if "node" in gpu else ""  # a merged view
    util = "util MIG" if "slices" in gpu and gpu["util_gpu"] is None else gpu_values.of(gpu, UTIL)
    plain = "".join(f"  {gpu_values.of(gpu, c)}" for c in SHOWN)
    out: list[Part] = [(f"GPU {gpu['index']}{node}", "bold"),
                      (f"  memory {fmt.size(gpu['mem_used'], NA)} / {fmt.size(gpu['mem_total'], NA)}",
                       band(pct, MEM_BANDS)),
                      (f"  {util}", band(gpu["util_gpu"], UTIL_BANDS)),
                      (f"{plain}  {gpu['name'] or NA}", "")]
    if uuid:
        out.append((f"  {uuid}", "bright_black"))
    return line(*out)


def gpu_notes(v: GpuView, indent: str = "  ") -> list[Line]:
    """Under a GPU's (or slice's) heading: its SM clock and what holds it back, then why what
    is N/A is, a line per reason (a slice's "n/a on MIG" is its GPU's to say)."""
    out: list[Line] = []
    sm, top = reading(v, SM), reading(v, SM_MAX)
    if sm is not None:
        held = [r.replace("_", " ") for r in slowed_by(v.get("throttle_reasons"))]
        out.append(line((f"{indent}SM clock {gpu_values.number(sm)} of {gpu_values.value(SM_MAX, top)}", ""),
                        *(((f", held by {', '.join(held)}", "yellow"),) if held else ())))
    skip = frozenset({ON_MIG}) if "mig" in v else frozenset()
    out += [line((f"{indent}{note}", "bright_black")) for note in na_notes(v["errors"], skip)]
    return out


def slice_heading(s: GpuView, g: Glyphs) -> Line:
    """A MIG slice's line, under its GPU's: which slice, its own memory and UUID."""
    mig = s.get("mig")
    out: list[Part] = [(f"  {g.child} {slice_text(mig) if mig else 'MIG'}", "bold"),
                      (f"  memory {fmt.size(s['mem_used'], NA)} / {fmt.size(s['mem_total'], NA)}",
                       band(mem_pct(s), MEM_BANDS))]
    if s.get("uuid"):
        out.append((f"  {s.get('uuid')}", "bright_black"))
    return line(*out)


def device_label(v: GpuView) -> str:
    """A GPU's index, or a slice's "0:1" (its GPU, its GPU instance)."""
    return label(v["index"], v.get("mig"))


# ------------------------------------------------------------------- ranks ----
# torch's allocated, reserved and peak; NVML's memory of the rank's processes; the gap between
# NVML and reserved (CUDA context, non-torch memory); fragmentation (reserved, not allocated).
RANK_COLS = (("RANK", 4), ("PID", 7), ("GPU", 11), ("ALLOC", 5), ("RSRV", 5), ("PEAK", 5), ("NVML", 5),
             ("GAP", 5), ("FRAG", 5), ("RETRY", 5), ("OOM", 3), ("SM%", 4))
UUID_CHARS = 8  # "GPU-5a1c" is enough to tell a machine's GPUs apart; the heading has it whole


def _size(v: int | None) -> str:
    return fmt.size(v, NA)


def _count(v: int | None) -> str:
    return NA if v is None else str(v)


def _gpu_name(wg: WorkerGpu) -> str:
    uuid, mig = wg.get("uuid"), wg.get("mig")
    if wg.get("index") is None:
        return NA
    if mig is not None:  # its MIG slice, by GPU instance (the slice's UUID is in its heading)
        return f"{wg['index']} GI{mig['gi']}" + (f" CI{mig['ci']}" if mig["ci"] else "")
    return f"{wg['index']} {uuid[:UUID_CHARS]}" if uuid else f"{wg['index']} by pid"


def rank_cells(w: WorkerStatus) -> list[str]:
    wg = w["gpu"]
    if wg is None:
        return [str(w["rank"]), str(w["pid"] or ""), "no GPU memory"] + [""] * (len(RANK_COLS) - 3)
    sm = wg.get("sm_util")
    return [str(w["rank"]), str(w["pid"] or ""), _gpu_name(wg), _size(wg.get("allocated")),
            _size(wg.get("reserved")), _size(wg.get("peak")), _size(wg.get("mem_bytes")),
            _size(wg.get("other_bytes")),
            _size(wg.get("fragmentation")), _count(wg.get("alloc_retries")), _count(wg.get("ooms")),
            NA if sm is None else f"{sm}%"]


def _row(cells: list[str], style: str = "") -> Line:
    text = " ".join(segs.pad(c, w, right=i >= 3)
                    for i, (c, (_, w)) in enumerate(zip(cells, RANK_COLS, strict=True)))
    return line((text, style))


def rank_table(status: Status, width: int) -> list[Line]:
    """A row per rank; under it the children of the rank that hold GPU memory."""
    out: list[Line] = [segs.cut(_row([n for n, _ in RANK_COLS], HEAD), width)]
    kids: dict[int, list[tuple[str, GpuProcess]]] = {}
    for gpu in devices(status["gpus"]):
        for p in gpu["processes"]:
            if p["child_of"] is not None:
                kids.setdefault(p["child_of"], []).append((device_label(gpu), p))
    for w in status["workers"]:
        wg = w["gpu"]
        style = "bold yellow" if wg is not None and wg.get("shared_with") else ""
        out.append(segs.cut(_row(rank_cells(w), style), width))
        for where, p in kids.get(w["rank"], []):
            child = ["", str(p["pid"]), f"{where} child", "", "", "",
                     _size(p["mem_bytes"]), "", "", "", "", _sm(p)]
            out.append(segs.cut(_row(child, "bright_black"), width))
    for gpu in devices(status["gpus"]):
        ranks = gpu.get("ranks") or []
        if len(ranks) > 1:
            mig = gpu.get("mig")
            what = f"GPU {gpu['index']}" + (f" {slice_text(mig)}" if mig else "")
            out.append(line((f"ranks {', '.join(map(str, ranks))} all have {what} as their own", "yellow")))
    return out


def _sm(p: GpuProcess) -> str:
    sm = p.get("sm_util")
    return NA if sm is None else f"{sm}%"


# ------------------------------------------------------------- outsiders ----
OUT_COLS = (("GPU", 3), ("PID", 8), ("USER", 10), ("MEM", 7), ("SM%", 4), ("SINCE", 8))


def outside_table(status: Status, width: int) -> list[Line]:
    """Processes on the run's GPUs that are not the run's, with who and since when."""
    now = now_of(status)
    views = devices(status["gpus"])
    gpu_w = max([OUT_COLS[0][1], *(len(device_label(v)) for v in views)])
    cols = [(n, gpu_w if n == "GPU" else w) for n, w in OUT_COLS]
    head = " ".join(segs.pad(n, w) for n, w in cols) + " COMMAND"
    out: list[Line] = [segs.cut(line((head, HEAD)), width)]
    for gpu in views:
        for p in gpu["processes"]:
            if p["rank"] is not None or p["child_of"] is not None:
                continue
            since = p.get("since")
            cells = [device_label(gpu), str(p["pid"]), p["user"] or NA, _size(p["mem_bytes"]), _sm(p),
                     NA if since is None else f"{fmt.age(max(now - since, 0.0))} ago"]
            text = " ".join(segs.pad(c, w) for c, (_, w) in zip(cells, cols, strict=True))
            if p["visible"]:
                out.append(segs.cut(line((text, ""), (" " + (p["cmd"] or NA), "bright_black")), width))
            else:
                out.append(segs.cut(line((text, ""), (" " + NOT_VISIBLE_HINT, "yellow")), width))
    if len(out) == 1:
        out.append(line(("no process outside the run holds GPU memory", "bright_black")))
    return out


# ------------------------------------------------------------------ alerts ----
def alert_list(status: Status, g: Glyphs) -> list[Line]:
    """Every alert: its mark, full text, since when, and its hint on the next line."""
    now = now_of(status)
    out: list[Line] = []
    for ra in status["alerts"]:
        sev = run_severity(ra)
        found, slower = ra.get("straggler"), ra.get("slowdown")
        cost = (f"; it has cost the run {fmt.span(found['lost_s'])}" if found
                else f"; {slowdown_text.cost(slower, so_far=True)}" if slower else "")
        out.append(line((f"{g.alert[sev]} ", SEVERITY_STYLE[sev]), (ra["message"], ""),
                        (f"  ({fmt.age(max(now - ra['ts'], 0.0))} ago{cost})", "bright_black")))
    alerts = sorted((a for gpu in devices(status["gpus"]) for a in gpu["alerts"]),
                    key=lambda a: (SEVERITY_ORDER.get(severity(a), 1), a["since"]))
    for a in alerts:
        sev = severity(a)
        out.append(line((f"{g.alert.get(sev, '!')} ", SEVERITY_STYLE.get(sev, "yellow")), (a["message"], ""),
                        (f"  (since {fmt.age(max(now - a['since'], 0.0))} ago)", "bright_black")))
        hint = a.get("hint")
        if hint:
            out.append(line(("    what to do: ", "bright_black"), (hint, "")))
    if not out:
        out.append(line(("no alerts", "bright_black")))
    return out
