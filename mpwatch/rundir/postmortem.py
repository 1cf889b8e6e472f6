"""What a finished (or cut short) run comes to, from its directory: how it ended, each
rank's last step and loss, the first failure, the stalls and their culprit, GPU peaks and
the alerts that fired. Pure functions of a rundir.RunDir (no clock but `now` for a live
run's age); `mpwatch ls --all` and `mpwatch summary` render them, `--json` prints them.
Runs on the caller's thread.
"""
from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Literal, TypedDict, cast

from mpwatch.contract import (
    CheckpointRequest,
    Event,
    EventFields,
    EventRecord,
    MemoryRequest,
    ProfileRequest,
    TunableStatus,
    as_float,
    as_int,
    as_str,
    slowdown,
    straggler,
)
from mpwatch.rundir import crash, eventlines, layout, live_events
from mpwatch.rundir.reader import RunDir

Ending = Literal["live", "finished", "cut short"]  # cut short: the supervisor died mid-run

_EXIT_KINDS = (Event.WORKER_EXITED, Event.STOPPING)


class Failure(TypedDict):
    rank: int
    ts: float
    cause: str | None  # as the supervisor put it: "exit 1: ValueError: ..." or "signal SIGKILL"
    error: str | None  # the exception its traceback ended with, when the event's stderr tail has it


class RunListing(TypedDict):
    """One row of `mpwatch ls --all --json`: the keys of `mpwatch ls --json`, then how it ended."""

    run_id: str
    run_dir: str
    pid: int | None
    script: str | None
    started: float | None
    nprocs: int | None
    live: bool
    ending: Ending
    exit_code: int | None
    duration: float | None  # seconds; for a cut short run, up to its last event
    first_failure: Failure | None
    stopped: str | None  # why its stop was asked (it did not end by itself), when one was


class RankEnd(TypedDict):
    rank: int
    state: str | None  # a status.State value
    step: int | None  # the last step reported
    loss: float | None
    restarts: int
    cause: str | None
    gpu_peak: int | None  # bytes: the most NVML saw its processes hold on its GPU (gpu.jsonl)
    torch_peak: int | None  # bytes: torch's max_allocated, when the worker sent a CUDA view


class StallEnd(TypedDict):
    rank: int
    ts: float
    step: int | None
    kind: str | None  # busy | blocked | stopped | zombie | uninterruptible
    detail: str | None
    where: str | None  # the innermost frame of the user's code (from the stall's dump)
    collective: str | None
    dump: str | None  # path of the dump, relative to the run directory


class AlertEnd(TypedDict):
    ts: float
    kind: str
    rank: int | None
    gpu: int | None
    message: str


class StragglerEnd(TypedDict):
    """A straggler finding (alerts of kind `straggler`, one key): when it began and ended, what it
    said last and what it cost the run (its last `lost_s`)."""

    rank: int | None  # the global rank (a node's alert is under its local rank)
    since: float
    until: float | None  # None: it stood until the log's end (the run stopped, or goes on)
    phase: str | None
    lost_s: float | None
    message: str


class SlowdownEnd(TypedDict):
    """A slowdown finding (alerts of kind `slowdown`): when it began (the pace fell under the
    margin) and ended, how slow the run was at its last words, and the steps it cost the run."""

    since: float
    until: float | None  # None: it stood until the log's end (the run stopped, or goes on)
    ratio: float | None  # its pace against its best, as last said
    lost_steps: float | None
    lost_s: float | None
    node: int | None  # the node it was seen on (a merged view's), when one was named
    message: str


