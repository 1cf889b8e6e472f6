"""`mpwatch summary RUN [--json]`: one screen of post-mortem for a terminal or a CI log,
from the run directory (postmortem.summarize), live or finished. Main thread."""
from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mpwatch.cli.args import Parser, die
from mpwatch.cli.listing import ended_text
from mpwatch.contract import ALIVE_STATES, shown
from mpwatch.rundir import layout, postmortem, reader, registry
from mpwatch.settings import Settings
from mpwatch.text import fmt, memory_text, profile_text, safe

MAX_STALLS = 8  # one screen: the rest are counted
MAX_ALERTS = 10


def _at(ts: float, started: float | None) -> str:
    """A moment of the run: seconds from its start, else the clock."""
    if started is None:
        return time.strftime("%H:%M:%S", time.localtime(ts))
    return "+" + fmt.duration(max(0.0, ts - started))


def _head(s: postmortem.Summary) -> list[str]:
    r = s["listing"]
    cmd = shlex.join([Path(r["script"]).name if r["script"] else "?", *s["args"]])
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["started"])) if r["started"] else "?"
    took = fmt.duration(r["duration"]) + (" so far" if r["live"] else "")
    out = [f"run {r['run_id']} · {cmd}",
           f"ended: {ended_text(r)}" if r["ending"] != "live" else "live: still running",
           f"started {started} · took {took} · {_workers(s)} · restarts {s['restarts']}"]
    f = r["first_failure"]
    if f is not None:
        out.append(f"first failure: rank {f['rank']} at {_at(f['ts'], r['started'])}: "
                   f"{f['cause'] or 'failed'}")
        if f["error"] and f["error"] not in (f["cause"] or ""):
            out.append(f"  traceback ends: {f['error']}")
    return out


def _workers(s: postmortem.Summary) -> str:
    """'3 workers', and the count it started with when a resize changed it."""
    now, first = s["workers"], s["listing"]["nprocs"]
    text = f"{now if now is not None else '?'} worker{'' if now == 1 else 's'}"
    changed = first is not None and now is not None and now != first
    return text + (f" ({first} at the start)" if changed else "")


def _ranks(s: postmortem.Summary) -> list[str]:
    out = [f"{'RANK':>4}  {'STATE':10} {'STEP':>8} {'LAST LOSS':>10} {'RESTARTS':>8} {'GPU PEAK':>9}  CAUSE"]
    cut = s["listing"]["ending"] == "cut short"
    for k in s["ranks"]:
        peak = k["gpu_peak"] if k["gpu_peak"] is not None else k["torch_peak"]
        state = k["state"] or "?"
        if cut and state in ALIVE_STATES:
            state += "?"  # its last known state: the supervisor died before it ended
        out.append(f"{k['rank']:>4}  {state:10} {fmt.num(k['step'], na='-'):>8} "
                   f"{fmt.num(k['loss'], na='-'):>10} {k['restarts']:>8} {fmt.size(peak, '-'):>9}  "
                   f"{k['cause'] or ''}")
    return out


def _stalls(s: postmortem.Summary) -> list[str]:
    started = s["listing"]["started"]
    out: list[str] = []
    if s["stalls"]:
        out.append("stalls:")
    for st in s["stalls"][:MAX_STALLS]:
        out.append(f"  rank {st['rank']} at {_at(st['ts'], started)}, step {fmt.num(st['step'], na='?')}: "
                   f"{st['detail'] or st['kind'] or 'stalled'}")
        where = [f"stuck in {st['where']}"] if st["where"] else []
        where += [f"waiting in {st['collective']}"] if st["collective"] else []
        where += [f"dump {st['dump']}"] if st["dump"] else []
        if where:
            out.append("      " + " · ".join(where))
    if len(s["stalls"]) > MAX_STALLS:
        out.append(f"  ... and {len(s['stalls']) - MAX_STALLS} more ({layout.EVENTS})")
    if s["slow_starts"]:
        out.append("slow starts (no first report within --startup-timeout; never called stalled):")
    for st in s["slow_starts"][:MAX_STALLS]:
        out.append(f"  rank {st['rank']} at {_at(st['ts'], started)}: "
                   f"{st['detail'] or st['kind'] or 'slow start'}")
        if st["where"] or st["dump"]:
            out.append("      " + " · ".join(([f"in {st['where']}"] if st["where"] else [])
                                           + ([f"dump {st['dump']}"] if st["dump"] else [])))
    if s["culprit"]:  # (an old run's says "likely culprit: ...")
        out.append(s["culprit"] if s["culprit"].startswith("likely culprit") else f"hang: {s['culprit']}")
    return out


