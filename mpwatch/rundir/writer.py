"""The run directory's one writer: every file of a run is made here (rundir.layout names
them), by the supervisor's RunStore, and before it by the TUI's launch (make_run_dir,
open_supervisor_log). No other module creates a run file: the GPU timeline appends to
gpu.jsonl and rewrites it through RunStore, a rank's logs and stack dumps are opened here and
written by their owners. Every file is opened through `_create` and every folder made
through `_mkdir`, so how a run's files are made (their modes, what an existing one means)
is decided in one place. The directory is 0700: another user can neither list it nor read
the logs.

Report events are downsampled (supervisor.ipc.ledger): a rank's latest report at most once
a second, with `n` (the reports it stands for) and `dropped`; a worker's last report is
always written, so the curve keeps its shape and its end. Every other event is written as
it happens, in the key order rundir.eventlines fixes. Disk errors never stop a run: the
first one is remembered in `disk_error` for the supervisor to raise as an alert.

events.jsonl stays bounded (rundir.thinning): past its cap (MPWATCH_EVENTS_MB, default
128) the older half of its report events is thinned to every other one of each series, on
a thread of its own, and a `thinned` event says what went; no other event is ever dropped.

Any thread may write events (`_lock`); the supervisor's main thread flushes them. The
readers are rundir.reader and rundir.textfiles.
"""
from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any, BinaryIO, TextIO

from mpwatch.contract.status import Event
from mpwatch.rundir import eventlines, layout, textfiles, thinning
from mpwatch.settings import Settings

APPEND = os.O_WRONLY | os.O_APPEND
TRUNCATE = os.O_WRONLY | os.O_TRUNC


def _create(path: Path, flags: int, mode: int = 0o644) -> int:
    """The one place a file of a run is opened for writing, made when missing: its fd."""
    return os.open(path, flags | os.O_CREAT | os.O_CLOEXEC, mode)


def _mkdir(path: Path) -> None:
    """The one place a folder of a run is made (the run's own, a rank's, its stacks/)."""
    path.mkdir(parents=True, exist_ok=True)


def make_run_dir(path: Path) -> None:
    """The run's directory, private to this user (0700)."""
    _mkdir(path)
    os.chmod(path, 0o700)


def open_supervisor_log(run_dir: Path) -> BinaryIO:
    """supervisor.log, appended to: where the TUI's launch sends a supervisor's output."""
    return os.fdopen(_create(run_dir / layout.SUPERVISOR_LOG, APPEND | os.O_NOFOLLOW, 0o600), "ab")