class Summary(TypedDict):
    """`mpwatch summary --json`."""

    listing: RunListing
    args: list[str]
    workers: int | None  # at the end: the last resize's count, else the start's (listing.nprocs)
    restarts: int
    stopped: str | None  # why a stop was asked (signal SIGTERM, requested), when one was
    ranks: list[RankEnd]
    stalls: list[StallEnd]
    slow_starts: list[StallEnd]  # no first report within --startup-timeout (never stalls: step is None)
    culprit: str | None  # the last hang alert: who the others wait for, and where
    alerts: list[AlertEnd]
    stragglers: list[StragglerEnd]
    slowdowns: list[SlowdownEnd]  # the run slower than its own best: when, how slow, what it cost
    # mpwatch.tunable()'s values, each with its last changes and the ranks' answers
    tunables: list[TunableStatus]
    checkpoints: list[CheckpointRequest]  # "checkpoint now" requests and what each rank did
    profiles: list[ProfileRequest]  # the profiles asked, and each rank's trace
    memory_snapshots: list[MemoryRequest]  # the CUDA memory snapshots asked, and each rank's file
    files: list[str]  # what the directory holds, relative to it
    notes: list[str]  # what could not be read


def _first_failure(exits: list[EventRecord]) -> Failure | None:
    for e in exits:
        if e["event"] == Event.WORKER_EXITED and e.get("state") == "failed" and e["rank"] is not None:
            return {"rank": e["rank"], "ts": e["ts"], "cause": as_str(e.get("cause")),
                    "error": error_line(e.get("stderr_tail"))}
    return None


def error_line(tail: object) -> str | None:
    """The exception a traceback in a stderr tail ends with (rundir.crash), when it has one."""
    if not isinstance(tail, list):
        return None
    return crash.exception_line([ln for ln in tail if isinstance(ln, str)])


def ending(rd: RunDir) -> Ending:
    if rd.run.finished is not None or rd.final is not None:
        return "finished"
    if rd.live():
        return "live"
    last = rd.last_event()  # run.json and final.json garbled or gone: the history may still say
    return "finished" if last is not None and last["event"] == Event.RUN_FINISHED else "cut short"


def listing(rd: RunDir, exits: list[EventRecord] | None = None, now: float | None = None) -> RunListing:
    """The run's row for `ls --all`: reads run.json's facts and the exit events only."""
    end = ending(rd)
    if exits is None:
        exits = rd.events(_EXIT_KINDS)
    started = rd.run.started
    last = rd.run.finished
    if last is None and rd.final is not None:
        last = (started or 0.0) + rd.final["run"]["uptime"] if started is not None else None
    tail = rd.last_event() if last is None or rd.run.exit_code is None else None
    if last is None:
        last = (time.time() if now is None else now) if end == "live" else (tail["ts"] if tail else None)
    exit_code = rd.run.exit_code
    if exit_code is None and tail is not None and tail["event"] == Event.RUN_FINISHED:
        exit_code = as_int(tail.get("exit_code"))
    return {"run_id": rd.run.run_id, "run_dir": str(rd.path), "pid": rd.run.pid, "script": rd.run.script,
            "started": started, "nprocs": rd.run.nprocs, "live": end == "live", "ending": end,
            "stopped": next((as_str(e.get("why")) for e in exits if e["event"] == Event.STOPPING), None),
            "exit_code": exit_code,
            "duration": None if started is None or last is None else max(0.0, last - started),
            "first_failure": _first_failure(exits)}


def _ranks(rd: RunDir, evs: list[EventRecord]) -> list[RankEnd]:
    out: dict[int, RankEnd] = {}

    def rank(r: int) -> RankEnd:
        if r not in out:
            out[r] = {"rank": r, "state": None, "step": None, "loss": None, "restarts": 0, "cause": None,
                      "gpu_peak": None, "torch_peak": None}
        return out[r]

    for e in evs:  # the history first: what a cut short run leaves
        r = e["rank"]
        if r is None:
            continue
        if e["event"] == Event.WORKER_STARTED:
            rank(r)["state"] = "running"
        elif eventlines.own_report(e):  # a child's report is not its rank's step
            rank(r)["step"] = as_int(e.get("step"))
            rank(r)["loss"] = as_float(e.get("loss"))
        elif e["event"] == Event.WORKER_EXITED:
            rank(r)["state"], rank(r)["cause"] = as_str(e.get("state")), as_str(e.get("cause"))
        elif e["event"] == Event.RESTARTED:
            rank(r)["restarts"] += 1
        elif e["event"] == Event.STALLED:
            rank(r)["state"] = "stalled"
    if rd.final is not None:  # then the last status, which knows best
        for w in rd.final["workers"]:
            got = rank(w["rank"])
            got["state"], got["restarts"] = w.get("state"), w.get("restarts") or got["restarts"]
            got["cause"] = w.get("cause") or got["cause"]
            if w.get("step") is not None:
                got["step"], got["loss"] = w.get("step"), w.get("loss")
            cuda = w.get("cuda")
            got["torch_peak"] = as_int(cuda.get("max_allocated")) if isinstance(cuda, dict) else None
    for r in rd.known_ranks():
        rank(r)
    _gpu_peaks(rd, out)
    return [out[r] for r in sorted(out)]


