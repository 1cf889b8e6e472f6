"""Reading a run directory back, whatever state the run left it in: the post-mortem's
source (`mpwatch ls --all`, `summary`, `ctl logs`, and the TUI's replay of a finished run).

Tolerant by design: a directory cut short (a torn last line, no final.json after a
SIGKILLed supervisor, a deleted rank folder, a file of garbage) gives what can be read,
plus `notes` saying what is missing; only a path that is no run directory at all raises
NotARunDir (one line for the user). Also the reads that need no RunDir: a rank's loss curve
from its report events (`history`), a finished run's final.json (`wait_final`). The writer is
rundir.writer; this module never writes (its files are read through rundir.textfiles). Runs
on the caller's thread; imports neither textual nor the supervisor.
"""
from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from mpwatch.contract import (
    Event,
    EventFields,
    EventRecord,
    GpuMark,
    GpuTick,
    Status,
    as_float,
    as_int,
    as_number,
    as_str,
    as_time,
    shape,
)
from mpwatch.rundir import eventlines, layout, registry, textfiles
from mpwatch.text import fmt

Curves = dict[int, list[tuple[float, float]]]  # rank -> (step, loss) points
FINAL_WAIT_S = 3.0  # after a run's socket closes, how long its final.json may take to appear


class NotARunDir(Exception):
    """A path that holds no run; the message is the one line the user sees."""


@dataclass
class RunRecord:
    """What run.json says (each field checked for its type), completed from the run_started
    event and final.json when run.json is gone or garbled. None: not known."""

    run_id: str
    script: str | None = None
    args: list[str] = field(default_factory=list)
    nprocs: int | None = None
    started: float | None = None
    finished: float | None = None  # set by the supervisor when the run ended normally
    exit_code: int | None = None
    pid: int | None = None  # the supervisor's
    cwd: str | None = None


@dataclass
class RankFiles:
    rank: int
    dir: Path
    stdout: Path
    stderr: Path
    stacks: list[Path]  # oldest first (names are times)
    profiles: list[Path] = field(default_factory=list)  # traces and flame graphs, oldest first


@dataclass
class GpuTimeline:
    ticks: list[GpuTick]
    marks: list[GpuMark]


def as_event(rec: object) -> EventRecord | None:
    """An events.jsonl line's value when it has an event's shape (ts, event, rank), else None."""
    if not isinstance(rec, dict) or not isinstance(rec.get("event"), str) or as_time(rec.get("ts")) is None:
        return None  # (a time no clock shows, 1e300, is no event's: a note counts it)
    rank = rec.get("rank")
    if rank is not None and as_int(rank) is None:
        return None
    return cast(EventRecord, rec)


def as_status(raw: object) -> Status | None:
    """final.json when it has a status's shape (contract.shape: every key of the schema, each
    of its type); else None."""
    return cast(Status, raw) if shape.problem(raw, Status) is None else None


