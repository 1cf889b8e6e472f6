"""What the detail and logs views need, from the source (a live run, or a replay at its
cursor) or, once a live run has ended, from its run directory (logs, report events, stack
dumps). Runs on worker threads only."""
from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path

from mpwatch.contract.status import Event
from mpwatch.rundir import writer
from mpwatch.sources.local import ClientError
from mpwatch.sources.source import Source

Curves = dict[int, list[tuple[float, float]]]

MAX_DUMP_CHARS = 20000


def history_from_events(run_dir: Path, ranks: Collection[int] | None = None, limit: int = 2000) -> Curves:
    """{rank: [(step, loss)]} from the rank's own report events in events.jsonl (a child
    process's are left out, as the live history leaves them out; every other point dropped
    until each curve fits `limit`)."""
    out: Curves = {}
    try:  # opened apart from the loop: only a file that cannot be opened means "no history"
        f = open(Path(run_dir) / writer.EVENTS, encoding="utf-8", errors="replace")  # noqa: SIM115
    except OSError:
        return out
    with f:
        for line in f:
            if '"report"' not in line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            r = rec.get("rank")
            if rec.get("event") != Event.REPORT or rec.get("loss") is None or (ranks is not None and r not in ranks):
                continue
            if "child_of" in rec:  # a process the worker started reported it: its own curve, not its rank's
                continue
            pts = out.setdefault(r, [])
            pts.append((rec.get("step") if rec.get("step") is not None else len(pts), rec["loss"]))
            if len(pts) > limit:
                out[r] = pts[::2]
    return out


def histories(source: Source | None, run_dir: Path | None, ranks: list[int], live: bool) -> Curves:
    if live and source is not None:
        out: Curves = {}
        try:
            for r in ranks:
                out[r] = source.history(r)
            return out
        except ClientError:
            pass
    return history_from_events(run_dir, set(ranks)) if run_dir else {}


def log_tail(source: Source | None, run_dir: Path | None, rank: int, stream: str, lines: int,
             live: bool) -> list[str]:
    if live and source is not None:
        try:
            return source.logs(rank, stream, lines)
        except ClientError:
            pass
    if run_dir is None:
        return []
    return writer.tail_lines(writer.rank_dir(run_dir, rank) / f"{stream}.log", lines)


def read_dump(path: str | None, run_dir: Path | None = None) -> str:
    if not path:
        return ""
    p = Path(path)
    if not p.is_absolute() and run_dir is not None:
        p = Path(run_dir) / p
    try:
        with open(p, encoding="utf-8", errors="replace") as f:
            text = f.read(MAX_DUMP_CHARS + 1)
    except OSError as exc:
        return f"(cannot read {p}: {exc.strerror})"
    cut = len(text) > MAX_DUMP_CHARS
    text = "\n".join(writer.printable(line) for line in text[:MAX_DUMP_CHARS].splitlines())
    return text + ("\n... (truncated)" if cut else "")
