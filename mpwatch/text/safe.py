"""The one sanitiser of text mpwatch prints to a terminal: every CLI line (`summary`, `ctl
status` here or over ssh, `ls`, logs, error lines, the headless lines) goes through it, so
bytes from a run's files, a worker's output or a remote status can never move the cursor,
retitle the window or hide text. Control characters (ESC, C0 and C1, DEL) and unprintable
code points are shown as '?'. Pure; any thread.

The TUI draws through Rich `Text` objects (tui.widgets.cells), which never interpret
markup; what it shows of logs and dumps goes through `printable` too (tui.rundata).
"""
from __future__ import annotations

from collections.abc import Iterable

WIDTH = 400  # a line longer than this is cut with an ellipsis
LINE_WIDTH = 4000  # a whole CLI line (a table row, a summary line) is cut only past this


def printable(line: str, width: int = WIDTH) -> str:
    """Control bytes and binary garbage shown as '?' so a terminal stays sane; cut at width."""
    out = line if line.isprintable() else "".join(c if (c.isprintable() or c == "\t") else "?" for c in line)
    return out if len(out) <= width else out[: width - 1] + "…"


def text(lines: str | Iterable[str], width: int = LINE_WIDTH) -> str:
    """Lines for a terminal (a CLI's output), each made printable: one string, newline-joined."""
    if isinstance(lines, str):
        lines = lines.split("\n")
    return "\n".join(printable(line, width) for line in lines)


def printable_tree(value: object, width: int = WIDTH) -> object:
    """A JSON-like value (a status, a summary, a registry entry) with every string in it,
    keys included, made printable: what a text view may print of it, field by field."""
    if isinstance(value, str):
        return printable(value, width)
    if isinstance(value, dict):
        return {printable(k, width) if isinstance(k, str) else k: printable_tree(v, width)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [printable_tree(v, width) for v in value]
    return value
