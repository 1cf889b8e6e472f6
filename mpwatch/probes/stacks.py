"""Stack capture through the faulthandler that the start-up hook arms on SIGUSR1, and
reading those dumps back (which function is each process stuck in?).

faulthandler writes from C without the GIL, so it dumps a main thread blocked in a lock,
a socket read, a pipe read, a C loop or a pure-Python loop. Each process of a rank
appends to the rank's stack file (forked children inherit the handler and the file), so
before signalling a process we write our own header line (pid, time), then copy the new
bytes into rank-N/stacks/<time>.txt. A process is only signalled when it catches
SIGUSR1 (the default action would kill it), and never while stopped or a zombie (it
could not answer; a stopped one would dump later, unasked): py-spy --nonblocking, when
installed, reads those. py-spy may add native frames on request. Runs on the supervisor's
dump threads (mpwatch-dump), one per dump; a lock per rank keeps two dumps of one rank apart.
"""
from __future__ import annotations

import errno
import os
import signal
import stat
import threading
import time
from pathlib import Path
from typing import TextIO

from mpwatch.probes import pyspy
from mpwatch.text.stackfmt import (  # noqa: F401 - re-exported
    COLLECTIVES,
    HEADER,
    collective_frame,
    fmt_frame,
    is_user_file,
    main_thread,
    parse,
    summarize,
)

SETTLE_S = 0.05  # output is taken as complete once the file stops growing this long...
SLOW_SETTLE_S = 0.3  # ...or this long, when it does not end like a whole dump (a busy box)
MAX_WAIT_S = 2.0

PYSPY_AT_ONCE = 2  # a run of 256 ranks stalling together must not start 256 py-spys
_pyspy_slots = threading.BoundedSemaphore(PYSPY_AT_ONCE)
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _lock_for(path: Path) -> threading.Lock:
    # Two dumps of one rank at once (a stall and a request) would interleave in its file.
    with _locks_guard:
        return _locks.setdefault(str(path), threading.Lock())


def _proc_status(pid: int) -> tuple[str | None, int | None]:
    """(state letter, SigCgt mask) from /proc/PID/status; psutil does not expose SigCgt."""
    state = mask = None
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("State:"):
                    state = line.split()[1]
                elif line.startswith("SigCgt:"):
                    mask = int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        pass
    return state, mask


def handles_sigusr1(pid: int) -> bool:
    """True when the process catches SIGUSR1."""
    _, mask = _proc_status(pid)
    return bool(mask and mask & (1 << (signal.SIGUSR1 - 1)))


def _wait_settled(path: Path, start_size: int, max_wait: float = MAX_WAIT_S, settle: float = SETTLE_S,
                  need_growth: bool = True) -> int:
    deadline = time.monotonic() + max_wait
    last, last_change = start_size, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.01)
        try:
            size = path.stat().st_size
        except OSError:
            return last
        if size != last:
            last, last_change = size, time.monotonic()
        elif (size > start_size or not need_growth) and time.monotonic() - last_change >= settle:
            return size
    return last


