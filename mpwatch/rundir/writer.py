"""The run directory: run.json, events.jsonl, per-rank logs and stack dumps.

Layout (a contract other tools read):
    run.json               command, options, start time; finish time and exit code at the end
    events.jsonl           one JSON object a line: ts, event, rank, fields of its own
    control.json           how to reach the control socket (0600: it holds the authkey)
    final.json             the last status snapshot, written when the run ends
    rank-N/stdout.log      every byte the worker (and its children) wrote
    rank-N/stderr.log
    rank-N/stacks/<time>.txt  stack dumps
The directory is 0700: another user can neither list it nor read the logs.

Report events are downsampled (supervisor.ipc.ledger): a rank's latest report at most once
a second, with `n` (the reports it stands for) and `dropped`; a worker's last report is
always written, so the curve keeps its shape and its end. Every other event is written as
it happens. Disk errors never stop a run: the first one is remembered in `disk_error` for
the supervisor to raise as an alert.

events.jsonl stays bounded (rundir.thinning): past its cap (MPWATCH_EVENTS_MB, default
128) the older half of its report events is thinned to every other one of each series, on
a thread of its own, and a `thinned` event says what went; no other event is ever dropped.

Any thread may write events (`_lock`); the supervisor's main thread flushes them.
`read_json` and `read_events` are the readers of these files for every other module.
"""
from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from mpwatch.rundir import thinning as events_thinning

EVENTS = "events.jsonl"
RUN_JSON = "run.json"
CONTROL_JSON = "control.json"
FINAL_JSON = "final.json"
# mpwatch's own lines in a rank's logs (where a restart or a resize begins): never a cause.
MARK_OPEN, MARK_CLOSE = "--- mpwatch: ", " ---"


def rank_dir(run_dir: Path | str, rank: int) -> Path:
    return Path(run_dir) / f"rank-{rank}"


@dataclass(frozen=True)
class RankPaths:
    dir: Path  # rank-N/
    stdout: Path
    stderr: Path
    stack_file: Path  # where the worker's faulthandler writes
    stacks: Path  # the dumps, one file each


