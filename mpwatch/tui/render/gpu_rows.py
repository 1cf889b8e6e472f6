"""The main screen's GPU panel and alert lines (pure; the UI thread draws what they return).

One row per GPU, at any width from 80 columns: index, a memory bar that tells where the
memory goes (torch allocated, the caching allocator's reserve, the ranks' other memory,
processes outside the run, free), used/total, utilization, the ranks whose own GPU it is
(a collision marked), memory held outside the run, and the worst standing alert in a few
words. Wide terminals add the plain counters (contract.gpu_counters.SHOWN: temperature,
power), and memory and utilization sparklines of the last minutes. A GPU in MIG mode has a
row of its own ("MIG" for its utilization, "needs root" for a memory only root reads), then
one per slice, named by its profile, with the slice's own memory and ranks ("n/a": MIG
reports no utilization). Colours follow nvitop's bands; every
shape has its own character (NO_COLOR).
"""
from __future__ import annotations

from collections.abc import Sequence

from mpwatch.contract import BY_KEY, SHOWN, GpuAlert, GpuView, RunAlert, Status, devices
from mpwatch.text import fmt, gpu_values
from mpwatch.text.gpu_names import ROOT_ON_MIG, short_slice
from mpwatch.tui.render import bars, node_rows, segs
from mpwatch.tui.render.glyphs import Glyphs
from mpwatch.tui.render.segs import Line, Part, line

# nvitop's bands (percent): below the first is light, below the second moderate, else heavy.
MEM_BANDS = (10.0, 80.0)
UTIL_BANDS = (10.0, 75.0)
BAND_STYLE = ("green", "yellow", "red")
SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}
PART_STYLE = {"allocated": "bold", "cached": "", "other": "dim", "outside": "magenta", "free": "bright_black"}
WIDE = 120
UTIL = BY_KEY["util_gpu"]


def band(pct: float | None, bands: tuple[float, float]) -> str:
    if pct is None:
        return "bright_black"
    return BAND_STYLE[0 if pct < bands[0] else 1 if pct < bands[1] else 2]


def mem_pct(gpu: GpuView) -> float | None:
    used, total = gpu["mem_used"], gpu["mem_total"]
    return 100.0 * used / total if used is not None and total else None


def own_ranks(gpu: GpuView) -> list[int]:
    """The ranks whose own GPU this is; from the processes where the status does not say."""
    if "ranks" in gpu:
        return gpu["ranks"]
    return sorted({r for p in gpu["processes"] for r in (p["rank"], p["child_of"]) if r is not None})


def outside_bytes(gpu: GpuView) -> int | None:
    """Memory of processes outside the run (a worker's children are the run's); None: unknown."""
    if "breakdown" in gpu:
        return gpu["breakdown"]["outside"]
    out = [p for p in gpu["processes"] if p["rank"] is None and p["child_of"] is None]
    if any(p["mem_bytes"] is None for p in out):
        return None
    return sum(p["mem_bytes"] or 0 for p in out)


def mem_parts(gpu: GpuView) -> list[tuple[str, float]]:
    """(part, bytes) for the bar: allocated, cached, other, outside, free. What NVML counts
    beyond the attributed parts (driver, other namespaces' unlisted use) shows as other, the
    driver's own reserve too (MemoryInfo_v2 tells it apart from used: it is not free)."""
    used, total = gpu["mem_used"], gpu["mem_total"]
    if used is None or not total:
        return []
    used += gpu.get("mem_reserved") or 0
    if "breakdown" in gpu:
        b = gpu["breakdown"]
        known = {"allocated": b["allocated"] or 0, "cached": b["cached"] or 0, "outside": b["outside"] or 0}
    else:
        known = {"allocated": 0, "cached": 0, "outside": outside_bytes(gpu) or 0}
    other = max(used - sum(known.values()), 0)
    return [("allocated", known["allocated"]), ("cached", known["cached"]), ("other", other),
            ("outside", known["outside"]), ("free", max(total - used, 0))]


