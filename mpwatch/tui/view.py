"""The formatting layer: a status snapshot in, rows of cells and lines of text out (pure).

A cell is a str, or a tuple of (text, style) segments; tuples compare cheaply, so the
table can diff cells without building Rich objects. Nothing here reads a clock or a PID
of its own: everything comes from the snapshot, which makes snapshot tests stable.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from mpwatch.tui.glyphs import Glyphs
from mpwatch.tui.widgets import bars

STATE_STYLE = {
    "starting": "cyan", "running": "green", "stalled": "bold yellow", "paused": "bold blue",
    "restarting": "magenta", "exited": "green", "failed": "bold red", "killed": "red",
}
PHASE_STYLE = {"data": "cyan", "compute": "green", "sync": "yellow", "other": "bright_black"}
ALIVE = ("starting", "running", "stalled", "paused")
HEADER_STATES = ("running", "stalled", "paused", "failed")


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int

    @property
    def right(self) -> bool:
        return self.key in RIGHT


RIGHT = {"step", "speed", "loss", "hb", "cpu", "rss"}


def columns(wide: bool, width: int = 0) -> list[Column]:
    """Most useful first, so an 80-column terminal shows what matters without scrolling;
    on a wide one the NOTE column takes the room that is left."""
    if wide:
        cols = [Column("rank", "RANK", 5), Column("pid", "PID", 7), Column("state", "STATE", 11),
                Column("step", "STEP", 8), Column("speed", "STEP/S", 6), Column("loss", "LOSS", 9),
                Column("trend", "TREND", 12), Column("hb", "HB", 5), Column("cpu", "CPU%", 5),
                Column("rss", "RSS", 6), Column("gpu", "GPU", 9), Column("phases", "TIME d/c/s/o", 12)]
        used = sum(c.width + 2 for c in cols) + 4
        return cols + [Column("note", "NOTE", max(30, width - used))]
    return [Column("rank", "RANK", 5), Column("state", "STATE", 11), Column("step", "STEP", 7),
            Column("loss", "LOSS", 8), Column("trend", "TREND", 8), Column("hb", "HB", 5),
            Column("cpu", "CPU%", 4), Column("rss", "RSS", 5), Column("phases", "TIME", 6),
            Column("pid", "PID", 7), Column("speed", "STEP/S", 6), Column("gpu", "GPU", 9),
            Column("note", "NOTE", 40)]


# ------------------------------------------------------------------ numbers ----
def fmt_bytes(n) -> str:
    if not isinstance(n, (int, float)):
        return ""
    for unit in ("B", "K", "M", "G", "T"):
        if abs(n) < 1000 or unit == "T":
            return f"{n:.0f}{unit}" if unit == "B" or abs(n) >= 10 else f"{n:.1f}{unit}"
        n /= 1024
    return ""


def fmt_age(s) -> str:
    if not isinstance(s, (int, float)):
        return ""
    if s < 10:
        return f"{s:.1f}s"
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.0f}m"
    return f"{s / 3600:.0f}h"


def fmt_uptime(s) -> str:
    if not isinstance(s, (int, float)):
        return "-"
    s = int(s)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s"


def fmt_num(v, digits: int = 4) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return f"{v:.{digits}g}"
    return str(v)


def fmt_speed(v) -> str:
    if not isinstance(v, (int, float)):
        return ""
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def _get(d, *keys):
    """The first present key: the GPU fields come from another module and may vary."""
    if not isinstance(d, dict):
        return None
    for k in keys:
        if d.get(k) is not None:
            return d[k]
    return None


def gpu_cell(w: dict) -> str:
    g = w.get("gpu")
    if not isinstance(g, dict):
        return ""
    idx = _get(g, "index", "gpu")
    used = _get(g, "used_bytes", "memory_used", "used")
    text = "" if idx is None else str(idx)
    if used is not None:
        text += f":{fmt_bytes(used)}" if text else fmt_bytes(used)
    return text


# ------------------------------------------------------------------- states ----
def state_cell(state: str, g: Glyphs) -> tuple:
    return ((f"{g.state.get(state, '?')} {state}", STATE_STYLE.get(state, "")),)


def note_text(w: dict) -> str:
    parts = []
    st = w.get("state")
    if st in ("exited", "failed", "killed") and w.get("cause"):
        parts.append(w["cause"])
    if st == "stalled":
        stall = w.get("stall") or {}
        age = w.get("heartbeat_age")
        parts.append(f"stalled at step {fmt_num(stall.get('step', w.get('step'))) or '-'}"
                     + (f", silent {fmt_age(age)}" if age is not None else ""))
        if stall.get("kind"):  # what the process is doing, from /proc: busy, blocked (wchan), ...
            parts.append(stall["kind"] + (f" ({stall['detail']})" if stall.get("detail") else ""))
        if stall.get("where"):  # the innermost frame of the user's own code in the last dump
            parts.append(f"stuck in {stall['where']}"
                         + (f", waiting in {stall['collective']}" if stall.get("collective") else ""))
    if w.get("restarts"):
        parts.append(f"restarted {w['restarts']}x")
    if w.get("unkillable"):
        parts.append("could not kill: " + ", ".join(str(p.get("pid")) for p in w["unkillable"]))
    if w.get("dropped"):
        parts.append(f"{w['dropped']} reports dropped")
    return "; ".join(parts)


def phases_cell(w: dict, width: int, g: Glyphs) -> tuple:
    shares = bars.phase_shares(w.get("phases"), w.get("uptime"))
    return tuple((chars, PHASE_STYLE[p]) for p, chars in bars.stacked_bar(shares, width, g.phase))


def hb_cell(w: dict):
    if w.get("state") not in ALIVE:
        return ""
    age = w.get("heartbeat_age")
    if age is None:
        return "-"
    style = "bold yellow" if age >= 10 else ("yellow" if age >= 3 else "")
    return ((fmt_age(age), style),)


# --------------------------------------------------------------------- rows ----
SORTS = ("rank", "state", "step", "loss", "speed", "heartbeat", "cpu", "rss")
_STATE_ORDER = {s: i for i, s in enumerate(("failed", "stalled", "killed", "restarting", "paused",
                                            "starting", "running", "exited"))}


def sort_key(name: str):
    def num(v, default=-math.inf):
        return v if isinstance(v, (int, float)) and math.isfinite(v) else default

    keys = {
        "rank": lambda w: w["rank"],
        "state": lambda w: (_STATE_ORDER.get(w.get("state"), 99), w["rank"]),
        "step": lambda w: (-num(w.get("step")), w["rank"]),
        "loss": lambda w: (num(w.get("loss"), math.inf), w["rank"]),
        "speed": lambda w: (-num(w.get("steps_per_s")), w["rank"]),
        "heartbeat": lambda w: (-num(w.get("heartbeat_age")), w["rank"]),
        "cpu": lambda w: (-num(w.get("cpu_percent")), w["rank"]),
        "rss": lambda w: (-num(w.get("rss_bytes")), w["rank"]),
    }
    return keys[name]


def matches(w: dict, text: str) -> bool:
    """The filter: a number is a rank or a pid; words match state, cause and note."""
    text = text.strip().lower()
    if not text:
        return True
    if text.isdigit():
        return w.get("rank") == int(text) or w.get("pid") == int(text)
    hay = f"rank {w.get('rank')} {w.get('state', '')} {note_text(w)}".lower()
    return all(word in hay for word in text.split())


def row_key(rank: int, child_pid: int | None = None) -> str:
    return f"w{rank}" if child_pid is None else f"w{rank}.{child_pid}"


def rank_of_key(key: str) -> int | None:
    if not key or not key.startswith("w"):
        return None
    try:
        return int(key[1:].split(".")[0])
    except ValueError:
        return None


def worker_cells(w: dict, cols: list[Column], g: Glyphs, folded: bool) -> tuple:
    kids = w.get("children") or []
    fold = (g.folded if folded else g.unfolded) if kids else " "
    values = {
        "rank": f"{fold}{w['rank']}",
        "pid": "" if w.get("pid") is None else str(w["pid"]),
        "state": state_cell(w.get("state", "?"), g),
        "step": fmt_num(w.get("step")),
        "speed": fmt_speed(w.get("steps_per_s")),
        "loss": fmt_num(w.get("loss")),
        "hb": hb_cell(w),
        "cpu": "" if w.get("cpu_percent") is None else f"{w['cpu_percent']:.0f}",
        "rss": fmt_bytes(w.get("rss_bytes")),
        "gpu": gpu_cell(w),
        "note": note_text(w),
    }
    out = []
    for c in cols:
        if c.key == "trend":
            out.append(((bars.sparkline(w.get("loss_tail") or [], c.width, g.spark), "cyan"),))
        elif c.key == "phases":
            out.append(phases_cell(w, c.width, g))
        else:
            out.append(values[c.key])
    return tuple(out)


def child_cells(c: dict, cols: list[Column], g: Glyphs) -> tuple:
    values = {
        "rank": f"  {g.child}",
        "pid": str(c.get("pid", "")),
        "state": ((c.get("status") or "", "bright_black"),),
        "step": fmt_num(c.get("step")),
        "loss": fmt_num(c.get("loss")),
        "hb": fmt_age(c.get("heartbeat_age")),
        "cpu": "" if c.get("cpu_percent") is None else f"{c['cpu_percent']:.0f}",
        "rss": fmt_bytes(c.get("rss_bytes")),
        "note": (c.get("cmd") or c.get("name") or "")[:120],
    }
    if "pid" not in [col.key for col in cols[:3]]:
        values["state"] = ((f"{c.get('pid', '')} {(c.get('status') or '')[:5]}", "bright_black"),)
    return tuple(values.get(col.key, "") for col in cols)


def table_rows(status: dict, g: Glyphs | None = None, *, folded: set | frozenset = frozenset(),
               filter_text: str = "", sort: str = "rank") -> list[tuple[str, tuple]]:
    """[(row key, row source)] in display order: each worker, then its children unless
    folded. A source is ("w", worker, folded) or ("c", child): plain data that compares
    cheaply, formatted into cells (row_cells) only when its line is drawn."""
    workers = [w for w in status.get("workers", []) if matches(w, filter_text)]
    workers.sort(key=sort_key(sort))
    rows = []
    for w in workers:
        is_folded = w["rank"] in folded
        rows.append((row_key(w["rank"]), ("w", w, is_folded)))
        if not is_folded:
            for c in w.get("children") or []:
                rows.append((row_key(w["rank"], c.get("pid")), ("c", c)))
    return rows


def row_cells(source: tuple, cols: list[Column], g: Glyphs) -> tuple:
    if source[0] == "w":
        return worker_cells(source[1], cols, g, source[2])
    return child_cells(source[1], cols, g)


# ------------------------------------------------------------------- header ----
def header_lines(status: dict, g: Glyphs, *, sort: str = "rank", filter_text: str = "",
                 finished: bool = False) -> list[tuple]:
    r = status.get("run", {})
    counts = r.get("counts", {})
    state = "finished" if finished else r.get("state", "?")
    script = " ".join([r.get("script", "?"), *map(str, r.get("args") or [])])
    line1 = (("mpwatch ", "bold"), (r.get("id", "?"), "bold cyan"), (f"  {script}", ""),
             (f"  [{state}]", "bold red" if state in ("stopping", "finished") else "bold"),
             (f"  up {fmt_uptime(r.get('uptime'))}", ""))
    parts = [(f"{len(status.get('workers', []))} workers: ", "")]
    for s in HEADER_STATES:
        n = counts.get(s, 0)
        style = STATE_STYLE[s] if n and s in ("stalled", "failed", "paused") else ""
        parts.append((f"{g.state[s]} {n} {s}  ", style))
    others = {s: n for s, n in counts.items() if s not in HEADER_STATES and n}
    for s, n in sorted(others.items()):
        parts.append((f"{g.state.get(s, '?')} {n} {s}  ", ""))
    parts.append((f"restarts {r.get('restarts', 0)}", "bold magenta" if r.get("restarts") else ""))
    line2 = tuple(parts)
    extra = [f"sort: {sort}"] + ([f"filter: {filter_text}"] if filter_text else [])
    line3 = ((" · ".join(extra), "bright_black"),)
    return [line1, line2, line3]


# ---------------------------------------------------------------------- gpus ----
def gpu_lines(status: dict, g: Glyphs, width: int = 20) -> list[tuple]:
    gpus = status.get("gpus") or []
    note = status.get("gpu_status")
    if not gpus:
        return [(("GPU: ", "bold"), (note or "no NVIDIA GPU found", "bright_black"))]
    lines = []
    for gpu in gpus:
        idx = _get(gpu, "index")
        name = _get(gpu, "name") or ""
        used = _get(gpu, "memory_used", "used_bytes", "mem_used")
        total = _get(gpu, "memory_total", "total_bytes", "mem_total")
        util = _get(gpu, "utilization", "util", "gpu_util", "utilization_gpu")
        frac = used / total if isinstance(used, (int, float)) and isinstance(total, (int, float)) and total else None
        bar = bars.meter(frac, width, g.bar_full, g.bar_empty)
        style = "bold red" if frac is not None and frac >= 0.9 else ("yellow" if frac and frac >= 0.7 else "green")
        seg = [(f"GPU{idx} ", "bold"), (f"{name[:20]:20} ", ""), (bar, style)]
        seg.append((f" {fmt_bytes(used) or 'N/A'}/{fmt_bytes(total) or 'N/A'}", ""))
        seg.append((f" util {util:.0f}%" if isinstance(util, (int, float)) else " util N/A", ""))
        procs = _get(gpu, "processes") or []
        ranks = sorted({p["rank"] for p in procs if isinstance(p, dict) and p.get("rank") is not None})
        others = [p for p in procs if isinstance(p, dict) and p.get("rank") is None]
        if ranks:
            seg.append((f"  ranks {','.join(map(str, ranks))}", "cyan"))
        if others:
            who = ", ".join(f"pid {p.get('pid')}" + (f" ({p['user']})" if p.get("user") else "")
                            + (f" {fmt_bytes(_get(p, 'used_bytes', 'memory_used', 'used'))}"
                               if _get(p, 'used_bytes', 'memory_used', 'used') is not None else "")
                            for p in others[:3])
            seg.append((f"  other: {who}", "yellow"))
        for a in _get(gpu, "alerts") or []:
            seg.append((f"  ! {a.get('message', a) if isinstance(a, dict) else a}", "bold yellow"))
        lines.append(tuple(seg))
    if note:
        lines.append(((note, "bright_black"),))
    return lines


# -------------------------------------------------------------------- events ----
NOTIFY = {"worker_exited", "stalled", "recovered", "restarted", "resized", "alert", "run_finished",
          "stopping", "dump", "gpu_alert"}


def event_notice(rec: dict) -> tuple[str, str] | None:
    """(text, severity) for an event worth telling the user, else None."""
    e = rec.get("event")
    if e not in NOTIFY:
        return None
    who = f"rank {rec['rank']}" if rec.get("rank") is not None else "run"
    if e == "worker_exited":
        state = rec.get("state") or "exited"
        tail = [ln for ln in rec.get("stderr_tail") or [] if ln.strip()]
        text = f"{who} {state}: {rec.get('cause')}"
        if state == "failed" and tail and tail[-1].strip() not in (rec.get("cause") or ""):
            text += f"\n{tail[-1].strip()[:200]}"
        sev = {"failed": "error", "killed": "warning"}.get(state, "information")
        return text, sev
    if e == "stalled":
        return f"{who} stalled: no report for {rec.get('silent_for')}s (step {rec.get('step')})", "warning"
    if e == "recovered":
        return f"{who} recovered (step {rec.get('step')})", "information"
    if e == "restarted":
        return f"{who} restarted (restart {rec.get('attempt')}, {rec.get('why')})", "warning"
    if e == "resized":
        return f"resized from {rec.get('frm')} to {rec.get('to')} workers ({rec.get('mode')})", "information"
    if e in ("alert", "gpu_alert"):
        return f"{rec.get('message')}", "warning"
    if e == "stopping":
        return f"stopping the run ({rec.get('why')})", "warning"
    if e == "dump":
        return f"{who} stack dump written: {rec.get('path')}", "information"
    if e == "run_finished":
        code = rec.get("exit_code")
        return f"run finished, exit code {code}", "information" if code == 0 else "error"
    return None


def selected_line(w: dict | None, g: Glyphs) -> tuple:
    """One line about the selected worker: what the narrow table may not show."""
    if w is None:
        return (("no worker selected", "bright_black"),)
    st = w.get("state", "?")
    segs = [(f"rank {w['rank']} ", "bold"), (f"{g.state.get(st, '?')} {st}", STATE_STYLE.get(st, "")),
            (f" · pid {w.get('pid')}", "")]
    if w.get("steps_per_s") is not None:
        segs.append((f" · {fmt_speed(w['steps_per_s'])} steps/s", ""))
    gpu = gpu_cell(w)
    if gpu:
        segs.append((f" · GPU {gpu}", ""))
    kids = len(w.get("children") or [])
    if kids:
        segs.append((f" · {kids} child process(es)", ""))
    note = note_text(w)
    if note:
        segs.append((f" · {note}", "bold red" if st == "failed" else "yellow"))
    return tuple(segs)


def ending_lines(status: dict) -> list[str]:
    """How each worker ended, for the banner shown once the run has finished."""
    r = status.get("run", {})
    code = r.get("exit_code")
    out = [f"run finished, exit code {code if code is not None else '?'} — press q to leave"]
    for w in status.get("workers", []):
        out.append(f"rank {w['rank']}: {w.get('state')} ({w.get('cause') or 'no cause recorded'})")
    return out
