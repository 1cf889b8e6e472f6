"""The detail view's texts (tui.screens.detail draws them): the worker's title lines, its
latest profile with its top operators, the end of a log, its children, its latest stack dump.
Pure: a status and the files' text in, the render layer's lines out, every text through the
sanitiser (tui.render.segs); UI thread.
"""
from __future__ import annotations

from mpwatch.contract import ProfileRequest, WorkerStatus
from mpwatch.text import fmt, profile_text, stackfmt
from mpwatch.tui.render import cells
from mpwatch.tui.render.glyphs import Glyphs
from mpwatch.tui.render.segs import Line, Part, line


def title_lines(w: WorkerStatus, g: Glyphs) -> list[Line]:
    """Who it is, its state, pid, step, loss, restarts and GPU; its note; its memory snapshot."""
    head = (f"  pid {w['pid']}  step {fmt.num(w['step'], na='-')}  loss {fmt.num(w['loss'], na='-')}"
            f"  restarts {w['restarts']}")
    gpu = cells.gpu_text(w["gpu"])
    out = [line((f"rank {w['rank']} ", "bold"),
                (f"{g.state.get(w['state'], '?')} {w['state']}", cells.STATE_STYLE.get(w["state"], "")),
                (head + (f"  GPU {gpu}" if gpu else ""), ""))]
    note = cells.note_text(w)
    if note:
        out.append(line((note, "yellow")))
    memory = w.get("memory")
    if memory is not None and memory["snapshot"]:  # at its OOM, or asked with M / ctl memory
        out.append(line((f"CUDA memory snapshot: {memory['snapshot']} (pytorch.org/memory_viz opens it)",
                         "")))
    return out


def gone_lines(rank: int) -> list[Line]:
    return [line((f"rank {rank}: no longer in the run", "bold red"))]


def profile_lines(w: WorkerStatus, profiles: list[ProfileRequest], top_n: int) -> list[Line] | None:
    """The rank's latest profile: the request and where it stands, then its top operators."""
    req = profile_text.latest(profiles, w["rank"])
    if req is None:
        return None
    state = profile_text.state_text(req, w["rank"], w["step"])
    out = [line((profile_text.request_text(req), "bold")),
           line((state, "red" if state.startswith(("failed", "missed")) else ""))]
    top = profile_text.top_lines(profile_text.result(req, w["rank"]), top_n)
    if top:
        out += [line((top[0], "bold")), *(line((t, "")) for t in top[1:])]
    return out


def plain_lines(texts: list[str], empty: str) -> list[Line]:
    """A log's end (or any list of texts), a line each; `empty` dim where there is none."""
    if not texts:
        return [line((empty, "bright_black"))]
    return [line((t, "")) for t in texts]


def children_lines(w: WorkerStatus) -> list[Line]:
    return plain_lines([f"{c['pid']}  {c['status']}  cpu {fmt.num(c['cpu_percent'], na='-')}%  "
                        f"rss {fmt.size(c['rss_bytes'])}  {c['cmd'] or c['name']}" for c in w["children"]],
                       "no child processes")


def dump_lines(dump: str, can_act: bool = True) -> list[Line]:
    """The stack dump, one line a frame, function first: the main thread first, mpwatch's own
    threads folded to one line, the user's frames bright and library frames dim, each thread's
    innermost frame of the user's own code marked with `>` (readable without colour). `d`
    is offered only where it can act (a live run)."""
    if not dump.strip():
        said = "no stack dump yet (press d to take one)" if can_act else "no stack dump at this moment"
        return [line((said, "bright_black"))]
    procs = stackfmt.stack_view(dump)
    if not procs:  # not a faulthandler dump: as written
        return plain_lines(dump.split("\n"), "")
    out: list[Line] = []
    for proc in procs:
        out.append(line((proc.heading, "bold")))
        for t in proc.threads:
            if t.mpwatch:
                out.append(line((f"{t.title}: {len(t.frames)} frames folded", "bright_black")))
                continue
            out.append(line((t.title, "bold")))
            for f in t.frames:
                parts: list[Part] = [("> " if f.marked else "  ", "bold reverse" if f.marked else ""),
                                     (f.func, "bold" if f.user else "dim"),
                                     (f"  {f.where}", "" if f.user else "dim")]
                out.append(line(*parts))
        out += [line((n, "dim")) for n in proc.native]
    return out