class RunDir:
    """One run directory, read on demand: run.json and final.json at once, events and the
    GPU timeline when asked (they can be large). `notes` grows as parts are read."""

    def __init__(self, path: Path, run: RunRecord, final: Status | None, notes: list[str]) -> None:
        self.path = path
        self.run = run
        self.final = final
        self.notes = notes
        self._events: list[EventRecord] | None = None
        self._thinned_to: float | None = None  # events.jsonl's thinning, from its notes
        self._thinned_reports = 0
        self._thinned_seen: set[tuple[object, ...]] = set()  # the notes counted (each once)

    # --------------------------------------------------------------- events ----
    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def note(self, text: str, replaces: tuple[str, str] | None = None) -> None:
        """Add a note (once) about what could not be read, in place of an earlier one that
        starts and ends as `replaces` says (a count that grew); the replay's readers say
        theirs here."""
        if replaces is not None:
            head, tail = replaces
            self.notes[:] = [n for n in self.notes if not (n.startswith(head) and n.endswith(tail))]
        self._note(text)

    def _lines(self, name: str, needles: Collection[str] | None) -> Iterator[object]:
        """JSON values of a .jsonl file's lines; bad lines are counted into a note. With
        needles, lines holding none of them are skipped unparsed (a cheap prefilter)."""
        skipped = textfiles.Skipped()
        try:
            yield from textfiles.jsonl_values(self.path / name, needles, skipped)
        except OSError as exc:
            self._note(f"{name} is unreadable ({exc.strerror})")
        if skipped.bad:
            self._note(f"{name}: {skipped.bad} unreadable line(s) skipped")
        if skipped.long:
            self._note(f"{name}: {skipped.long} line(s) longer than {textfiles.MAX_LINE >> 20} MiB "
                       "skipped unread")
        if skipped.torn:
            self.note_torn(name)

    def note_torn(self, name: str) -> None:
        self._note(f"{name}: the last line is cut short (the run was killed while writing it)")

    def events(self, kinds: Collection[str] | None = None) -> list[EventRecord]:
        """Events oldest first, only `kinds` when given; lines that are no event are skipped."""
        if self._events is None and kinds is None:
            self._events = list(self._scan(None))
        if self._events is not None:
            return [e for e in self._events if kinds is None or e["event"] in kinds]
        return list(self._scan(kinds))

    def _scan(self, kinds: Collection[str] | None) -> Iterator[EventRecord]:
        needles = None if kinds is None else [f'"{k}"' for k in (*kinds, Event.THINNED)]
        skipped = 0
        for raw in self._lines(layout.EVENTS, needles):
            ev = as_event(raw)
            if ev is None:
                skipped += 1
                continue
            if ev["event"] == Event.THINNED:
                self.note_thinned(cast(EventFields, ev))
            if kinds is None or ev["event"] in kinds:
                yield ev
        if skipped:
            self.note_skipped(skipped)

    def note_skipped(self, lines: int) -> None:
        self.note(f"{layout.EVENTS}: {lines} line(s) that are no event skipped",
                  (f"{layout.EVENTS}: ", "that are no event skipped"))

    def note_thinned(self, ev: EventFields) -> None:
        """A `thinned` event (rundir.thinning): say which part of the curves is coarser."""
        before, after = ev.get("reports_before"), ev.get("reports_after")
        upto = as_float(ev.get("thinned_to"))
        if upto is None or not isinstance(before, int) or not isinstance(after, int):
            return
        # Each pass once, however often it is read: by this reader and the replay's, and again
        # when a later pass swaps the file under a live reader (the earlier notes stay in it).
        key = (ev.get("ts"), ev.get("thinned_from"), upto, before, after)
        if key in self._thinned_seen:
            return
        self._thinned_seen.add(key)
        self._thinned_to = max(self._thinned_to or upto, upto)
        self._thinned_reports += before - after
        # one note for all passes
        self.note(f"{layout.EVENTS} was thinned to stay under its size cap: {self._thinned_reports} report "
                   f"event(s) up to {self.when(self._thinned_to)} went (the loss curves are coarser there; "
                   "no other event was dropped)", (f"{layout.EVENTS} was thinned", ""))

    def when(self, ts: float) -> str:
        """A moment of the run for a note: from its start when known (notes read the same in
        every time zone), else the clock."""
        if self.run.started is not None:
            return "+" + fmt.duration(max(0.0, ts - self.run.started))
        return time.strftime("%H:%M:%S", time.localtime(ts))

    def last_event(self, max_bytes: int = 64 * 1024) -> EventRecord | None:
        """The last readable event, read from the file's end (a big file is not read whole)."""
        try:
            data, _ = textfiles.tail_bytes(self.path / layout.EVENTS, max_bytes)
        except OSError:
            return None
        for line in reversed(data.decode("utf-8", errors="replace").splitlines()):
            try:
                ev = as_event(textfiles.loads(line))
            except ValueError:
                continue
            if ev is not None:
                return ev
        return None

    def last_ts(self, max_bytes: int = 64 * 1024) -> float | None:
        """The latest time among the readable events of the file's end: a report event carries its
        report's own time, so a line may be timed after the line written next (two ranks' batches)."""
        try:
            data, _ = textfiles.tail_bytes(self.path / layout.EVENTS, max_bytes)
        except OSError:
            return None
        times = []
        for line in data.decode("utf-8", errors="replace").splitlines():
            try:
                ev = as_event(textfiles.loads(line))
            except ValueError:
                continue
            if ev is not None:
                times.append(ev["ts"])
        return max(times) if times else None

    def gpu_timeline(self) -> GpuTimeline | None:
        """gpu.jsonl split into ticks and marks; None when the run has none."""
        if not os.path.lexists(self.path / layout.GPU_JSONL):
            return None
        ticks: list[GpuTick] = []
        marks: list[GpuMark] = []
        thinned_to: float | None = None  # a note line (status.GpuThinned): older ticks were thinned
        for raw in self._lines(layout.GPU_JSONL, None):
            if not isinstance(raw, dict) or as_float(raw.get("ts")) is None:
                continue
            if isinstance(raw.get("gpus"), list) and isinstance(raw.get("ranks"), list):
                ticks.append(cast(GpuTick, raw))
            elif isinstance(raw.get("kind"), str):
                marks.append(cast(GpuMark, raw))
            elif isinstance(raw.get("thinned"), dict) and as_float(raw["thinned"].get("to")) is not None:
                thinned_to = max(thinned_to or 0.0, float(raw["thinned"]["to"]))
        if thinned_to is not None:
            self.note_gpu_thinned(thinned_to)
        return GpuTimeline(ticks, marks)

    def note_gpu_thinned(self, upto: float) -> None:
        self._note(f"{layout.GPU_JSONL} was thinned to stay under its size cap: before {self.when(upto)} "
                   "it keeps fewer samples, and a peak there may be missed")

    # ---------------------------------------------------------------- ranks ----
    def ranks(self) -> dict[int, RankFiles]:
        """Rank folders present; ranks the run had whose folder is gone get a note."""
        found: dict[int, RankFiles] = {}
        try:
            names = os.listdir(self.path)
        except OSError:
            names = []
        for name in names:
            m = layout.RANK_DIR.match(name)
            if m and _real_dir(self.path / name):
                r = int(m.group(1))
                p = layout.rank_paths(self.path, r)
                found[r] = RankFiles(r, p.dir, p.stdout, p.stderr, _stack_files(p.stacks),
                                     _profile_files(p.dir / layout.PROFILES))
        for rank in self.known_ranks():
            if rank not in found:
                self._note(f"rank-{rank}/ is missing: the logs and stack dumps of rank {rank} are gone")
        return dict(sorted(found.items()))

    def known_ranks(self) -> list[int]:
        """Ranks the run had, from final.json, else from worker_started events."""
        if self.final is not None:
            return sorted(w["rank"] for w in self.final["workers"])
        return sorted({e["rank"] for e in self.events([Event.WORKER_STARTED]) if e["rank"] is not None})

    # ---------------------------------------------------------------- state ----
    def live(self) -> bool:
        """The supervisor still runs (never true once run.json says finished)."""
        if self.run.finished is not None or self.run.pid is None:
            return False
        ctl, _ = textfiles.read_json_file(self.path / layout.CONTROL_JSON)
        return isinstance(ctl, dict) and ctl.get("pid") == self.run.pid and registry.pid_alive(self.run.pid)


