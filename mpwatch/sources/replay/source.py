"""ReplaySource: a run directory, live or finished, answering the TUI's Source protocol
(sources.source) as the run was at the cursor's moment, plus the cursor's API.

status() is the status rebuilt at the cursor (sources.replay.rebuild); at the end of a finished run it
is final.json itself. events() gives the notable events up to the cursor, history() a
rank's own curve up to it, logs() its log as it stood then (sources.replay.logs), gpu_timeline() the
GPU ticks before it. Every action is refused: a replay reads files and never touches a
process. A live run's files are read again (at most once a RELOAD_S) while the cursor is at
the end, which then follows the run.

Any thread may call (the TUI's poller and worker threads, the UI thread for the cursor):
one lock guards the files' index and the cursor; a rebuilt status is cached per moment.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from mpwatch.contract import (
    DevKey,
    Event,
    EventFields,
    GpuTimelineReply,
    RunOptions,
    RunState,
    Status,
    as_float,
    dev_key,
    devices,
)
from mpwatch.rundir import layout, reader
from mpwatch.rundir.textfiles import read_json
from mpwatch.sources.local import ClientError, ControlReply, EventsReply
from mpwatch.sources.replay.cursor import Cursor, kind_of
from mpwatch.sources.replay.files import EventsFile, GpuFile
from mpwatch.sources.replay.fold import fold, restarting_exits
from mpwatch.sources.replay.logs import AttemptLogs
from mpwatch.sources.replay.rebuild import RunFacts, status_at

RELOAD_S = 1.0
CURVE_POINTS = 2000  # the most points of one curve sent to the plot (every k-th beyond)
TIMELINE_TICKS = 300  # as the supervisor's gpu_timeline answers (supervisor.gpu.timeline)
TIMELINE_MARKS = 500
READ_ONLY = "a replay is read-only: it never acts on the run's processes"


def _signal_name(v: object) -> str:
    """run.json's stop signal when it is one (a crafted file's value is never shown)."""
    return v if isinstance(v, str) and v.startswith("SIG") and v[3:].isalnum() and len(v) <= 12 else "SIGTERM"


def _facts(rd: reader.RunDir, first: EventFields | None) -> RunFacts:
    info = read_json(rd.path, layout.RUN_JSON) or {}
    opts = info.get("options") if isinstance(info.get("options"), dict) else {}
    assert isinstance(opts, dict)
    final = rd.final

    def num(key: str, default: float) -> float:
        v = as_float(opts.get(key))
        return default if v is None else v

    options = RunOptions(max_restarts=int(num("max_restarts", 0)), stall_timeout=num("stall_timeout", 60.0),
                         startup_timeout=num("startup_timeout", 600.0), grace=num("grace", 10.0),
                         resize_mode=str(opts.get("resize_mode", "restart")),
                         stop_signal=_signal_name(opts.get("stop_signal")),
                         metrics=None)  # a replay serves no metrics
    names: dict[DevKey, dict[str, Any]] = {}
    for g in devices(final["gpus"]) if final is not None else []:
        names[dev_key(g)] = {"name": g.get("name"), "uuid": g.get("uuid"), "mem_total": g.get("mem_total"),
                             "mig": g.get("mig")}
    started = rd.run.started if rd.run.started is not None else (first["ts"] if first is not None else 0.0)
    return RunFacts(run_id=rd.run.run_id, dir=rd.path, script=rd.run.script or "?", args=list(rd.run.args),
                    pid=rd.run.pid or 0,  # 0: not recorded (run.json and the first event are gone)
                    started=started, options=options, gpu_names=names,
                    gpu_status=final["gpu_status"] if final is not None else None)


class ReplaySource:
    def __init__(self, path: str | Path):
        self.rd = reader.read(path)  # NotARunDir: one line for the user
        self.path = self.rd.path
        self._lock = threading.RLock()
        self.files = EventsFile(self.rd)
        self.gpu = GpuFile(self.rd)
        self.files.load()
        self.gpu.load()
        self.rd.ranks()  # notes the rank folders that are gone
        self.live = self.rd.live()
        self.facts = _facts(self.rd, self.files.events[0] if self.files.events else None)
        self.cursor = Cursor(self.files.events)
        self._restarting = restarting_exits(self.files.events)
        self._logs = AttemptLogs()
        self._cache: tuple[tuple[int, ...], Status] | None = None  # ((pos, bytes indexed, tail), status)
        self._loaded = time.monotonic()
        self._gpu_counted = False
        self.builds = 0  # statuses rebuilt (tests, the bench)

    # --------------------------------------------------------------- facts ----
    @property
    def notes(self) -> list[str]:
        return self.rd.notes

    @property
    def events_list(self) -> list[EventFields]:
        return self.files.events

    def start_time(self) -> float:
        return self.facts.started

    def end_time(self) -> float:
        """When the run ended (now, for a live one): the end's moment on the strip."""
        if self.live:  # now, or the last thing written if the clocks disagree
            latest = self.rd.last_ts()
            return max(time.time(), latest if latest is not None else 0.0)
        if self.rd.run.finished is not None:
            return self.rd.run.finished
        if self.rd.final is not None:
            return self.facts.started + self.rd.final["run"]["uptime"]
        ends = [e for e in (self.rd.last_ts(),  # a run cut short: the latest thing it said
                            self.gpu.ts[-1] if self.gpu.ts else None,
                            self.files.events[-1]["ts"] if self.files.events else None) if e is not None]
        return max(ends) if ends else self.facts.started

    def index_step(self) -> bool:
        """Build the report index a step further (the TUI's idle time); True once built.
        Until then a window of the file serves (the same answers, a little slower)."""
        if not self._gpu_counted:
            self._gpu_counted = True
            self.gpu.count_deferred()
            return False
        return self.files.index_step()

    def read_all(self) -> None:
        """Everything index_step does, done now (for callers without a screen to draw first)."""
        while not self.index_step():
            pass

    def time_at(self, pos: int | None = None) -> float:
        pos = self.cursor.pos if pos is None else pos
        if pos >= len(self.files.events):
            return self.end_time()
        return self.files.events[pos]["ts"]

    # ------------------------------------------------------------- reading ----
    def reload(self, force: bool = False) -> bool:
        """A live run: take in what its files gained (at most once a RELOAD_S)."""
        with self._lock:
            if not self.live or (not force and time.monotonic() - self._loaded < RELOAD_S):
                return False
            self._loaded = time.monotonic()
            at_end = self.cursor.at_end
            grew = self.files.refresh()
            self.gpu.refresh()
            if grew:
                self.cursor.events = self.files.events
                self.cursor.follow(at_end)
                self._restarting = restarting_exits(self.files.events)
            self.live = self.rd.live()
            if not self.live:  # it ended meanwhile: its final status is there now
                self.rd = reader.read(self.path)
                self.files.rd = self.gpu.rd = self.rd
            self._cache = None
            return True

    def status(self, tail: int | None = None) -> Status:
        want = 32 if tail is None else tail
        with self._lock:
            if self.live and self.cursor.at_end:
                self.reload()
            pos, n = self.cursor.pos, len(self.files.events)
            # a live run's end moves as its files grow
            key = (pos, n, self.files.indexed, self.gpu.indexed, want)
            c = self._cache
            if c is not None and c[0] == key:
                return c[1]
            if pos >= n and self.rd.final is not None and not self.live:
                st = self.rd.final
            else:
                st = self._rebuild(pos, n, want)
            self._cache = (key, st)
            return st

    def _rebuild(self, pos: int, n: int, tail: int) -> Status:
        self.builds += 1
        t = self.time_at(pos)
        upto = min(pos, n - 1)
        run = fold(self.files.events, upto, self.path, self._restarting)
        st = status_at(self.files, self.gpu, self.facts, run, pos, t, tail)
        if pos >= n and not self.live and run.state != RunState.FINISHED:
            st["run"]["state"] = RunState.FINISHED  # cut short: over, though it never said so
        return st

    def events(self, since: int = 0) -> EventsReply:
        with self._lock:
            seq = min(self.cursor.pos + 1, len(self.files.events))
            return {"events": self.files.events[since:seq], "seq": seq}

    def history(self, rank: int) -> list[tuple[float, float]]:
        with self._lock:
            t = self.time_at()
        pts = [(float(r.step if r.step is not None else i), r.loss)
               for i, r in enumerate(self.files.curve(rank, t)) if r.loss is not None]  # waits for the index
        stride = -(-len(pts) // CURVE_POINTS)
        return pts[::stride] if stride > 1 else pts

    def attempt_at(self, rank: int) -> int | None:
        """How many starts of the rank came before the cursor's one (None at the end)."""
        if self.cursor.at_end:
            return None
        starts = sum(1 for e in self.files.events[: self.cursor.pos + 1]
                     if e["event"] == Event.WORKER_STARTED and e["rank"] == rank)
        return max(0, starts - 1)

    def logs(self, rank: int, stream: str = "stderr", lines: int = 50) -> list[str]:
        with self._lock:
            attempt = self.attempt_at(rank)
            return self._logs.tail(layout.log_path(self.path, rank, stream), attempt, lines)

    def gpu_timeline(self, window: float) -> GpuTimelineReply:
        with self._lock:
            t = self.time_at()
            hi = self.gpu.at(t) + 1
            lo = hi
            while lo > 0 and self.gpu.ts[lo - 1] >= t - window:
                lo -= 1
            idx = list(range(lo, hi))
            if len(idx) > TIMELINE_TICKS:  # evenly picked, the latest always in
                stride = len(idx) / TIMELINE_TICKS
                idx = [idx[len(idx) - 1 - int(i * stride)] for i in range(TIMELINE_TICKS)][::-1]
            ticks = [tk for i in idx if (tk := self.gpu.tick(i)) is not None]
            marks = [m for m in self.gpu.marks if t - window <= m["ts"] <= t][-TIMELINE_MARKS:]
        return {"ticks": ticks, "marks": marks}

    def another(self) -> ReplaySource:
        return self

    def ended(self, stop: threading.Event | None = None) -> tuple[Status | None, dict[str, Any] | None]:
        """The recorded end: final.json and run.json as the run left them."""
        return self.rd.final, read_json(self.path, layout.RUN_JSON)

    def act(self, cmd: str, target: int | str) -> str:
        raise ClientError(READ_ONLY)

    def resize(self, n: int) -> str:
        raise ClientError(READ_ONLY)

    def stop(self) -> str:
        raise ClientError(READ_ONLY)

    def ask(self, action: str, target: int | str, step: int | None = None, by: str = "?", plan: bool = False,
            **args: object) -> ControlReply:
        raise ClientError(READ_ONLY)

    def set_tunable(self, name: str, value: str, step: int | None = None, by: str = "?",
                    plan: bool = False) -> ControlReply:
        raise ClientError(READ_ONLY)

    # -------------------------------------------------------------- cursor ----
    def move(self, how: str, arg: int = 0) -> bool:
        """Move the cursor: "step" by arg events, "jump" to the arg-th next (1) or previous
        (-1) failure/stall/restart/alert, "end", "start", or "seq" to the event with seq arg.
        False when it could not move."""
        with self._lock:
            c = self.cursor
            if how == "step":
                return c.step(arg)
            if how == "jump":
                return c.jump(arg)
            if how == "end":
                return c.to_end()
            if how == "start":
                return c.to_start()
            if how == "seq":
                return c.to_seq(arg)
            raise ValueError(f"no cursor move {how!r}")

    def moments(self) -> list[tuple[float, str | None]]:
        """(time, mark kind or None) of every notable event, for the strip."""
        with self._lock:
            return [(e["ts"], kind_of(e)) for e in self.files.events]

    def where(self) -> tuple[int, int, EventFields | None]:
        """(position, events, the cursor's event or None at the end)."""
        with self._lock:
            return self.cursor.pos, len(self.files.events), self.cursor.current()
