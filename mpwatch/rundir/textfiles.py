"""The run's files read back, whatever state a run (or someone else) left them in: a JSON file
(None when it is missing or garbled), a .jsonl file line by line (the one way: a torn last
line, written half when read, is skipped and counted apart from garbled ones), a log's tail
made printable.

Hostile by default: a run file is opened never through a link and without blocking
(`open_regular`: O_NOFOLLOW | O_NONBLOCK, then only a regular file is read), so a FIFO, a
device or a directory where a file should be is "unreadable", never a hang; every read is
bounded (a .jsonl line past MAX_LINE is skipped unread and counted, a JSON file past
MAX_JSON is not read); JSON is read strictly (NaN, Infinity and numbers too big for a float
read as null: a timestamp or a count is then unknown, never infinite) and never deeper than
contract.jsonread.MAX_DEPTH (a line nested 100,000 deep is one bad line, never a RecursionError).

The primitives of rundir.reader and of every module that reads a run file; they never
write. Run on the caller's thread.
"""
from __future__ import annotations

import errno
import os
import stat
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from mpwatch.contract import jsonread
from mpwatch.text.safe import printable

MAX_LINE = 4 << 20  # a .jsonl line longer than this is skipped unread (an event is well under 64 KiB)
# a JSON file longer than this is not read (a status of thousands of workers is a few MiB)
MAX_JSON = 256 << 20
_SKIP_CHUNK = 1 << 20  # how an over-long line is read past
LINE_KEEP = 4096  # bytes of a log's line read back at most (tail_lines): a longer one is shown cut
SCAN_MAX = 16 << 20  # bytes tail_lines looks back through at most for the starts of its lines
_SCAN_BLOCK = 64 * 1024
CUT = "…"  # where a line shown cut was cut


def loads(text: str | bytes) -> Any:
    """A run file's JSON value, read strictly and within bounds (contract.jsonread: NaN,
    Infinity, 1e999 and integers of hundreds of digits are null; nesting past MAX_DEPTH is
    refused before the parser recurses). Raises ValueError, never RecursionError."""
    return jsonread.loads_strict(text)


def open_regular(path: Path | str) -> BinaryIO:
    """A run file opened to read: never through a link, never blocking (a FIFO is refused
    before anyone could wait on it), only a regular file. Raises OSError: FileNotFoundError
    when missing; otherwise its strerror says why ("not a regular file", "a link")."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a link (never followed)", str(path)) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
    except OSError:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def is_regular(path: Path | str) -> bool:
    """A regular file is there itself (not a link, a FIFO, a folder); False where this user may not look."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


@dataclass
class Skipped:
    """What a pass over a .jsonl file skipped."""

    bad: int = 0  # whole lines that are no JSON
    torn: bool = False  # the last line, cut mid-write (a run still writing, or killed while it wrote)
    long: int = 0  # lines past MAX_LINE, skipped unread


def bounded_lines(f: BinaryIO, skipped: Skipped | None = None, limit: int = MAX_LINE) -> Iterator[bytes]:
    """A file's lines (each with its newline, the last maybe without), none longer than
    `limit`: a longer one is read past, never held, and counted into skipped.long."""
    while True:
        line = f.readline(limit + 1)
        if not line:
            return
        if len(line) > limit and not line.endswith(b"\n"):
            while True:
                rest = f.readline(_SKIP_CHUNK)
                if not rest or rest.endswith(b"\n"):
                    break
            if skipped is not None:
                skipped.long += 1
            continue
        yield line


def jsonl_values(path: Path | str, needles: Collection[str] | None = None,
                 skipped: Skipped | None = None) -> Iterator[object]:
    """The JSON values of a .jsonl file's lines, oldest first; lines that are no JSON are
    skipped (and counted into `skipped`). With needles, lines holding none of them are
    skipped unparsed (a cheap prefilter). No file is none; a file that cannot be read (or
    is no regular file) raises OSError."""
    try:
        f = open_regular(path)
    except FileNotFoundError:
        return
    marks = None if needles is None else [n.encode() for n in needles]
    with f:
        for line in bounded_lines(f, skipped):
            if marks is not None and not any(m in line for m in marks):
                continue
            try:
                yield loads(line)
            except ValueError:
                if skipped is None:
                    continue
                if line.endswith(b"\n"):
                    skipped.bad += 1
                else:
                    skipped.torn = True


def read_jsonl(path: Path | str, kinds: Collection[str] | None = None, needles: Collection[str] | None = None,
               skipped: Skipped | None = None) -> Iterator[dict[str, Any]]:
    """The records (JSON objects) of a .jsonl file (events.jsonl, gpu.jsonl), oldest first,
    those whose `event` is in kinds when given; a torn or garbled line is skipped."""
    if kinds is not None and needles is None:
        needles = [f'"{k}"' for k in kinds]
    for rec in jsonl_values(path, needles, skipped):
        if isinstance(rec, dict) and (kinds is None or rec.get("event") in kinds):
            yield rec