def _real_dir(path: Path) -> bool:
    """A folder itself, never a link to one (a link in a run directory is not the run's)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _stack_files(d: Path) -> list[Path]:
    """A rank's stack dumps: regular files only (a FIFO there would hang whoever reads it)."""
    return _files_in(d, (layout.STACK_SUFFIX,))


def _profile_files(d: Path) -> list[Path]:
    """A rank's profiles, whole (not a hidden part being written)."""
    return _files_in(d, (layout.TRACE_SUFFIX, layout.FLAME_SUFFIX))


def _files_in(d: Path, suffixes: tuple[str, ...]) -> list[Path]:
    if not _real_dir(d):
        return []
    try:
        return sorted(p for p in d.iterdir() if p.name.endswith(suffixes) and not p.name.startswith(".")
                      and textfiles.is_regular(p))
    except OSError:
        return []


def looks_like_run(path: Path) -> bool:
    """A directory holding any of the files a run writes first or last."""
    try:
        return path.is_dir() and any(os.path.lexists(path / m) for m in layout.MARKERS)
    except OSError:  # a folder this user may not enter
        return False


def _record(raw: object, first: EventRecord | None, final: Status | None, fallback_id: str) -> RunRecord:
    info: dict[str, Any] = raw if isinstance(raw, dict) else {}
    ev: dict[str, Any] = dict(first) if first is not None and first["event"] == Event.RUN_STARTED else {}
    fin = final["run"] if final is not None else None
    args = info.get("args", ev.get("args"))
    opts = info.get("options")
    nprocs = as_int(opts.get("nprocs")) if isinstance(opts, dict) else None
    return RunRecord(
        run_id=as_str(info.get("run_id"))
        or (fin["id"] if fin and isinstance(fin.get("id"), str) else fallback_id),
        script=as_str(info.get("script")) or as_str(ev.get("script")),
        args=[a for a in args if isinstance(a, str)] if isinstance(args, list) else [],
        nprocs=nprocs or as_int(ev.get("nprocs")),
        started=as_time(info.get("started")) or as_time(ev.get("ts"))
        or (as_time(fin.get("started")) if fin else None),
        finished=as_time(info.get("finished")),
        exit_code=as_int(info.get("exit_code")) if "exit_code" in info
        else (fin.get("exit_code") if fin else None),
        pid=as_int(info.get("pid")) or as_int(ev.get("pid")),
        cwd=as_str(info.get("cwd")),
    )