def _gpu_peaks(rd: RunDir, out: dict[int, RankEnd]) -> None:
    tl = rd.gpu_timeline()
    if tl is None:
        return
    for tick in tl.ticks:
        for tr in tick["ranks"]:
            if not isinstance(tr, dict):  # a damaged line (the reader checked the tick's lists alone)
                continue
            r, nvml = as_int(tr.get("rank")), as_int(tr.get("nvml"))
            if r in out and nvml is not None:
                peak = out[r]["gpu_peak"]
                out[r]["gpu_peak"] = nvml if peak is None else max(peak, nvml)


def _stalls(evs: list[EventRecord], event: Event = Event.STALLED, reason: str = "stall") -> list[StallEnd]:
    """The stalls (or the slow starts: event slow_start, dumps of reason "slow start"), each
    with where its dump found the rank."""
    stalls: list[StallEnd] = []
    open_: dict[int, StallEnd] = {}
    for e in evs:
        r = e["rank"]
        if r is None:
            continue
        if e["event"] == event:
            s: StallEnd = {"rank": r, "ts": e["ts"], "step": as_int(e.get("step")),
                           "kind": as_str(e.get("kind")), "detail": as_str(e.get("detail")),
                           "where": None, "collective": None, "dump": None}
            stalls.append(s)
            open_[r] = s
        elif e["event"] == Event.DUMP and e.get("reason") == reason and r in open_:
            s = open_[r]
            s["where"], s["collective"] = as_str(e.get("where")), as_str(e.get("collective"))
            s["dump"] = as_str(e.get("path"))
        elif e["event"] in (Event.RECOVERED, Event.WORKER_EXITED, Event.WORKER_STARTED):
            open_.pop(r, None)
    return stalls


def _alerts(evs: list[EventRecord]) -> list[AlertEnd]:
    """Every alert that fired, once: a finding updated in place (its `key` again; a GPU alert's
    `update`) keeps its first time and says its last words; its end is no alert."""
    out: list[AlertEnd] = []
    keyed: dict[str, AlertEnd] = {}
    for e in evs:
        if e["event"] not in (Event.ALERT, Event.GPU_ALERT) or e.get("ended"):
            continue
        key, message = as_str(e.get("key")), as_str(e.get("message")) or ""
        if e["event"] == Event.GPU_ALERT:  # a GPU finding completed in place (an OOM's death) says `update`
            key = f"gpu:{e.get('kind')}:{e.get('gpu')}:{e['rank']}"
        if key is not None and key in keyed and (e["event"] == Event.ALERT or e.get("update")):
            keyed[key]["message"] = message
            continue
        a: AlertEnd = {"ts": e["ts"], "kind": as_str(e.get("kind")) or "?", "rank": e["rank"],
                       "gpu": as_int(e.get("gpu")), "message": message}
        out.append(a)
        if key is not None:
            keyed[key] = a
    return out


def _findings(evs: list[EventRecord], kind: str) -> Iterator[tuple[int, EventRecord, bool]]:
    """A keyed finding's alerts of `kind`, in order: (its number among them, the alert, whether it
    ends the finding). An alert of a key that ended starts a new finding."""
    number: dict[str, int] = {}  # key -> the number of its open finding
    count = 0
    for e in evs:
        key = as_str(e.get("key"))
        if e["event"] != Event.ALERT or e.get("kind") != kind or key is None:
            continue
        if key not in number:
            number[key], count = count, count + 1
        ended = bool(e.get("ended"))
        yield (number.pop(key) if ended else number[key]), e, ended


