"""The one sanitiser of text mpwatch prints to a terminal: every CLI line (`summary`, `ctl
status` here or over ssh, `ls`, logs, error lines, the headless lines) and every text the TUI
draws goes through it, so bytes from a run's files, a worker's output or a remote status can
never move the cursor, retitle the window or hide text. Control characters (ESC, C0 and C1,
DEL) and unprintable code points are shown as '?'. Pure; any thread.

What it returns is a `Safe`: a str that this module alone makes. The TUI's render layer and
widgets take only `Safe` text (tui.render.segs' Seg, Line and Cell; the widgets' setters in
tui.widgets), so mypy refuses a field that would reach the screen without passing here.
"""
from __future__ import annotations

from collections.abc import Iterable

WIDTH = 400  # a line longer than this is cut with an ellipsis
LINE_WIDTH = 4000  # a whole CLI line (a table row, a summary line) is cut only past this


class Safe(str):
    """Text a terminal may show as it is: one line, no control character (a tab at most, in a
    CLI line). Made only by this module (tests/test_structure.py holds the house to that)."""

    __slots__ = ()


def printable(line: str, width: int = WIDTH) -> Safe:
    """Control bytes and binary garbage shown as '?' so a terminal stays sane; cut at width."""
    if type(line) is Safe and len(line) <= width:
        return line
    out = line if line.isprintable() else "".join(c if (c.isprintable() or c == "\t") else "?" for c in line)
    return Safe(out if len(out) <= width else out[: width - 1] + "…")


def clean(line: str, width: int = LINE_WIDTH) -> Safe:
    """A line for the TUI: as `printable`, and a tab a space (a cell has no tab stops)."""
    if type(line) is Safe and "\t" not in line and len(line) <= width:
        return line
    return printable(line.replace("\t", " "), width)


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
