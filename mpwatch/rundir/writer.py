"""The run directory's one writer: every file of a run is made here (rundir.layout names
them), by the supervisor's RunStore, and before it by the run's claim (rundir.claim: the
directory itself, and supervisor.log for the TUI's launch). No other module creates a run
file (but rundir.rank_files: a rank's own files, its profiles and allocator snapshots, made by
its process by these rules, in a folder made here): the GPU timeline appends to gpu.jsonl and
rewrites it through RunStore, a rank's logs and stack dumps are opened here and written by their
owners.

Hostile by default. A run directory is made fresh (`mkdir`, which fails when anything is
there, a planted link included), 0700, in a runs folder others can neither swap nor rename it
out of (rundir.runs_folder), opened first and used by its fd; an existing `--run-dir` is taken only when
it is a real, empty directory of this user that nobody else may write in, and its mode is
left as it was (`open_run_dir`). RunStore then holds the directory open and makes every file
relative to it, never through a link (O_NOFOLLOW), never a FIFO or device (each is checked
to be a regular file after a non-blocking open), each 0600; a file that must be new is made
with O_EXCL. So another user can neither point the run's writes elsewhere nor read them.

Report events are downsampled (supervisor.workers.ledger): a rank's latest report at most once
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

import contextlib
import errno
import json
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any, BinaryIO, TextIO

from mpwatch.contract import Event
from mpwatch.rundir import eventlines, layout, textfiles, thinning
from mpwatch.rundir.runs_folder import DIR_FLAGS, open_runs_folder, refused
from mpwatch.settings import Settings

APPEND = os.O_WRONLY | os.O_APPEND
NEW = os.O_WRONLY | os.O_EXCL  # a file that must not be there yet
FILE_MODE = 0o600  # every file of a run: the owner's alone, whatever the folder's mode
DirId = tuple[int, int]  # (st_dev, st_ino) of a directory: the one a launcher made (cli.tui_launch)


def _regular(fd: int, name: str) -> int:
    """fd when it is a regular file (opened O_NONBLOCK, now blocking again); else closed and refused."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise refused(f"{name} is not a regular file")
    os.set_blocking(fd, True)
    return fd


def _create(dir_fd: int, name: str, flags: int, mode: int = FILE_MODE) -> int:
    """The one place a file of a run is opened for writing, made when missing: its fd. name is
    relative to the run directory (dir_fd); its last part is never a link, and a FIFO or device
    there is refused before anything could block on it."""
    fd = os.open(name, flags | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, mode, dir_fd=dir_fd)
    return _regular(fd, name)


def _mkdir(dir_fd: int, name: str) -> None:
    """The one place a folder inside a run is made (a rank's, its stacks/), 0700; one already
    there must be a real directory."""
    try:
        os.mkdir(name, 0o700, dir_fd=dir_fd)
    except FileExistsError:
        os.close(os.open(name, DIR_FLAGS, dir_fd=dir_fd))  # ELOOP/ENOTDIR when it is not one


def make_run_dir(path: Path, own_folder: bool = False) -> int:
    """A fresh run directory, 0700, and its fd: FileExistsError when anything is at path. It is
    made inside its folder opened first (open_runs_folder; own_folder: the default runs folder),
    so that folder cannot be swapped for another between the check and the mkdir."""
    pfd = open_runs_folder(path.parent, own_folder)
    try:
        os.mkdir(path.name, 0o700, dir_fd=pfd)
        fd = os.open(path.name, DIR_FLAGS, dir_fd=pfd)
    finally:
        os.close(pfd)
    try:
        os.fchmod(fd, 0o700)  # whatever the umask
        _check_own(fd, path)
    except OSError:
        os.close(fd)
        raise
    return fd


def _check_own(fd: int, path: Path) -> os.stat_result:
    st = os.fstat(fd)
    if st.st_uid != os.getuid():
        raise refused(f"{path} belongs to another user (uid {st.st_uid})")
    return st