def _first_event(path: Path) -> EventRecord | None:
    try:
        return as_event(textfiles.loads(textfiles.first_line(path / layout.EVENTS)))
    except ValueError:
        return None


def read(path: str | Path) -> RunDir:
    """The run directory at `path`; NotARunDir when there is none there."""
    p = Path(path)
    if not p.exists():
        raise NotARunDir(f"no such run: {path}")
    if not p.is_dir():
        raise NotARunDir(f"{path} is not a run directory (not a directory)")
    if not os.access(p, os.R_OK | os.X_OK):
        raise NotARunDir(f"run directory {path} is not readable by this user")
    if not looks_like_run(p):
        raise NotARunDir(f"{path} is not an mpwatch run directory (no {', '.join(layout.MARKERS[:-1])} or "
                         f"{layout.MARKERS[-1]})")
    notes: list[str] = []
    raw, why = textfiles.read_json_file(p / layout.RUN_JSON)
    if why is not None or not isinstance(raw, dict):
        notes.append(f"{layout.RUN_JSON} is {why or 'not a JSON object'}: "
                     "the run's facts come from the other files")
    final_raw, fwhy = textfiles.read_json_file(p / layout.FINAL_JSON)
    final = as_status(final_raw)
    if fwhy is None and final is None:
        fwhy = f"not a status ({shape.problem(final_raw, Status, layout.FINAL_JSON)})"
    if fwhy not in (None, "missing"):
        notes.append(f"{layout.FINAL_JSON} is {fwhy}: the last status is lost")
    first = _first_event(p)
    rd = RunDir(p, _record(raw, first, final, p.name), final, notes)
    if fwhy == "missing" and not rd.live():
        notes.append(f"{layout.FINAL_JSON} is missing: the supervisor ended without finishing the run "
                     f"(killed?); what follows comes from {layout.EVENTS}")
    if not os.path.lexists(p / layout.EVENTS):
        notes.append(f"{layout.EVENTS} is missing: no history of the run")
    return rd


def read_events(run_dir: Path | str, kinds: Collection[str] | None = None) -> Iterator[dict[str, Any]]:
    """Events of a run as written, oldest first, only `kinds` when given (no notes: RunDir
    says what it skipped); a torn last line (a run still writing) is skipped."""
    return textfiles.read_jsonl(Path(run_dir) / layout.EVENTS, kinds)


def history(run_dir: Path | str, ranks: Collection[int] | None = None, limit: int = 2000) -> Curves:
    """{rank: [(step, loss)]} from the ranks' own report events (rundir.eventlines: a child
    process's are left out, as the live history leaves them out; every other point dropped
    until each curve fits `limit`). A loss written as "nan" reads as NaN."""
    out: Curves = {}
    try:
        for rec in textfiles.read_jsonl(Path(run_dir) / layout.EVENTS, needles=['"report"']):
            r, loss = rec.get("rank"), as_number(rec.get("loss"))
            if not eventlines.own_report(rec) or loss is None or type(r) is not int or (ranks is not None
                                                                                         and r not in ranks):
                continue
            pts = out.setdefault(r, [])
            step = as_float(rec.get("step"))
            pts.append((len(pts) if step is None else step, loss))
            if len(pts) > limit:
                out[r] = pts[::2]
    except OSError:  # what was read is the history
        pass
    return out


def wait_final(run_dir: Path | str, stop: threading.Event | None = None,
               timeout: float = FINAL_WAIT_S) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(final.json, run.json) of a run whose socket closed, once run.json says it finished
    with final.json written, or as they are after `timeout` (or when `stop` is set)."""
    deadline = time.monotonic() + timeout
    while True:
        info, final = (textfiles.read_json(run_dir, layout.RUN_JSON),
                       textfiles.read_json(run_dir, layout.FINAL_JSON))
        if (final is not None and info and info.get("finished")) or time.monotonic() > deadline:
            return final, info
        if stop is None:
            time.sleep(0.1)
        elif stop.wait(0.1):
            return final, info