def _replace(path: Path, lines: Iterable[str], mode: int = 0o644) -> None:
    """Write a file whole through a temporary one swapped in: a reader sees the old or the
    new, never half. Raises OSError."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with os.fdopen(_create(tmp, TRUNCATE, mode), "w", encoding="utf-8") as f:
            f.writelines(lines)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class RunStore:
    def __init__(self, run_dir: Path | str, events_cap: int | None = None):
        self.dir = Path(run_dir)
        self._lock = threading.Lock()
        self._events: IO[str] | None = None
        self.disk_error: str | None = None
        self.events_written = 0
        # events.jsonl's cap in bytes (None: the settings' MPWATCH_EVENTS_MB), its size, and its thinning
        if events_cap is None:
            events_cap = thinning.cap_bytes(Settings.from_env().events_mb)
        self.events_cap = events_cap
        self.events_size = 0
        self.thinned = 0  # thinning passes so far
        self._thin_at = self.events_cap  # the size that starts the next pass
        self._thinner: threading.Thread | None = None

    def create(self) -> None:
        make_run_dir(self.dir)
        self._open_events()

    def _open_events(self) -> None:
        # open for the run's whole life (a thinning pass reopens it); close() closes it
        fd = _create(self.dir / layout.EVENTS, APPEND)
        self._events = os.fdopen(fd, "a", buffering=1 << 16, encoding="utf-8")
        self.events_size = self._events.tell()

    # ------------------------------------------------------------ rank files ----
    def rank_paths(self, rank: int) -> layout.RankPaths:
        """A rank's paths, its folders made and its stack file (where the worker's faulthandler
        and the dumper write) there."""
        paths = layout.rank_paths(self.dir, rank)
        try:
            _mkdir(paths.stacks)
            os.close(_create(paths.stack_file, APPEND))
        except OSError as exc:  # a full disk: the caller's open() fails and says so
            self.failed(exc)
        return paths

    def open_log(self, rank: int, stream: str) -> BinaryIO:
        """A rank's log ("stdout" or "stderr"), appended to. Raises OSError."""
        return os.fdopen(_create(layout.log_path(self.dir, rank, stream), APPEND), "ab")

    def mark_logs(self, rank: int, text: str) -> None:
        """A line in both of a rank's logs (append-only), e.g. where a restart begins."""
        self.rank_paths(rank)
        for stream in layout.STREAMS:
            try:
                with self.open_log(rank, stream) as f:
                    f.write(f"\n{layout.LOG_MARK}{text}{layout.LOG_MARK_END}\n".encode())
            except OSError as exc:  # a full disk costs the marker, nothing else
                self.failed(exc)

    def new_dump(self, rank: int) -> Path:
        """A new, empty stack dump file of the rank, named by the time. Raises OSError."""
        stacks = self.rank_paths(rank).stacks
        stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{int(time.time() * 1000) % 1000:03d}"
        n = 0
        while True:
            path = stacks / (stamp + (f"-{n}" if n else "") + layout.STACK_SUFFIX)
            try:
                os.close(_create(path, os.O_WRONLY | os.O_EXCL))
                return path
            except FileExistsError:  # two dumps in the same millisecond
                n += 1

    # ------------------------------------------------------------ run files ----
    def open_append(self, name: str) -> TextIO:
        """A .jsonl file of the run (gpu.jsonl) opened to append lines to. Raises OSError."""
        return os.fdopen(_create(self.dir / name, APPEND), "a", encoding="utf-8")

    def replace(self, name: str, lines: Iterable[str]) -> None:
        """A file of the run rewritten whole (gpu.jsonl thinned). Raises OSError."""
        _replace(self.dir / name, lines)

    def write_json(self, name: str, data: Any, private: bool = False) -> None:
        try:
            _replace(self.dir / name, [json.dumps(data, indent=1, default=str)], 0o600 if private else 0o644)
        except OSError as exc:
            self.failed(exc)

    def update_json(self, name: str, **fields: Any) -> None:
        """Add fields to a JSON file of the run (run.json gets its end this way)."""
        data = textfiles.read_json(self.dir, name) or {}
        data.update(fields)
        self.write_json(name, data)

    # ---------------------------------------------------------------- events ----
    def event(self, event: str, rank: int | None = None, ts: float | None = None, **fields: Any) -> dict[str, Any]:
        return self._write(eventlines.record(event, rank, time.time() if ts is None else ts, fields))

    def report(self, rank: int, ts: float, fields: Mapping[str, Any]) -> dict[str, Any]:
        """A report event; fields from eventlines.report_fields (their order is the readers')."""
        return self._write(eventlines.record(Event.REPORT.value, rank, ts, fields))

    def _write(self, rec: dict[str, Any]) -> dict[str, Any]:
        try:
            line = json.dumps(rec, default=str, allow_nan=False) + "\n"
        except ValueError:  # NaN/inf: spelled "nan"/"inf" as on the wire, so each line stays JSON
            from mpwatch.contract.protocol import encode_lossy

            line = encode_lossy(rec).decode() + "\n"
        with self._lock:
            if self._events is None:
                return rec
            try:
                self._events.write(line)
                self.events_written += 1
                self.events_size += len(line)  # JSON is ASCII: characters are bytes
            except OSError as exc:
                self.failed(exc)
            if self.events_size > self._thin_at and self._thinner is None:
                self._thinner = threading.Thread(target=self._thin, name="mpwatch-events-thin", daemon=True)
                self._thinner.start()
        return rec

    def _thin(self) -> None:
        """Thinning thread: the file up to now is rewritten thinned outside the lock; then,
        under it, the lines written meanwhile are copied after it and the file is swapped."""
        path, tmp = self.dir / layout.EVENTS, self.dir / (layout.EVENTS + ".thin")
        try:
            with self._lock:
                if self._events is None:
                    return
                self._events.flush()
                cut = self.events_size
            with os.fdopen(_create(tmp, TRUNCATE, 0o644), "wb") as out:
                thinning.thin_file(path, out, cut, int(self.events_cap * thinning.TARGET))
                with self._lock:
                    if self._events is None:  # the run closed meanwhile: leave the file whole
                        return
                    self._events.flush()
                    thinning.append_rest(path, out, cut)
                    out.close()
                    self._events.close()
                    os.replace(tmp, path)
                    self._open_events()
                    self.thinned += 1
                    # Thinning that freed little (a file of notable events) is not retried at once.
                    self._thin_at = max(self.events_cap, self.events_size + self.events_cap // 4)
        except OSError as exc:
            self.failed(exc)
            with self._lock:
                self._thin_at = self.events_size + self.events_cap // 4
                if self._events is None or self._events.closed:
                    try:
                        self._open_events()
                    except OSError:
                        self._events = None
        finally:
            tmp.unlink(missing_ok=True)
            self._thinner = None

    def flush(self) -> None:
        with self._lock:
            if self._events is None:
                return
            try:
                self._events.flush()
            except OSError as exc:
                self.failed(exc)

    def close(self) -> None:
        thinner = self._thinner
        if thinner is not None:  # a pass under way finishes first (it needs the lock)
            thinner.join(60.0)
        with self._lock:
            if self._events is not None:
                try:
                    self._events.close()
                except OSError as exc:
                    self.failed(exc)
                self._events = None

    def failed(self, exc: OSError) -> None:
        """Remember the first disk error (the supervisor raises it as an alert)."""
        if self.disk_error is None:
            self.disk_error = f"cannot write the run directory {self.dir}: {exc.strerror or exc}"