class RunStore:
    def __init__(self, run_dir: Path | str, events_cap: int | None = None):
        self.dir = Path(run_dir)
        self._lock = threading.Lock()
        self._events: IO[str] | None = None
        self.disk_error: str | None = None
        self.events_written = 0
        # events.jsonl's cap in bytes (None: MPWATCH_EVENTS_MB), its size, and its thinning
        self.events_cap = events_thinning.cap_from_env(os.environ) if events_cap is None else events_cap
        self.events_size = 0
        self.thinned = 0  # thinning passes so far
        self._thin_at = self.events_cap  # the size that starts the next pass
        self._thinner: threading.Thread | None = None

    def create(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        self._open_events()

    def _open_events(self) -> None:
        # open for the run's whole life (a thinning pass reopens it); close() closes it
        self._events = open(self.dir / EVENTS, "a", buffering=1 << 16, encoding="utf-8")  # noqa: SIM115
        self.events_size = self._events.tell()

    def rank_paths(self, rank: int) -> RankPaths:
        d = rank_dir(self.dir, rank)
        try:
            (d / "stacks").mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a full disk: the caller's open() fails and says so
            self.failed(exc)
        return RankPaths(d, d / "stdout.log", d / "stderr.log", d / "faulthandler.out", d / "stacks")

    def mark_logs(self, rank: int, text: str) -> None:
        """A line in both of a rank's logs (append-only), e.g. where a restart begins."""
        paths = self.rank_paths(rank)
        for path in (paths.stdout, paths.stderr):
            try:
                with open(path, "ab") as f:
                    f.write(f"\n{MARK_OPEN}{text}{MARK_CLOSE}\n".encode())
            except OSError as exc:  # a full disk costs the marker, nothing else
                self.failed(exc)

    def write_json(self, name: str, data: Any, private: bool = False) -> None:
        path = self.dir / name
        tmp = path.with_suffix(".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1, default=str)
            os.replace(tmp, path)
        except OSError as exc:
            self.failed(exc)

    def update_json(self, name: str, **fields: Any) -> None:
        """Add fields to a JSON file of the run (run.json gets its end this way)."""
        data = read_json(self.dir, name) or {}
        data.update(fields)
        self.write_json(name, data)

    def event(self, event: str, rank: int | None = None, ts: float | None = None, **fields: Any) -> dict[str, Any]:
        rec: dict[str, Any] = {"ts": round(time.time() if ts is None else ts, 6), "event": event, "rank": rank}
        rec.update(fields)
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
        path, tmp = self.dir / EVENTS, self.dir / (EVENTS + ".thin")
        try:
            with self._lock:
                if self._events is None:
                    return
                self._events.flush()
                cut = self.events_size
            events_thinning.thin_file(path, tmp, cut, int(self.events_cap * events_thinning.TARGET))
            with self._lock:
                if self._events is None:  # the run closed meanwhile: leave the file whole
                    return
                self._events.flush()
                events_thinning.append_rest(path, tmp, cut)
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


def read_events(run_dir: Path | str, kinds: set[str] | None = None) -> Iterator[dict[str, Any]]:
    """Events of a run, oldest first; a torn last line (a run still writing) is skipped."""
    return read_jsonl(Path(run_dir) / EVENTS, kinds)


def read_jsonl(path: Path | str, kinds: set[str] | None = None) -> Iterator[dict[str, Any]]:
    """The records of a .jsonl file (events.jsonl, gpu.jsonl), oldest first, those whose
    `event` is in kinds when given; a torn or unreadable line is skipped, no file is none."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and (kinds is None or rec.get("event") in kinds):
                    yield rec
    except FileNotFoundError:
        return


def read_json(run_dir: Path | str, name: str) -> dict[str, Any] | None:
    """A JSON file of the run directory (run.json, control.json, final.json); None when it
    is missing, unreadable or not a JSON object (a run still writing it, or not a run)."""
    try:
        with open(Path(run_dir) / name, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


FINAL_WAIT_S = 3.0  # after a run's socket closes, how long its final.json may take to appear


def wait_final(run_dir: Path | str, stop: threading.Event | None = None,
               timeout: float = FINAL_WAIT_S) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(final.json, run.json) of a run whose socket closed, once run.json says it finished
    with final.json written, or as they are after `timeout` (or when `stop` is set)."""
    deadline = time.monotonic() + timeout
    while True:
        info, final = read_json(run_dir, RUN_JSON), read_json(run_dir, FINAL_JSON)
        if (final is not None and info and info.get("finished")) or time.monotonic() > deadline:
            return final, info
        if stop is None:
            time.sleep(0.1)
        elif stop.wait(0.1):
            return final, info


def tail_lines(path: Path, n: int = 20, max_bytes: int = 64 * 1024, end: int | None = None) -> list[str]:
    """The last n lines of a log before byte `end` (its end when None), made printable; at most
    max_bytes are read back from there (logs can be huge)."""
    try:
        with open(path, "rb") as f:
            if end is None:
                end = f.seek(0, os.SEEK_END)
            start = max(0, end - max_bytes)
            f.seek(start)
            data = f.read(end - start)
    except OSError:
        return []
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    if start > 0 and lines:
        lines = lines[1:]  # the first line was cut by the seek
    return [printable(as_shown(line)) for line in lines[-n:]]


def as_shown(line: str) -> str:
    """A line as a terminal shows it: each carriage return goes back to its start, and what
    follows overwrites it (a progress bar redrawn with \r, as tqdm draws, is its latest state:
    one line, not one per redraw; the file keeps every byte)."""
    if "\r" not in line:
        return line
    shown = ""
    for part in line.split("\r"):
        shown = part + shown[len(part):]
    return shown


def printable(line: str, width: int = 400) -> str:
    """Control bytes and binary garbage shown as '?' so a terminal stays sane."""
    out = "".join(c if (c.isprintable() or c == "\t") else "?" for c in line)
    return out if len(out) <= width else out[: width - 1] + "…"