def _stragglers(evs: list[EventRecord]) -> list[StragglerEnd]:
    out: list[StragglerEnd] = []
    for i, e, ended in _findings(evs, "straggler"):
        if i == len(out):
            out.append(StragglerEnd(rank=e["rank"], since=e["ts"], until=None, phase=None, lost_s=None,
                                    message=""))
        s = out[i]
        s["message"] = as_str(e.get("message")) or s["message"]
        found = straggler.read_info(e.get("straggler"))
        if found is not None:
            s["rank"], s["phase"], s["lost_s"] = found["rank"], found["phase"], found["lost_s"]
        s["until"] = e["ts"] if ended else None
    return out


def _slowdowns(evs: list[EventRecord]) -> list[SlowdownEnd]:
    out: list[SlowdownEnd] = []
    for i, e, ended in _findings(evs, "slowdown"):
        if i == len(out):
            out.append(SlowdownEnd(since=e["ts"], until=None, ratio=None, lost_steps=None, lost_s=None,
                                   node=None, message=""))
        s = out[i]
        s["message"] = as_str(e.get("message")) or s["message"]
        found = slowdown.read_info(e.get("slowdown"))
        if found is not None:
            s["since"], s["ratio"] = found["since"], found["ratio"]
            s["lost_steps"], s["lost_s"], s["node"] = found["lost_steps"], found["lost_s"], found.get("node")
        s["until"] = e["ts"] if ended else None
    return out


def _files(rd: RunDir) -> list[str]:
    out = [n for n in layout.RUN_FILES if os.path.lexists(rd.path / n)]
    for f in rd.ranks().values():
        out += [str(p.relative_to(rd.path)) for p in (f.stdout, f.stderr, *f.stacks, *f.profiles)
                if os.path.lexists(p)]
    return out


def summarize(rd: RunDir, now: float | None = None) -> Summary:
    evs = rd.events()
    exits = [e for e in evs if e["event"] in _EXIT_KINDS]
    ranks = _ranks(rd, evs)
    stops = [e for e in evs if e["event"] == Event.STOPPING]
    # The finding before a stop: once the run stops, ranks end one by one and a finding with
    # fewer waiting ranks can follow, which says less about the hang.
    until = stops[0]["ts"] if stops else float("inf")
    hangs = [e for e in evs if e["event"] == Event.ALERT and e.get("kind") == "hang" and not e.get("ended")]
    hangs = [e for e in hangs if e["ts"] <= until] or hangs
    restarts = rd.final["run"].get("restarts") if rd.final is not None else None
    files = _files(rd)
    live = live_events.LiveFold()
    for e in evs:
        if e["event"] in live_events.LIVE_EVENTS:
            live_events.apply(live, cast(EventFields, e))
    control = live.status()
    resizes = [n for e in evs if e["event"] == Event.RESIZED and (n := as_int(e.get("to"))) is not None]
    return {"listing": listing(rd, exits, now), "args": rd.run.args,
            "workers": resizes[-1] if resizes else rd.run.nprocs,
            "restarts": restarts if isinstance(restarts, int) else sum(r["restarts"] for r in ranks),
            "stopped": as_str(stops[0].get("why")) if stops else None, "ranks": ranks, "stalls": _stalls(evs),
            "slow_starts": _stalls(evs, Event.SLOW_START, "slow start"),
            "culprit": as_str(hangs[-1].get("message")) if hangs else None, "alerts": _alerts(evs),
            "stragglers": _stragglers(evs), "slowdowns": _slowdowns(evs),
            "tunables": control.tunables, "checkpoints": control.checkpoints, "profiles": control.profiles,
            "memory_snapshots": control.memory_snapshots, "files": files, "notes": list(rd.notes)}
