"""The run's files read back, whatever state a run left them in: a JSON file (None when it is
missing or garbled), a .jsonl file line by line (the one way: a torn last line, written half
when read, is skipped and counted apart from garbled ones), a log's tail made printable.

The primitives of rundir.reader and of every module that reads a run file; they never
write. Run on the caller's thread.
"""
from __future__ import annotations

import json
import os
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpwatch.text.safe import printable


@dataclass
class Skipped:
    """What a pass over a .jsonl file skipped."""

    bad: int = 0  # whole lines that are no JSON
    torn: bool = False  # the last line, cut mid-write (a run still writing, or killed while it wrote)


def parse_lines(lines: Iterable[str], needles: Collection[str] | None = None,
                skipped: Skipped | None = None) -> Iterator[object]:
    """The JSON value of each line; lines that are no JSON are skipped (and counted into
    `skipped`). With needles, lines holding none of them are skipped unparsed (a cheap
    prefilter)."""
    for line in lines:
        if needles is not None and not any(n in line for n in needles):
            continue
        try:
            yield json.loads(line)
        except ValueError:
            if skipped is None:
                continue
            if line.endswith("\n"):
                skipped.bad += 1
            else:
                skipped.torn = True


def jsonl_values(path: Path | str, needles: Collection[str] | None = None,
                 skipped: Skipped | None = None) -> Iterator[object]:
    """The JSON values of a .jsonl file's lines, oldest first (parse_lines); no file is
    none, a file that cannot be read raises OSError."""
    try:
        f = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return
    with f:
        yield from parse_lines(f, needles, skipped)


def read_jsonl(path: Path | str, kinds: Collection[str] | None = None, needles: Collection[str] | None = None,
               skipped: Skipped | None = None) -> Iterator[dict[str, Any]]:
    """The records (JSON objects) of a .jsonl file (events.jsonl, gpu.jsonl), oldest first,
    those whose `event` is in kinds when given; a torn or garbled line is skipped."""
    if kinds is not None and needles is None:
        needles = [f'"{k}"' for k in kinds]
    for rec in jsonl_values(path, needles, skipped):
        if isinstance(rec, dict) and (kinds is None or rec.get("event") in kinds):
            yield rec


def read_json_file(path: Path) -> tuple[object, str | None]:
    """(value, None), or (None, why) for a file missing, unreadable or not JSON."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return json.load(f), None
    except FileNotFoundError:
        return None, "missing"
    except OSError as exc:
        return None, f"unreadable ({exc.strerror})"
    except ValueError:
        return None, "not JSON (cut short or garbled)"


def read_json(run_dir: Path | str, name: str) -> dict[str, Any] | None:
    """A JSON file of the run directory (run.json, control.json, final.json); None when it
    is missing, unreadable or not a JSON object (a run still writing it, or not a run)."""
    data, _ = read_json_file(Path(run_dir) / name)
    return data if isinstance(data, dict) else None


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
    lines = data.decode("utf-8", errors="replace").splitlines()
    if start > 0 and lines:
        lines = lines[1:]  # the first line was cut by the seek
    return [printable(line) for line in lines[-n:]]