def _open_file(path: Path | str, flags: int) -> int:
    """A dump's file (the worker's stack file, the dump itself): never through a link, never
    blocking on a FIFO a worker put there, a regular file only. Raises OSError."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    os.set_blocking(fd, True)
    return fd


def _append(path: Path | str) -> TextIO:
    return os.fdopen(_open_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a")


def _read_span(path: Path, start: int, end: int) -> str:
    with os.fdopen(_open_file(path, os.O_RDONLY), "rb") as f:
        f.seek(start)
        return f.read(end - start).decode("utf-8", errors="replace")


_OUTERMOST = (" in <module>", " in _run_module_as_main", " in _run_code")


def _looks_whole(chunk: str) -> bool:
    """faulthandler lists the main thread last, and its outermost frame is the script's
    <module> (or runpy's, under -m); "..." ends a truncated stack."""
    lines = chunk.rstrip("\n").splitlines()
    last = lines[-1] if lines else ""
    return last.endswith(_OUTERMOST) or last.strip() in ("...", "<no Python frame>")


def _faulthandler_dump(pid: int, stack_file: Path, label: str) -> tuple[str, str | None]:
    """(text, note) for one process through its SIGUSR1 handler."""
    with _append(stack_file) as f:
        start = f.seek(0, os.SEEK_END)
        f.write(f"{HEADER}{pid} at {time.strftime('%H:%M:%S')} {label}\n")
        header_end = f.tell()
    os.kill(pid, signal.SIGUSR1)
    t0 = time.monotonic()
    end = _wait_settled(Path(stack_file), header_end)
    chunk = _read_span(stack_file, start, end)
    if end > header_end and not _looks_whole(chunk):
        # A handler preempted mid-write pauses the file: give it longer before copying.
        left = max(0.0, MAX_WAIT_S - (time.monotonic() - t0))
        end = _wait_settled(Path(stack_file), end, max_wait=left, settle=SLOW_SETTLE_S, need_growth=False)
        chunk = _read_span(stack_file, start, end)
    if end == header_end:
        return chunk + "(no output: the process did not answer; it may be in a kernel wait)\n", \
            f"pid {pid}: no output"
    return chunk, None


def capture(pids: list[int], stack_file: Path, out: Path, label: str = "",
            native: bool = False) -> tuple[Path, list[str]]:
    """Dump every listed process's threads into `out` (a new file the caller made: the run's
    writer, rundir.writer.RunStore.new_dump); returns (out, notes). Notes say which processes
    could not be dumped and why. With native=True, py-spy --native output (C frames too)
    follows (see add_native: it is slower, so a caller in a hurry passes native=False and
    calls add_native after announcing the file)."""
    notes: list[str] = []
    parts: list[str] = []
    stopped: list[int] = []
    with _lock_for(stack_file):
        for pid in pids:
            state, mask = _proc_status(pid)
            if state is None:
                notes.append(f"pid {pid}: gone")
                continue
            if state in ("Z", "X"):
                notes.append(f"pid {pid}: a zombie (exited, not yet reaped); no stack")
                continue
            if state in ("T", "t"):
                stopped.append(pid)
                continue
            if not (mask and mask & (1 << (signal.SIGUSR1 - 1))):
                notes.append(f"pid {pid}: no stack handler (not a Python process of this run); not signalled")
                continue
            try:
                chunk, note = _faulthandler_dump(pid, stack_file, label)
            except OSError as exc:
                notes.append(f"pid {pid}: {exc.strerror}")
                continue
            parts.append(chunk)
            if note:
                notes.append(note)
    with _append(out) as f:
        f.write("".join(parts) or "# no Python stack could be dumped\n")
    extra = _read_stopped(stopped, notes)
    if extra or notes:
        with _append(out) as f:
            f.write("".join(extra) + "".join(f"# {n}\n" for n in notes))
    if native:
        notes += add_native(out, [p for p in pids if p not in stopped])
    return out, notes


def _read_stopped(pids: list[int], notes: list[str]) -> list[str]:
    """Stopped processes are never signalled (they would dump later, unasked): py-spy
    --nonblocking reads them from outside where it can; notes say where it cannot."""
    out = []
    for pid in pids:
        ok, text = pyspy.dump(pid, nonblocking=True)
        if ok:
            out.append(f"{HEADER}{pid} (stopped; py-spy --nonblocking)\n{text}")
        else:
            notes.append(f"pid {pid}: stopped, not signalled; {text}")
    return out


def _clip(text: str, width: int = 240) -> str:
    # C++ template frames run to thousands of characters; the head says enough.
    return "".join((ln[:width] + " ...\n") if len(ln) > width + 1 else ln for ln in text.splitlines(True))


def add_native(out: Path, pids: list[int]) -> list[str]:
    """Append py-spy --native stacks (C and C++ frames too) of each live process to `out`;
    returns notes on what could not be had. py-spy stops each process for a moment."""
    exe = pyspy.find()
    parts: list[str] = []
    notes: list[str] = []
    for pid in pids:
        if _proc_status(pid)[0] in (None, "Z", "X", "T", "t"):
            continue
        with _pyspy_slots:
            ok, text = pyspy.dump(pid, native=True, exe=exe)
        if ok:
            parts.append(f"--- py-spy --native: pid {pid} ---\n{_clip(text)}")
        else:
            notes.append(f"pid {pid}: {text}")
            if exe is None or "not permitted" in text:
                break  # the same answer for every process
    with _append(out) as f:
        f.write("".join(parts) + "".join(f"# {n}\n" for n in notes))
    return notes