def _alerts(s: postmortem.Summary) -> list[str]:
    started = s["listing"]["started"]
    out = ["alerts:"] if s["alerts"] else []
    for a in s["alerts"][:MAX_ALERTS]:
        on = ((f" GPU {a['gpu']}" if a["gpu"] is not None else "")
              + (f" rank {a['rank']}" if a["rank"] is not None else ""))
        out.append(f"  {_at(a['ts'], started)} {a['kind']}{on}: {a['message']}")
    if len(s["alerts"]) > MAX_ALERTS:
        out.append(f"  ... and {len(s['alerts']) - MAX_ALERTS} more ({layout.EVENTS})")
    return out


def _spans(s: postmortem.Summary, found: Sequence[Mapping[str, Any]], title: str,
           lead: Callable[[Mapping[str, Any]], str], tail: Callable[[Mapping[str, Any]], str]) -> list[str]:
    """Each finding of a kind that lasts (a straggler, a slowdown): from when to when, then its
    last words; `lead` and `tail` its own words before and after the span."""
    started = s["listing"]["started"]
    out = [title] if found else []
    for f in found[:MAX_ALERTS]:
        until = f"to {_at(f['until'], started)}" if f["until"] is not None else "to the end"
        out += [f"  {lead(f)}from {_at(f['since'], started)} {until}{tail(f)}", f"      {f['message']}"]
    return out


def _stragglers(s: postmortem.Summary) -> list[str]:
    """Each straggler finding: which rank, from when to when, what it cost the run, its last words."""
    return _spans(s, s["stragglers"], "stragglers (a rank the others waited for at every step):",
                  lambda f: f"rank {f['rank']} " if f["rank"] is not None else "a rank ",
                  lambda f: f", cost the run {fmt.span(f['lost_s'])}" if f["lost_s"] is not None else "")


def _slowdowns(s: postmortem.Summary) -> list[str]:
    """Each slowdown: from when to when, how slow, the steps it cost, its last words."""
    def tail(f: Mapping[str, Any]) -> str:
        how = f" at {f['ratio']:.2f}x its best" if f["ratio"] is not None else ""
        return how + (f", cost the run {f['lost_steps']:.0f} steps ({fmt.span(f['lost_s'])})"
                      if f["lost_steps"] is not None else "")
    return _spans(s, s["slowdowns"], "slowdowns (the run slower than its own best pace):", lambda f: "", tail)