def mem_bar(gpu: GpuView, width: int, g: Glyphs) -> Line:
    parts = mem_parts(gpu)
    if not parts:
        return line((g.mem["free"] * width, "bright_black"))
    cells = bars.split_width([b for _, b in parts], width)
    tone = band(mem_pct(gpu), MEM_BANDS)
    out: list[Part] = []
    for (part, _), n in zip(parts, cells, strict=True):
        if n:
            style = PART_STYLE[part] if part in ("outside", "free") else f"{PART_STYLE[part]} {tone}".strip()
            out.append((g.mem[part] * n, style))
    return line(*out)


def ranks_text(ranks: Sequence[int]) -> str:
    """r0,1 or r0-7: runs of three or more written as ranges."""
    if not ranks:
        return ""
    out, i = [], 0
    rs = sorted(ranks)
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(f"{rs[i]}-{rs[j]}" if j - i >= 2 else ",".join(map(str, rs[i:j + 1])))
        i = j + 1
    return "r" + ",".join(out)


def severity(a: GpuAlert) -> str:
    return a.get("severity", "warning")


def worst(alerts: Sequence[GpuAlert]) -> GpuAlert | None:
    return min(alerts, key=lambda a: (SEVERITY_ORDER.get(severity(a), 1), a["since"]), default=None)


def short(a: GpuAlert) -> str:
    return a.get("short") or a["kind"].replace("_", " ")


def _history(gpu: GpuView, width: int, g: Glyphs) -> list[Part]:
    hist = gpu["history"]
    total = float(gpu["mem_total"] or max((v for v in hist["mem_used"] if v is not None), default=1))
    mem = bars.sparkline_scaled([None if v is None else float(v) for v in hist["mem_used"]], width,
                                g.spark, 0.0, total)
    util = bars.sparkline_scaled([None if v is None else float(v) for v in hist["util_gpu"]], width,
                                 g.spark, 0.0, 100.0)
    return [(" " + segs.pad(mem, width, right=True), band(mem_pct(gpu), MEM_BANDS)),
            (" " + segs.pad(util, width, right=True), band(gpu["util_gpu"], UTIL_BANDS))]


