"""`mpwatch ctl [--run RUN] logs RANK [--stderr] [--lines N] [--follow]`: a rank's log read
from the run directory, so a finished run's too. --follow prints what is appended (logs
are append-only across restarts) until the run ends, then what is left; Ctrl-C ends it
quietly (main() turns it into exit code 130). Main thread."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from mpwatch.cli.args import die
from mpwatch.rundir import reader, registry
from mpwatch.rundir.textfiles import as_shown, is_regular, open_regular, tail_lines
from mpwatch.settings import Settings
from mpwatch.text.safe import printable

POLL_S = 0.2  # how often --follow looks for new bytes
ENDED_POLL_S = 1.0  # and whether the run has ended
MAX_PARTIAL = 1 << 20  # a line longer than this is printed in pieces


def _print(lines: list[str]) -> None:
    if lines:
        sys.stdout.write("".join(printable(ln) + "\n" for ln in lines))
        sys.stdout.flush()


def _follow(rd: reader.RunDir, path: Path, offset: int) -> None:
    """Print what is appended from `offset` on, whole lines at a time, until the run ends."""
    partial = b""
    ended_at = 0.0
    last_check = 0.0
    while True:
        try:
            with open_regular(path) as f:
                f.seek(offset)
                data = f.read(1 << 20)
        except FileNotFoundError:
            data = b""  # the rank has not started yet
        offset += len(data)
        *whole, partial = (partial + data).split(b"\n")
        if len(partial) > MAX_PARTIAL:  # a line without end: shown in pieces, never held whole
            whole.append(partial)
            partial = b""
        _print([as_shown(ln.decode("utf-8", errors="replace")) for ln in whole])
        now = time.monotonic()
        if ended_at and not data:  # drained after the end
            break
        if not ended_at and now - last_check >= ENDED_POLL_S:
            last_check = now
            if not reader.read(rd.path).live():
                ended_at = now  # one more read for what the last moments wrote
                continue
        if len(data) < 1 << 20:
            time.sleep(POLL_S)
    _print([partial.decode("utf-8", errors="replace")] if partial else [])


def show_logs(run: str | None, rank: int, stream: str, lines: int, follow: bool, settings: Settings) -> int:
    try:
        rd = reader.read(registry.find_run_dir(run, settings.tmpdir))
    except (registry.RunError, reader.NotARunDir) as exc:
        return die(str(exc))
    files = rd.ranks()
    known = set(rd.known_ranks()) | set(files)
    if rank not in files:
        if rank in known:
            return die(f"run {rd.run.run_id} has no folder for rank {rank} any more (rank-{rank}/ is gone)")
        have = f"ranks {min(known)}-{max(known)}" if known else "no ranks yet"
        return die(f"no rank {rank} in run {rd.run.run_id} ({have})")
    path = files[rank].stdout if stream == "stdout" else files[rank].stderr
    if os.path.lexists(path) and not is_regular(path):
        return die(f"{path} is not a regular file (not a log mpwatch wrote)")
    try:
        size = path.stat().st_size
    except OSError:
        size = 0  # the rank has not started yet
    if lines:
        _print(tail_lines(path, lines, max(64 * 1024, lines * 512), end=size))  # --follow goes on from size
    if follow:
        try:
            _follow(rd, path, size)
        except OSError as exc:  # replaced meanwhile by something that is no log
            return die(f"cannot read {path}: {exc.strerror}")
    return 0