def _live(s: postmortem.Summary) -> list[str]:
    """Tunables changed, checkpoints, profiles and CUDA memory snapshots asked, when and by whom, and
    how the ranks took them."""
    started = s["listing"]["started"]
    out: list[str] = []
    changes = sorted(((c["ts"], t["name"], c) for t in s["tunables"] for c in t["changes"]),
                     key=lambda x: x[0])
    if changes:
        out.append("tunables changed:")
    for ts, name, c in changes:
        late = [a["rank"] for a in c["answers"] if a["late"]]
        took = f"{len(c['answers'])} rank(s) took it" + (f", late: {fmt.ranks(late)}" if late else "")
        if c.get("pending"):  # never in force: not every rank asked took it
            out.append(f"  {_at(ts, started)} {name} = {shown(c['value'])} from step {c['step']} "
                       f"({shown(c['old'])} until then), by {c['by']}: pending, {len(c['answers'])} of "
                       f"{len(c['answers']) + len(c['waiting'])} rank(s) took it")
            continue
        out.append(f"  {_at(ts, started)} {name} = {shown(c['value'])} (was {shown(c['old'])}) "
                   f"{'from step ' + str(c['step']) if c['step'] is not None else 'at once'}, by {c['by']}: "
                   + took)
    if s["checkpoints"]:
        out.append("checkpoints asked:")
    for r in s["checkpoints"]:
        steps = sorted({a["step"] for a in r["answers"] if a["step"] is not None})
        late = [a["rank"] for a in r["answers"] if a["late"]]
        out.append(f"  {_at(r['ts'], started)} {fmt.ranks(r['ranks'])}"
                   f"{' at step ' + str(r['step']) if r['step'] is not None else ''}, by {r['by']}: "
                   + (f"taken at step {', '.join(map(str, steps))}" if steps else "none taken")
                   + "".join(f"; {w}: {fmt.ranks(rs)}"
                             for w, rs in (("late", late), ("missed", r["missed"]),
                                           ("never answered", r["waiting"])) if rs))
    if s["profiles"]:
        out.append("profiles:")
    for p in s["profiles"]:
        out.append(f"  {_at(p['ts'], started)} {profile_text.request_text(p)}: "
                   f"{profile_text.outcome_text(p)}")
    if s["memory_snapshots"]:
        out.append("CUDA memory snapshots:")
    out += [f"  {_at(m['ts'], started)} {memory_text.said(m)}" for m in s["memory_snapshots"]]
    return out


def _files(files: list[str]) -> list[str]:
    """The run's files, the rank folders' folded into one line."""
    top = [f for f in files if not f.startswith("rank-")]
    ranks = sorted({int(m.group(1)) for f in files if (m := layout.RANK_DIR.match(f.split("/")[0]))})
    dumps = sum(1 for f in files if "/stacks/" in f)
    profiles = sum(1 for f in files if f"/{layout.PROFILES}/" in f)
    out = ["  " + " ".join(top)] if top else []
    if ranks:
        out.append(f"  rank-N/stdout.log, stderr.log for ranks {_span(ranks)}"
                   + (f"; {dumps} stack dump(s) in rank-N/stacks/" if dumps else "")
                   + (f"; {profiles} profile(s) in rank-N/{layout.PROFILES}/" if profiles else ""))
    return out


def _span(ranks: list[int]) -> str:
    return f"{ranks[0]}-{ranks[-1]}" if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 1 \
        else ",".join(map(str, ranks))


def summary_lines(s: postmortem.Summary) -> list[str]:
    out = _head(s) + [""] + _ranks(s)
    for part in (_stalls(s), _stragglers(s), _slowdowns(s), _alerts(s), _live(s)):
        if part:
            out += [""] + part
    out += ["", f"files in {s['listing']['run_dir']}:"] + _files(s["files"])
    if s["notes"]:
        out += ["notes:"] + [f"  {n}" for n in s["notes"]]
    return out


def cmd_summary(argv: list[str], settings: Settings) -> int:
    p = Parser(prog="mpwatch summary", description="What a run came to, from its directory.")
    p.add_argument("run", metavar="RUN", help="a run id (see 'mpwatch ls --all') or a run directory")
    p.add_argument("--json", action="store_true")
    ns = p.parse_args(argv)
    try:
        s = postmortem.summarize(reader.read(registry.find_run_dir(ns.run, settings.tmpdir)))
    except (registry.RunError, reader.NotARunDir) as exc:
        return die(str(exc))
    print(json.dumps(s, indent=1) if ns.json else safe.text(summary_lines(s)))  # JSON escapes control bytes
    return 0