def open_run_dir(path: Path, made: DirId | None = None) -> int:
    """The run directory at path, open: made fresh when missing; an existing one only when it
    is a real, empty directory of this user that no one else may write in (its mode is left
    alone); with `made`, the very directory a launcher made for this run (same inode, 0700,
    holding nothing but supervisor.log). Raises OSError; its strerror says why."""
    if made is None:
        try:
            return make_run_dir(path)
        except FileExistsError:
            pass
    try:
        fd = os.open(path, DIR_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise refused("it is a link or not a directory") from None
        raise
    try:
        st = _check_own(fd, path)
        names = set(os.listdir(fd))
        if made is not None:
            if (st.st_dev, st.st_ino) != made or stat.S_IMODE(st.st_mode) != 0o700 \
                    or not names <= {layout.SUPERVISOR_LOG}:
                raise refused("it is not the directory its launcher made")
        elif names & {layout.RUN_JSON, layout.EVENTS}:
            raise refused("it already holds a run; choose another --run-dir")
        elif names:
            raise refused("it is not empty; give a new or empty folder")
        elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise refused("other users may write in it")
    except OSError:
        os.close(fd)
        raise
    return fd


def open_supervisor_log(run_fd: int) -> BinaryIO:
    """supervisor.log, appended to: where the TUI's launch sends a supervisor's output."""
    return os.fdopen(_create(run_fd, layout.SUPERVISOR_LOG, APPEND), "ab")


class RunStore:
    def __init__(self, run_dir: Path | str, settings: Settings):
        self.dir = Path(run_dir)
        self._fd: int | None = None  # the run directory, held open from create() on
        self._lock = threading.Lock()
        self._events: IO[str] | None = None
        self.disk_error: str | None = None
        # the supervisor's fault boundary, for what fails in this store's own thread (the thinning)
        self.on_bug: Callable[[str, BaseException], object] | None = None
        self.events_written = 0
        # events.jsonl's cap in bytes (MPWATCH_EVENTS_MB), its size, and its thinning
        self.events_cap = thinning.cap_bytes(settings.events_mb)
        self.events_size = 0
        self.thinned = 0  # thinning passes so far
        self._thin_at = self.events_cap  # the size that starts the next pass
        self._thinner: threading.Thread | None = None

    def create(self, fd: int | None = None, made: DirId | None = None) -> None:
        """Take the run directory (writer.open_run_dir; fd: one already taken, rundir.claim's)
        and start events.jsonl, new. Raises OSError."""
        if self._fd is None:
            self._fd = fd if fd is not None else open_run_dir(self.dir, made)
        self._open_events(new=True)

    @contextlib.contextmanager
    def _at(self) -> Iterator[int]:
        """The run directory's fd: the one held, else (a store never created: tests, a
        timeline alone) the directory opened by its path for this call."""
        if self._fd is not None:
            yield self._fd
            return
        fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            yield fd
        finally:
            os.close(fd)

    def _open(self, name: str, flags: int) -> int:
        with self._at() as d:
            return _create(d, name, flags)

    def _open_events(self, new: bool = False) -> None:
        # open for the run's whole life (a thinning pass reopens it); close() closes it
        fd = self._open(layout.EVENTS, NEW | os.O_APPEND if new else APPEND)
        self._events = os.fdopen(fd, "a", buffering=1 << 16, encoding="utf-8")
        self.events_size = self._events.tell()

    def open_supervisor_log(self) -> BinaryIO:
        """supervisor.log, appended to (supervisor.errors writes the supervisor's log there)."""
        return os.fdopen(self._open(layout.SUPERVISOR_LOG, APPEND), "ab")

    # ------------------------------------------------------------ rank files ----
    def rank_paths(self, rank: int) -> layout.RankPaths:
        """A rank's paths, its folders made and its stack file (where the worker's faulthandler
        and the dumper write) there."""
        paths = layout.rank_paths(self.dir, rank)
        rank_dir = paths.dir.name
        try:
            with self._at() as d:
                _mkdir(d, rank_dir)
                _mkdir(d, f"{rank_dir}/{layout.STACKS}")
                os.close(_create(d, f"{rank_dir}/{layout.STACK_FILE}", APPEND))
        except OSError as exc:  # a full disk: the caller's open() fails and says so
            self.failed(exc)
        return paths

    def open_log(self, rank: int, stream: str) -> BinaryIO:
        """A rank's log ("stdout" or "stderr"), appended to. Raises OSError."""
        name = layout.log_path(self.dir, rank, stream).relative_to(self.dir)
        return os.fdopen(self._open(str(name), APPEND), "ab")

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
                os.close(self._open(str(path.relative_to(self.dir)), NEW))
                return path
            except FileExistsError:  # two dumps in the same millisecond
                n += 1

    # ----------------------------------------------------- a rank's action files ----
    def action_dir(self, rank: int, folder: str) -> Path:
        """rank-N/<folder>/ (a profile's trace goes to rank-N/profiles/), made 0700 when
        missing, where the rank's own process writes through rundir.rank_files. Raises OSError."""
        paths = self.rank_paths(rank)
        with self._at() as d:
            _mkdir(d, f"{paths.dir.name}/{folder}")
        return paths.dir / folder

    # ------------------------------------------------------------ run files ----
    def open_append(self, name: str) -> TextIO:
        """A .jsonl file of the run (gpu.jsonl) opened to append lines to. Raises OSError."""
        return os.fdopen(self._open(name, APPEND), "a", encoding="utf-8")

    def open_read(self, name: str) -> BinaryIO:
        """A file of the run read back by its writer (events.jsonl, to thin it). Raises OSError."""
        with self._at() as d:
            fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=d)
        return os.fdopen(_regular(fd, name), "rb")

    def _replace(self, name: str, lines: Iterable[str]) -> None:
        """Write a file whole through a new temporary one swapped in: a reader sees the old or
        the new, never half. Raises OSError."""
        tmp = f".{name}.{secrets.token_hex(4)}.tmp"
        with self._at() as d:
            try:
                with os.fdopen(_create(d, tmp, NEW), "w", encoding="utf-8") as f:
                    f.writelines(lines)
                os.replace(tmp, name, src_dir_fd=d, dst_dir_fd=d)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=d)

    def replace(self, name: str, lines: Iterable[str]) -> None:
        """A file of the run rewritten whole (gpu.jsonl thinned). Raises OSError."""
        self._replace(name, lines)

    def write_json(self, name: str, data: Any) -> bool:
        """A JSON file of the run written whole (or not at all: False, the disk error kept)."""
        try:
            self._replace(name, [json.dumps(data, indent=1, default=str)])
        except OSError as exc:
            self.failed(exc)
            return False
        return True

    def reserve(self, nbytes: int) -> None:
        """Keep `nbytes` of the disk for the run's last files (layout.RESERVE), until
        `release_reserve`; nothing when the disk has not that room now."""
        try:
            with self._at() as d:
                fd = _create(d, layout.RESERVE, NEW)
                try:
                    os.posix_fallocate(fd, 0, nbytes)
                finally:
                    os.close(fd)
        except OSError:
            self.release_reserve()

    def release_reserve(self) -> None:
        with contextlib.suppress(OSError), self._at() as d:
            os.unlink(layout.RESERVE, dir_fd=d)

    def update_json(self, name: str, **fields: Any) -> None:
        """Add fields to a JSON file of the run (run.json gets its end this way)."""
        data = textfiles.read_json(self.dir, name) or {}
        data.update(fields)
        self.write_json(name, data)

    # ---------------------------------------------------------------- events ----
    def event(self, event: str, rank: int | None = None, ts: float | None = None,
              **fields: Any) -> dict[str, Any]:
        return self._write(eventlines.record(event, rank, time.time() if ts is None else ts, fields))

    def report(self, rank: int, ts: float, fields: Mapping[str, Any]) -> dict[str, Any]:
        """A report event; fields from eventlines.report_fields (their order is the readers')."""
        return self._write(eventlines.record(Event.REPORT.value, rank, ts, fields))

    def _write(self, rec: dict[str, Any]) -> dict[str, Any]:
        try:
            line = json.dumps(rec, default=str, allow_nan=False) + "\n"
        except ValueError:  # NaN/inf: spelled "nan"/"inf" as on the wire, so each line stays JSON
            from mpwatch.contract import encode_lossy

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
        tmp = f".{layout.EVENTS}.{secrets.token_hex(4)}.thin"
        try:
            with self._lock:
                if self._events is None:
                    return
                self._events.flush()
                cut = self.events_size
            with os.fdopen(self._open(tmp, NEW), "wb") as out:
                thinning.thin_file(lambda: self.open_read(layout.EVENTS), out, cut,
                                   int(self.events_cap * thinning.TARGET))
                with self._lock:
                    if self._events is None:  # the run closed meanwhile: leave the file whole
                        return
                    self._events.flush()
                    thinning.append_rest(self.open_read(layout.EVENTS), out, cut)
                    out.close()
                    self._events.close()
                    with self._at() as d:
                        os.replace(tmp, layout.EVENTS, src_dir_fd=d, dst_dir_fd=d)
                    self._open_events()
                    self.thinned += 1
                    # Thinning that freed little (a file of notable events) is not retried at once.
                    self._thin_at = max(self.events_cap, self.events_size + self.events_cap // 4)
        except Exception as exc:  # noqa: BLE001 - a thread of the supervisor's: said, never its end
            if isinstance(exc, OSError):
                self.failed(exc)
            elif self.on_bug is not None:
                self.on_bug("event thinning", exc)
            with self._lock:
                self._thin_at = self.events_size + self.events_cap // 4
                if self._events is None or self._events.closed:
                    try:
                        self._open_events()
                    except OSError:
                        self._events = None
        finally:
            with contextlib.suppress(OSError), self._at() as d:
                os.unlink(tmp, dir_fd=d)
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
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def failed(self, exc: OSError) -> None:
        """Remember the first disk error (the supervisor raises it as an alert)."""
        if self.disk_error is None:
            self.disk_error = f"cannot write the run directory {self.dir}: {exc.strerror or exc}"
