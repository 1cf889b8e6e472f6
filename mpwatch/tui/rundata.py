"""What the detail and logs views need, from the source (a live run, or a replay at its
cursor) or, once a live run has ended, from its run directory (logs, report events, stack
dumps). Runs on worker threads only."""
from __future__ import annotations

from pathlib import Path

from mpwatch.rundir import layout, reader
from mpwatch.rundir.reader import Curves
from mpwatch.rundir.textfiles import open_regular, tail_lines
from mpwatch.sources.local import ClientError
from mpwatch.sources.source import Source
from mpwatch.text.safe import printable

MAX_DUMP_CHARS = 20000


def histories(source: Source | None, run_dir: Path | None, ranks: list[int], live: bool) -> Curves:
    if live and source is not None:
        out: Curves = {}
        try:
            for r in ranks:
                out[r] = source.history(r)
            return out
        except ClientError:
            pass
    return reader.history(run_dir, set(ranks)) if run_dir else {}


def log_tail(source: Source | None, run_dir: Path | None, rank: int, stream: str, lines: int,
             live: bool) -> list[str]:
    if live and source is not None:
        try:
            return source.logs(rank, stream, lines)
        except ClientError:
            pass
    if run_dir is None:
        return []
    return tail_lines(layout.log_path(run_dir, rank, stream), lines)


def read_dump(path: str | None, run_dir: Path | None = None) -> str:
    if not path:
        return ""
    p = Path(path)
    if not p.is_absolute() and run_dir is not None:
        p = Path(run_dir) / p
    try:
        with open_regular(p) as f:
            text = f.read(4 * MAX_DUMP_CHARS + 4).decode("utf-8", errors="replace")[:MAX_DUMP_CHARS + 1]
    except OSError as exc:
        return f"(cannot read {p}: {exc.strerror})"
    cut = len(text) > MAX_DUMP_CHARS
    text = "\n".join(printable(line) for line in text[:MAX_DUMP_CHARS].splitlines())
    return text + ("\n... (truncated)" if cut else "")