def first_line(path: Path | str, limit: int = MAX_LINE) -> bytes:
    """A file's first line (b"" when it is missing, unreadable or longer than limit)."""
    try:
        with open_regular(path) as f:
            line = f.readline(limit + 1)
    except OSError:
        return b""
    return b"" if len(line) > limit else line


def read_json_file(path: Path) -> tuple[object, str | None]:
    """(value, None), or (None, why) for a file missing, unreadable, too big or not JSON."""
    try:
        with open_regular(path) as f:
            data = f.read(MAX_JSON + 1)
    except FileNotFoundError:
        return None, "missing"
    except OSError as exc:
        return None, f"unreadable ({exc.strerror})"
    if len(data) > MAX_JSON:
        return None, f"unreadable (larger than {MAX_JSON >> 20} MiB)"
    try:
        return loads(data), None
    except ValueError:
        return None, "not JSON (cut short or garbled)"


def read_json(run_dir: Path | str, name: str) -> dict[str, Any] | None:
    """A JSON file of the run directory (run.json, control.json, final.json); None when it
    is missing, unreadable or not a JSON object (a run still writing it, or not a run)."""
    data, _ = read_json_file(Path(run_dir) / name)
    return data if isinstance(data, dict) else None


def tail_bytes(path: Path, max_bytes: int, end: int | None = None) -> tuple[bytes, int]:
    """(at most max_bytes of a file before byte `end` (its end when None), where they
    start). Raises OSError."""
    with open_regular(path) as f:
        if end is None:
            end = f.seek(0, os.SEEK_END)
        start = max(0, end - max_bytes)
        f.seek(start)
        return f.read(end - start), start


def tail_lines(path: Path, n: int = 20, max_bytes: int = 64 * 1024, end: int | None = None) -> list[str]:
    """The last n lines of a log before byte `end` (its end when None), made printable. A line
    is bounded by cutting it, never by dropping it (nor the lines before it): one longer than
    LINE_KEEP shows its end when it holds carriage returns (a progress bar's last redraw),
    else its start, marked with "…". Lines are looked for through at most max(max_bytes,
    SCAN_MAX) bytes back from `end` (logs can be huge); past that the oldest line is shown
    from where the look began. A log that is no regular file (a FIFO a worker left) reads as
    empty, at once."""
    try:
        with open_regular(path) as f:
            stop = f.seek(0, os.SEEK_END) if end is None else end
            spans = _line_spans(f, stop, n, max(max_bytes, SCAN_MAX))
            return [printable(_shown_line(f, span)) for span in spans]
    except OSError:
        return []


def _line_spans(f: BinaryIO, end: int, n: int, scan: int) -> list[tuple[int, int, bool]]:
    """(start, stop, whole) of the last n lines before byte `end`, oldest first: stop is where
    the line's newline is (or `end`); whole is False for a line whose start lies further back
    than `scan` bytes (its span then starts where the look began). Reads blocks backwards."""
    if end <= 0 or n <= 0:
        return []
    f.seek(end - 1)
    stop = end - 1 if f.read(1) == b"\n" else end  # a newline that ends the log ends its last line
    lo, pos = max(0, end - scan), stop
    spans: list[tuple[int, int, bool]] = []
    while len(spans) < n:
        if pos <= lo:
            spans.append((lo, stop, lo == 0))
            break
        base = max(lo, pos - _SCAN_BLOCK)
        f.seek(base)
        block = f.read(pos - base)
        i = len(block)
        while len(spans) < n and (nl := block.rfind(b"\n", 0, i)) >= 0:
            spans.append((base + nl + 1, stop, True))
            stop, i = base + nl, nl
        pos = base
    spans.reverse()
    return spans


def _shown_line(f: BinaryIO, span: tuple[int, int, bool]) -> str:
    """One line of a log as a terminal would show it, read back whole or cut (tail_lines)."""
    start, stop, whole = span
    if whole and stop - start <= LINE_KEEP:
        f.seek(start)
        return as_shown(f.read(stop - start).decode("utf-8", errors="replace"))
    f.seek(stop - LINE_KEEP)
    tail = f.read(LINE_KEEP)
    if b"\r" in tail:  # redrawn in place: its last redraws are what a terminal shows
        return as_shown(tail[tail.index(b"\r") + 1:].decode("utf-8", errors="replace"))
    if not whole:
        return CUT + tail.decode("utf-8", errors="replace")
    f.seek(start)
    return f.read(LINE_KEEP).decode("utf-8", errors="replace") + CUT


def as_shown(line: str) -> str:
    """A line as a terminal shows it: each carriage return goes back to its start, and what
    follows overwrites it (a progress bar redrawn with \\r, as tqdm draws, is its latest state:
    one line, not one per redraw; the file keeps every byte)."""
    if "\r" not in line:
        return line
    shown = ""
    for part in line.split("\r"):
        shown = part + shown[len(part):]
    return shown