def gpu_row(gpu: GpuView, g: Glyphs, width: int) -> Line:
    """A GPU's row, or a MIG slice's (labelled by its profile, under its GPU's)."""
    wide = width >= WIDE
    mig = gpu.get("mig")
    label = f"{gpu['index']:>2} " if mig is None else f"{g.child}{segs.pad(short_slice(mig), 7)} "
    spark = max(min((width - 125) // 2 + 16, 24), 10) if wide and "history" in gpu else 0
    fixed = 38 + (sum(1 + c.width for c in SHOWN) + 2 * (spark + 1) if wide else 0)
    bar_w = max(min(width - fixed - 20, 24), 8) - (len(label) - 3)  # a slice's columns under its GPU's
    out: list[Part] = [(label, "bold"), *mem_bar(gpu, max(bar_w, 2), g),
                      (" " + segs.pad(_mem_text(gpu), 11), ""), _util(gpu)]
    if wide:  # the plain counters (temperature, power): a slice has none of its own
        out += [(" " + segs.pad("" if mig else gpu_values.of(gpu, c), c.width, right=True), "")
                for c in SHOWN]
        if spark:
            out += _history(gpu, spark, g)
    ranks = own_ranks(gpu)
    collide = g.collision if len(ranks) > 1 else ""
    text = ranks_text(ranks)
    out += [(" " + text, "cyan"), (collide, "bold yellow"), (" " * max(8 - len(text) - len(collide), 0), "")]
    outside = outside_bytes(gpu)
    has_outside = any(p["rank"] is None and p["child_of"] is None for p in gpu["processes"])
    out_text = "" if not has_outside else f"out {fmt.size(outside, '?')}"
    out.append((" " + segs.pad(out_text, 8), "magenta"))
    a = worst(gpu["alerts"])
    if a is not None:
        out.append((f" {g.alert.get(severity(a), '!')} {short(a)}",
                    SEVERITY_STYLE.get(severity(a), "yellow")))
    return segs.cut(line(*out), width)


def _mem_text(gpu: GpuView) -> str:
    if gpu["mem_used"] is None and gpu["errors"].get("memory") == ROOT_ON_MIG:
        return "needs root"  # the whole GPU's memory, in MIG mode: its slices' rows have theirs
    return f"{fmt.size(gpu['mem_used'], fmt.NA)}/{fmt.size(gpu['mem_total'], fmt.NA)}"


def _util(gpu: GpuView) -> Part:
    """Utilization; on MIG, which reports none, "MIG" on the GPU and "n/a" on its slices (never 0)."""
    if gpu["util_gpu"] is None and ("slices" in gpu or "mig" in gpu):
        return (" " + segs.pad("MIG" if "slices" in gpu else "n/a", 4, right=True), "bright_black")
    util = gpu["util_gpu"]
    return (" " + segs.pad(gpu_values.value(UTIL, util), 4, right=True), band(util, UTIL_BANDS))


def title(status: Status, g: Glyphs, width: int, rows: int) -> str:
    """The panel's border title: what the row's parts mean; how many GPUs scroll."""
    n = len(status["gpus"])
    if not n:
        return "GPU"
    m = g.mem
    legend = (f"{m['allocated']} torch {m['cached']} cached {m['other']} other {m['outside']} outside "
              f"{m['free']} free")
    nodes = len({gpu.get("node") for gpu in status["gpus"]})
    slices = len(devices(status["gpus"])) - n
    head = (f"{n} GPU{'s' if n > 1 else ''}" + (f" on {nodes} nodes" if nodes > 1 else "")
            + (f", {slices} MIG slice{'s' if slices > 1 else ''}" if slices else "")
            + (f" ({rows} shown, scroll)" if rows < n + slices else ""))
    if width >= WIDE:
        return g.sep.join((head, legend, "sparklines: memory, utilization (2 min)", "g: GPU screen"))
    return g.sep.join((head, legend, "g: GPU screen") if width >= 70 else (head, "g: GPU screen"))


def _as_on_node(gpu: GpuView) -> GpuView:
    out = gpu.copy()
    out["index"] = gpu.get("node_index", gpu["index"])
    return out


def gpu_rows(status: Status, g: Glyphs, width: int) -> list[Line]:
    gpus = status["gpus"]
    note = status["gpu_status"]
    if not gpus:
        return [line(("GPU: ", "bold"), (note or "no NVIDIA GPU found", "bright_black"))]
    if "node" in gpus[0]:  # a merged view: grouped by node, each labelled, NVML's own index shown
        lines = [line((lab, "bold cyan"), *gpu_row(_as_on_node(v), g, width - len(label)))
                 for label, gpu in zip(node_rows.gpu_label(status), gpus, strict=True)
                 for lab, v in ((label, gpu), *((" " * len(label), s) for s in gpu.get("slices", ())))]
    else:
        lines = [gpu_row(v, g, width) for v in devices(gpus)]
    if note:
        lines.append(segs.cut(line((note, "bright_black")), width))
    return lines


# ------------------------------------------------------------------ alerts ----
def run_severity(a: RunAlert) -> str:
    """A run alert's: a straggler or a slowdown slows the run but breaks nothing (a warning); the
    others stop it."""
    return "warning" if a["kind"] in ("straggler", "slowdown") else "error"


def alert_items(status: Status) -> list[tuple[str, str]]:
    """(severity, full text) of every standing alert, the worst first: the run's own (a stuck
    rank, a full disk, a process that cannot be killed; a straggler, which slows the run but
    breaks nothing, is a warning) before the GPUs'."""
    items = [(run_severity(a), a["message"]) for a in status["alerts"]]
    gpu_alerts = [a for gpu in devices(status["gpus"]) for a in gpu["alerts"]]
    gpu_alerts.sort(key=lambda a: SEVERITY_ORDER.get(severity(a), 1))
    return items + [(severity(a), a["message"]) for a in gpu_alerts]
